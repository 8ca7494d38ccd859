"""Small hand-written run directories for the tests of powertrip.app.report
(test_report_*.py): config.yaml, rounds.csv and summary.json the way the aggregator writes
them (no services, no training), and a check that a file is a real PNG."""

from __future__ import annotations

import json
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HEADER = (
    "round,sim_time_s,round_time_s,k,sites,accuracy,loss,compute_s,comm_s,wait_s,"
    "aggregation_s,predicted_round_time_s,bytes_up,bytes_down,straggler,mode,clock"
)
SITES = [
    {"site_id": f"site-{i:03d}", "power_fraction": p, "distance_miles": d,
     "bandwidth_bytes_per_s": 1.25e9 * 100 / d}
    for i, (p, d) in enumerate([(1.0, 150.0), (0.8, 900.0), (0.5, 2500.0), (0.2, 6000.0)])
]  # fmt: skip


def make_run(
    root: Path,
    policy: str,
    accuracies: list[float],
    round_s: float,
    ks: list[int] | None = None,
    target: float = 0.8,
    sites: bool = True,
    header: str = HEADER,
    stopped_reason: str | None = None,
    max_sim_hours: float = 0.0,
) -> Path:
    """Write config.yaml, rounds.csv and summary.json the way the aggregator does.

    Round i ends at round_s * (1.1 + 2.1 + ... ); the summary's stopped_reason defaults to
    'target' or 'max_rounds'."""
    run = root / policy
    run.mkdir(parents=True)
    ks = ks or [2] * len(accuracies)
    (run / "config.yaml").write_text(
        f"policy: {policy}\nworkload: synthetic\nnum_sites: 4\nseed: 7\nclock: simulated\n"
        f"work_model: local-steps\ntarget_accuracy: {target}\nupdate_size_gb: 2.5\n"
        f"max_sim_hours: {max_sim_hours}\n"
    )
    lines = [header]
    t = 0.0
    time_to_target = None
    for i, (acc, k) in enumerate(zip(accuracies, ks, strict=True), start=1):
        dt = round_s * (1 + 0.1 * i)
        t += dt
        chosen = ";".join(s["site_id"] for s in SITES[:k])
        lines.append(
            f"{i},{t},{dt},{k},{chosen},{acc},{1 - acc},{dt * 0.6},{dt * 0.35},{dt * 0.1},"
            f"{dt * 0.05},{dt * 0.9},1000,2000,site-001,normal,simulated"
        )
        if time_to_target is None and acc >= target:
            time_to_target = t
    (run / "rounds.csv").write_text("\n".join(lines) + "\n")
    summary = {
        "policy": policy,
        "workload": "synthetic",
        "clock": "simulated",
        "rounds": len(accuracies),
        "target_accuracy": target,
        "final_accuracy": accuracies[-1],
        "best_accuracy": max(accuracies),
        "time_to_target_s": time_to_target,
        "sim_time_s": t,
        "stopped_reason": stopped_reason or ("target" if time_to_target else "max_rounds"),
        "mean_k": sum(ks) / len(ks),
    }
    if sites:
        summary["sites"] = SITES
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
    return run


def assert_png(path: Path) -> None:
    assert path.is_file(), path
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > 5_000, f"{path} is suspiciously small ({len(data)} bytes)"
