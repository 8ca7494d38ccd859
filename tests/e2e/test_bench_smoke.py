"""The benchmarks cannot break silently: `bench/run.py --quick` runs every benchmark once at
a tiny size, as `make bench` would, and each figure it should produce is there (its value is
not checked: speed targets are the benchmarks' own ratios, not tests). A change of default
once broke the transfer benchmark for weeks because nothing ran it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: one or more figures of each benchmark (bench/run.py's BENCHMARKS), each a number > 0
FIGURES = {
    "train": ("train_site_steps_per_s", "loop_site_steps_per_s", "train_vs_loop"),
    "kernels": ("pinned_site_steps_per_s", "native_site_steps_per_s", "pinned_vs_native"),
    "transfer": ("transfer_MBps", "raw_tcp_MBps", "transfer_vs_tcp", "bare_grpc_MBps"),
    "fedavg": ("fedavg_GBps", "memcpy_GBps", "fedavg_vs_memcpy"),
    "deltawire": ("int8_wire_bytes_ratio", "int8_encode_vs_fp32", "int8_receive_fedavg_vs_fp32"),
    "select": ("select_ms_p99_100", "select_ms_p99_10000"),
    "scale": ("scale_overhead_ms_100", "scale_overhead_ms_1000", "scale_growth_100_to_1000"),
    "startup": (
        "run_startup_s",
        "run_before_round1_s",
        "run_after_rounds_s",
        "torch_import_s",
        "startup_vs_torch_import",
    ),
}
#: figures that need what a machine may lack, with the figure they give where it has it
NEEDS_GPU = {"gpu": "gpu_site_steps_per_s", "qlora": "qlora_base_memory_ratio"}


def test_every_benchmark_runs_at_a_tiny_size_and_reports_its_figures(tmp_path):
    out = tmp_path / "bench.json"
    committed = ROOT / "bench" / "results" / "results.json"
    before = committed.read_text()
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert committed.read_text() == before, "a --quick run must not touch the committed record"
    results = json.loads(out.read_text())
    missing = [
        f"{bench}: {key} = {results.get(key)!r}"
        for bench, keys in FIGURES.items()
        for key in keys
        if not (isinstance(results.get(key), int | float) and results[key] > 0)
    ]
    assert not missing, "\n".join(missing)
    if importlib.util.find_spec("flwr") is not None:  # the bench extra's reference
        assert results.get("flower_site_steps_per_s", 0) > 0, results.get("flower_site_steps_per_s")
    for name, figure in NEEDS_GPU.items():  # a number on a GPU, else a reason why not
        measured = isinstance(results.get(figure), int | float)
        assert measured or str(results.get(name, "")).startswith("not measured:"), name
    assert "cores" in results["machine"]  # the CPU a figure was measured on, named
