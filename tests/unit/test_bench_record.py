"""The committed benchmark record (bench/record.py): a run replaces only the benchmarks it
measured, each kept with the machine, date and command that measured it, and a quick smoke
run never touches it."""

from __future__ import annotations

import json

from bench import record

OLD = {
    "benchmarks": {
        "startup": {
            "machine": "Old CPU 2 cores",
            "date": "2026-12-01",
            "command": "python bench/run.py --only startup",
            "figures": {"run_startup_s": 6.3},
        },
        "fedavg": {
            "machine": "Old CPU 2 cores",
            "date": "2026-12-01",
            "command": "python bench/run.py --only fedavg",
            "figures": {"fedavg_vs_memcpy": 0.5, "memcpy_GBps": 10.0},
        },
    }
}
RUN = {
    "machine": "New CPU 16 cores, Linux 6.1",
    "date": "2026-12-08 10:00:00 UTC",
    "command": "python bench/run.py --only startup",
    "torch": "2.13.0+cpu",
    "load_at_start": "load average 0.1",
    "run_startup_s": 1.5,  # flat figures in the run's own output are not provenance
}


def test_a_run_replaces_the_benchmarks_it_measured_and_keeps_the_others():
    merged = record.merge(OLD, RUN, {"startup": {"run_startup_s": 1.5, "torch_import_s": 1.0}})
    startup = merged["benchmarks"]["startup"]
    assert startup["figures"] == {"run_startup_s": 1.5, "torch_import_s": 1.0}
    assert startup["machine"] == "New CPU 16 cores, Linux 6.1"
    assert startup["date"] == "2026-12-08 10:00:00 UTC" and startup["torch"] == "2.13.0+cpu"
    assert "run_startup_s" not in startup  # provenance only beside the figures
    assert merged["benchmarks"]["fedavg"] == OLD["benchmarks"]["fedavg"]  # untouched
    assert OLD["benchmarks"]["startup"]["figures"] == {"run_startup_s": 6.3}  # not mutated


def test_a_benchmark_that_measured_nothing_keeps_its_last_figures():
    per = {"startup": {"run_startup_s": 1.5}, "demo": {"demo_wall_s": "not measured (pass --demo)"}}
    demo = {"date": "d", "figures": {"demo_wall_s": 634}}
    merged = record.merge({"benchmarks": {**OLD["benchmarks"], "demo": demo}}, RUN, per)
    assert merged["benchmarks"]["demo"] == demo
    gpu = {"gpu": {"gpu": "not measured: no CUDA"}}
    assert "gpu" not in record.merge(OLD, RUN, gpu)["benchmarks"]


def test_update_writes_the_merge_and_a_quick_run_writes_nothing(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(OLD))
    assert record.update(path, RUN, {"startup": {"run_startup_s": 9.9}}, quick=True) == []
    assert json.loads(path.read_text()) == OLD
    nothing = {"demo": {"demo_wall_s": "not measured (pass --demo)"}}
    assert record.update(tmp_path / "none.json", RUN, nothing, quick=False) == []
    assert not (tmp_path / "none.json").exists()
    assert record.update(path, RUN, {"startup": {"run_startup_s": 1.5}}, quick=False) == ["startup"]
    written = record.read(path)
    assert written["benchmarks"]["startup"]["figures"] == {"run_startup_s": 1.5}
    assert written["benchmarks"]["fedavg"] == OLD["benchmarks"]["fedavg"]
    assert record.figures(written)["fedavg_vs_memcpy"][:2] == (0.5, "fedavg")


def test_the_committed_record_names_machine_date_and_command_for_every_benchmark():
    for name, entry in record.read()["benchmarks"].items():
        assert {"machine", "date", "command", "figures"} <= entry.keys(), name
        assert "cores" in entry["machine"], name
        assert record.measured(entry["figures"]), name
