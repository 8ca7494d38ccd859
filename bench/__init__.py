"""`make bench`'s benchmarks, one module per figure; `bench/run.py` is the driver.

Each module has `measure(args, work, results) -> dict`: `args` are run.py's parsed flags,
`work` a scratch directory, `results` the figures measured so far (Flower's ratio needs
training's); the dict it returns is added to the table in that order.  Two measure in a
fresh process of their own, each an entry point with its arguments on the command line:
`python -m bench.flower SITES STEPS ROUNDS` (Ray leaves threads and a daemon behind) and
`python -m bench.fedavg NUM_DELTAS` (its peak RSS must be the aggregation's); both print
one JSON object on stdout.
"""
