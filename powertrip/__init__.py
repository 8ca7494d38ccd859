"""PowerTrip: power- and link-aware site selection for geo-distributed training.

The shared library, in floors; each imports only the floors below it
(`tests/unit/test_import_graph.py` holds them to it):

* `powertrip.core`: the domain. The time model (Eqs. 3-7), FedAvg, power and site profiles,
  the workloads and their training step, the policy catalogue, the run configuration and the
  run-directory schema. Pure Python, numpy and torch: no gRPC, no CLI.
* `powertrip.v1`, `powertrip.rpc`, `powertrip.linkshaping`: the contract and the edge. The
  generated stubs of `proto/powertrip/v1`, the rpc helpers every service uses (servers,
  channels, chunked tensors, auth, TLS, metrics), and the links (`tc` shaping, probing).
* `powertrip.app`: what a user runs. The CLI, experiments (runs, comparisons, sweeps, the
  suite planner and executor), reports, site bundles. It starts the services as processes
  and never imports them.

The services under `services/` import `core` and the edge floor, never `app` and never each
other; in the library nothing imports `app` but `python -m powertrip` and the `powertrip`
script. The paper's reproduction (`reproduction/`, beside this package) builds on `app`;
nothing here imports it (the CLI finds its `reproduce` command by name).
"""

__version__ = "1.0.0"
