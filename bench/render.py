"""The speed figures the docs show, rendered from the committed record
(bench/results/results.json, bench/record.py), never typed: one table "figure | value |
reference (same run) | target | met? | machine | date" and the list of the runs that measured
them. FIGURES declares every figure's target once; a figure the record lacks reads "not
measured". `make docs` and `make bench` write the table into bench/RESULTS.md,
docs/performance.md and docs/benchmarks.md (`--write`).

    python -m bench.render [--write | --check]    # print the table, or write/check the pages
"""

from __future__ import annotations

import argparse
import operator
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import record
from powertrip.app.report.blocks import write_pages

NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Figure:
    """One row: `key` in the record, what it measures, how it prints, and its target."""

    key: str
    what: str
    unit: str = ""  # "" for a ratio, else printed after the value ("s", "ms", "GB/s")
    target: tuple[str, float] | None = None  # (">=" or "<=", bound), in the figure's unit
    reference: str = ""  # what it is measured against
    reference_key: str = ""  # the reference's own figure in the same run, where recorded
    reference_unit: str = ""

    def met(self, value: float) -> str:
        """The verdict against the target: yes or no; empty where the figure has none."""
        if self.target is None:
            return ""
        op, bound = self.target
        return "yes" if {">=": operator.ge, "<=": operator.le}[op](value, bound) else "no"

    def target_text(self) -> str:
        if self.target is None:
            return ""
        op, bound = self.target
        return f"{op} {bound:g}" + (f" {self.unit}" if self.unit else "")


#: Every figure the docs show, in order, with its target (issue 7 and issue 67).
FIGURES: tuple[Figure, ...] = (
    Figure("train_vs_loop", "the system's training rate (20 sites x 10 steps, 4 services)",
           target=(">=", 1.5), reference="bare torch loop, same steps",
           reference_key="loop_site_steps_per_s", reference_unit="site-steps/s"),
    Figure("train_vs_flower", "the same against Flower's simulation", target=(">=", 2.0),
           reference="Flower simulation, same work", reference_key="flower_site_steps_per_s",
           reference_unit="site-steps/s"),
    Figure("train_vs_gemm", "training FLOP/s against the machine's GEMM", target=(">=", 0.75),
           reference="3072 x 3072 fp32 torch.mm", reference_key="gemm_gflops",
           reference_unit="GFLOP/s"),
    Figure("pinned_vs_native", "the bare loop on pinned kernels against the CPU's own",
           reference="POWERTRIP_CPU_KERNELS=native", reference_key="native_site_steps_per_s",
           reference_unit="site-steps/s"),
    Figure("transfer_vs_tcp", "model down + delta up through the services", target=(">=", 0.6),
           reference="raw TCP, same bytes", reference_key="raw_tcp_MBps", reference_unit="MB/s"),
    Figure("checked_tcp_vs_tcp", "TCP doing the contract's per-byte checks (a ceiling)",
           reference="raw TCP, same bytes", reference_key="raw_tcp_MBps", reference_unit="MB/s"),
    Figure("fedavg_vs_memcpy", "FedAvg over 100 CNN deltas", target=(">=", 0.6),
           reference="memcpy of the same bytes", reference_key="memcpy_GBps",
           reference_unit="GB/s"),
    Figure("int8_encode_vs_fp32", "a site's int8 delta encode (fp32 time / int8 time)",
           target=(">=", 0.9), reference="fp32 encode", reference_key="fp32_encode_ms",
           reference_unit="ms"),
    Figure("int8_receive_fedavg_vs_fp32", "the aggregator's int8 receive and FedAvg",
           reference="fp32 receive", reference_key="fp32_receive_fedavg_GBps",
           reference_unit="GB/s"),
    Figure("int8_wire_bytes_ratio", "int8 deltas' bytes on the wire", reference="fp32 bytes"),
    Figure("select_ms_p99_10000", "SelectSites over gRPC at 10,000 sites, p99", unit="ms",
           target=("<=", 20.0)),
    Figure("scale_overhead_ms_10000", "a round outside training at 10,000 sites", unit="ms",
           target=("<=", 50.0)),
    Figure("gpu_vs_loop", "100 sites in one vmap call on a GPU", target=(">=", 10.0),
           reference="sequential loop, same GPU", reference_key="gpu_loop_site_steps_per_s",
           reference_unit="site-steps/s"),
    Figure("qlora_base_memory_ratio", "QLoRA's 4-bit base, GPU memory",
           reference="LoRA on a float32 base"),
    Figure("run_startup_s", "one run's wall outside its round", unit="s", target=("<=", 2.0),
           reference="python -c 'import torch'", reference_key="torch_import_s",
           reference_unit="s"),
    Figure("run_before_round1_s", "of which before its first round (CLI, services up)",
           unit="s"),
    Figure("run_after_rounds_s", "of which after its last round (services down, report)",
           unit="s"),
    Figure("demo_wall_s", "`make demo`, after set-up", unit="s", target=("<=", 300.0)),
    Figure("demo_vs_loop", "`make demo` against the bare loop doing its site-steps",
           target=("<=", 1.0), reference="bare loop, same site-steps",
           reference_key="demo_loop_equivalent_s", reference_unit="s"),
    Figure("demo_vs_work", "the same, plus a bare forward pass over what it evaluated",
           target=("<=", 1.10), reference="bare loop + forward pass",
           reference_key="demo_work_equivalent_s", reference_unit="s"),
)  # fmt: skip
BY_KEY = {f.key: f for f in FIGURES}


def target_of(key: str) -> float:
    """A figure's bound (for a benchmark that reports against it, e.g. bench/scale.py)."""
    target = BY_KEY[key].target
    if target is None:
        raise KeyError(f"{key} has no target")
    return target[1]


def number(value: float, unit: str = "") -> str:
    """A figure as the table prints it: ratios to 3 decimals, times and rates by size."""
    if not unit:
        return f"{value:.3f}"
    digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 1 else 2
    return f"{value:,.{digits}f} {unit}"


def row(figure: Figure, found: dict[str, tuple[object, str, dict]]) -> str:
    """One figure's line of the table; "not measured" where the record lacks a number."""
    value, _, entry = found.get(figure.key, (None, "", {}))
    target, reference = figure.target_text(), figure.reference
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"| `{figure.key}` | {NOT_MEASURED} | {reference} | {target} | | | |"
    companion = entry.get("figures", {}).get(figure.reference_key)
    if record.is_number(companion):
        reference += f": {number(companion, figure.reference_unit)}"
    machine = str(entry.get("machine", "")).split(", ")[0]  # the CPU and cores, not the kernel
    date = str(entry.get("date", ""))[:10]
    return (
        f"| `{figure.key}` | {number(value, figure.unit)} | {reference} | {target} "
        f"| {figure.met(value)} | {machine} | {date} |"
    )


def table(rec: dict) -> str:
    """The docs' table of every figure in FIGURES, from a record (bench/record.py's form)."""
    found = record.figures(rec)
    lines = [
        "| figure | value | reference (same run) | target | met? | machine | date |",
        "|---|---|---|---|---|---|---|",
        *(row(f, found) for f in FIGURES),
    ]
    return "\n".join(lines) + "\n"


def runs(rec: dict) -> str:
    """Which run measured each benchmark's figures: machine, date, command, torch, note."""
    lines = []
    for name, entry in rec.get("benchmarks", {}).items():
        parts = [entry.get("machine", "machine not recorded"), entry.get("date", "")]
        parts.append(f"`{entry['command']}`" if entry.get("command") else "command not recorded")
        for key in ("torch", "kernels"):
            if entry.get(key):
                parts.append(f"{key} {entry[key]}")
        line = f"* `{name}`: " + "; ".join(p for p in parts if p)
        if entry.get("note"):
            note = str(entry["note"])
            line += f". {note[:1].upper()}{note[1:]}"
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else "* (no benchmark recorded yet)\n"


#: where the demo's wall goes (bench/demo.py's figures): (figure, what it is); the rest of
#: the rounds (profiles, selection, dispatch, aggregation) is their wall minus these
DEMO_PARTS = (
    ("demo_wall_train_s", "training (dispatch to the last delta in)"),
    ("demo_wall_eval_s", "held-out evaluation"),
    ("demo_wall_record_s", "recording (rounds.csv, checkpoints)"),
)


def demo_profile(rec: dict) -> str:
    """Where the measured demo's wall went, from its runs' wall.csv (bench/demo.py): each
    phase of its rounds, and what lies outside them (each run's start-up and shutdown, the
    report)."""
    found = record.figures(rec)
    value = {k: v for k, (v, _, _) in found.items() if k.startswith("demo_")}
    wall, rounds = value.get("demo_wall_s"), value.get("demo_wall_round_s")
    if not (record.is_number(wall) and record.is_number(rounds)):
        return (
            "No demo has been measured with its phases yet "
            "(`python bench/run.py --only demo --demo`).\n"
        )
    parts = [(what, value.get(key)) for key, what in DEMO_PARTS]
    if not all(record.is_number(v) for _, v in parts):
        return "The recorded demo has no per-phase figures.\n"
    rest = rounds - sum(v for _, v in parts)
    parts += [("the rest of the rounds (profiles, selection, aggregation)", rest),
              ("outside the rounds (each run's start-up and shutdown, the report)",
               wall - rounds)]  # fmt: skip
    lines = ["| where | wall | share |", "|---|---|---|"]
    lines += [f"| {what} | {number(v, 's')} | {v / wall:.0%} |" for what, v in parts]
    lines.append(f"| the demo, after set-up | {number(wall, 's')} | 100% |")
    steps, runs_rounds = value.get("demo_site_steps"), value.get("demo_rounds")
    if record.is_number(steps) and record.is_number(runs_rounds):
        lines.append("")
        lines.append(f"{int(runs_rounds)} rounds, {int(steps):,} site-steps.")
    return "\n".join(lines) + "\n"


ROOT = Path(__file__).resolve().parents[1]
#: the pages that show the speed figures, and the blocks each holds
PAGES = {
    ROOT / "bench" / "RESULTS.md": ("bench-table", "demo-profile", "bench-runs"),
    ROOT / "docs" / "performance.md": ("bench-table",),
    ROOT / "docs" / "benchmarks.md": ("bench-table", "bench-runs"),
}


def pages(rec: dict | None = None) -> dict[Path, dict[str, str]]:
    """Each page -> its rendered blocks, from the committed record."""
    rec = record.read() if rec is None else rec
    blocks = {"bench-table": table(rec), "bench-runs": runs(rec), "demo-profile": demo_profile(rec)}
    return {page: {name: blocks[name] for name in names} for page, names in PAGES.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the speed figures, from the record")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--write", action="store_true", help="rewrite the pages' blocks")
    how.add_argument("--check", action="store_true", help="exit 1 if a page differs")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        sys.stdout.write(table(record.read()))
        return 0
    return write_pages(pages(), ROOT, check=args.check, source="bench/results/results.json")


if __name__ == "__main__":
    sys.exit(main())
