"""The committed record of the benchmarks' figures: bench/results/results.json.

`bench/run.py` writes a run's own figures, flat, to its `--out` file (latest.json by default)
and merges them here, benchmark by benchmark: each benchmark that measured a number replaces
its own entry, with the machine, date and command of the run that measured it, and every
other benchmark's entry stays as it was, with its own machine and date. So `--only startup`
updates startup's figures and keeps the rest. A `--quick` smoke run is never merged. The
docs render their speed figures from this file (bench/render.py), never by hand.

    {"benchmarks": {"startup": {"machine": ..., "date": ..., "command": ..., "torch": ...,
                                "figures": {"run_startup_s": 6.32, ...}}, ...}}
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "bench" / "results" / "results.json"
#: what a run says about itself, kept with each benchmark it measured
PROVENANCE = ("machine", "date", "command", "torch", "kernels", "load_at_start", "load_at_end")


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def measured(figures: dict) -> bool:
    """Whether a benchmark's output holds a figure, not only a reason why it has none
    ("not measured: ...", "skipped: ...")."""
    return any(is_number(v) for v in figures.values())


def read(path: Path = RECORD) -> dict:
    """The record at `path`; an empty one where there is no file yet."""
    if not path.is_file():
        return {"benchmarks": {}}
    record = json.loads(path.read_text())
    record.setdefault("benchmarks", {})
    return record


def merge(record: dict, run: dict, per_benchmark: dict[str, dict]) -> dict:
    """`record` with each benchmark of this run that measured a figure replaced by this run's
    figures and provenance (`run`'s PROVENANCE keys); every other entry is kept as it was."""
    benchmarks = dict(record.get("benchmarks", {}))
    for name, figures in per_benchmark.items():
        if measured(figures):
            entry = {k: run[k] for k in PROVENANCE if k in run}
            benchmarks[name] = {**entry, "figures": dict(figures)}
    return {**record, "benchmarks": benchmarks}


def update(path: Path, run: dict, per_benchmark: dict[str, dict], *, quick: bool) -> list[str]:
    """Merge a run into the record at `path` and write it; returns the benchmarks it updated.
    A quick (smoke) run writes nothing: its figures are not measurements; nor does a run
    that measured nothing."""
    updated = [name for name, figures in per_benchmark.items() if measured(figures)]
    if quick or not updated:
        return []
    record = merge(read(path), run, per_benchmark)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return updated


def figures(record: dict) -> dict[str, tuple[object, str, dict]]:
    """Every figure in the record -> (value, benchmark, that benchmark's entry)."""
    out: dict[str, tuple[object, str, dict]] = {}
    for name, entry in record.get("benchmarks", {}).items():
        for key, value in entry.get("figures", {}).items():
            out[key] = (value, name, entry)
    return out
