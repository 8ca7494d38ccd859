"""The plateau runs as files: one `<arm>-seed<N>.csv` per run, read into draws, tabulated
and plotted per folder (`plateau_policies --report`).

Shared by the runner (`plateau_policies.py`, which writes the files) and the figure
(`plateau_target.py`, which reads every folder), so that neither imports the other's job.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: the committed runs, one sub-folder per GPU call or CPU batch
SOURCE = Path(__file__).resolve().parents[3] / "results" / "plateau-policies"
#: where k = 10 levels off in results/fig11-plateau/ (62 % at rounds 208-217 there): the
#: plateau regime's target (plateau_setup.PLATEAU_SETTINGS)
TARGET = 0.62


# ---- reading the runs, one folder's table and plot ---------------------------------------
def read_rows(path: Path) -> list[dict]:
    """A written run's rounds, as the CSV holds them (text)."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def arm_name(path: Path) -> tuple[str, int]:
    """(arm, seed) from a CSV's name, `<arm>-seed<N>.csv`."""
    arm, _, seed = path.stem.rpartition("-seed")
    return arm, int(seed)


def arm_policy(arm: str) -> tuple[str, dict[str, float]]:
    """(policy, parameters) from an arm's name as `main` writes it: the policy, then one
    `-<name><value>` per parameter (`static-k10`, `adaptive-block_se1`)."""
    import re

    policy, *parts = arm.split("-")
    params = {}
    for part in parts:
        match = re.fullmatch(r"([A-Za-z_]+)([-+0-9.e]+)", part)
        if match is None:
            raise ValueError(f"arm {arm!r}: {part!r} is not <parameter><number>")
        params[match[1]] = float(match[2])
    return policy, params


def time_to_target(rows: list[dict], target: float) -> tuple[float, bool, int]:
    """(hours, reached, rounds): the simulated time of the first round at or above the
    target, or, for a run cut off before it, the time it ran (a lower bound)."""
    for row in rows:
        if float(row["accuracy"]) >= target:
            return float(row["sim_time_s"]) / 3600, True, int(row["round"])
    last = rows[-1] if rows else {"sim_time_s": 0.0, "round": 0}
    return float(last["sim_time_s"]) / 3600, False, int(last["round"])


def report(folder: Path, target: float = TARGET) -> Path:
    """plateau-policies.md in `folder`: per arm and seed, time to target (or the bound a run
    cut off gives), rounds, mean k and round time, and each arm against the seed's best
    static k that reached the target."""
    draws = load_draws(folder, target, pattern="*-seed*.csv")
    if not draws:
        raise FileNotFoundError(f"{folder}: no <arm>-seed<N>.csv to report")
    lines = [
        f"# Time to {target:.0%} per arm (the plateau regime, uniform set-up)",
        "",
        "| arm | seed | hours to target | rounds | mean k | k range | mean round (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    draws.sort(key=lambda x: (x.seed, x.arm))
    for x in draws:
        mean_round = np.mean([float(r["round_time_s"]) for r in x.rows[: x.rounds]])
        shown = f"{x.hours:.3f}" if x.reached else f"> {x.hours:.3f} (cut off)"
        lines.append(
            f"| {x.arm} | {x.seed} | {shown} | {x.rounds} | {np.mean(x.ks):.1f} | "
            f"{min(x.ks)}-{max(x.ks)} | {mean_round:.1f} |"
        )
    lines += ["", "Against the seed's fastest static k that reached the target:", ""]
    for seed in sorted({x.seed for x in draws}):
        static = {x.arm: x.hours for x in draws if x.seed == seed and x.reached and x.static_k}
        if not static:
            lines.append(f"- seed {seed}: no static k reached the target")
            continue
        best = min(static, key=static.__getitem__)
        for x in draws:
            if x.seed == seed and x.static_k is None:
                ratio = x.hours / static[best] - 1
                bound = "" if x.reached else " (cut off: at least)"
                lines.append(f"- seed {seed}: {x.arm} {ratio:+.1%} against {best}{bound}")
    out = folder / "plateau-policies.md"
    out.write_text("\n".join(lines) + "\n")
    plot({(x.arm, x.seed): x.rows for x in draws}, target, folder / "plateau-policies.png")
    return out


def plot(runs: dict[tuple[str, int], list[dict]], target: float, out: Path) -> Path:
    """Accuracy against simulated hours (the target as a line: who crosses it first), and
    the k each policy chose by round."""
    from powertrip.app.report.figures import new_figure, save_figure

    fig = new_figure(width=12, height=4.5)
    left, right = fig.subplots(1, 2)

    def base(arm: str) -> str:  # "adaptive [call2]" -> "adaptive": one colour per arm
        return arm.split(" [")[0]

    arms = sorted({base(arm) for arm, _ in runs})
    colours = {arm: f"C{i % 10}" for i, arm in enumerate(arms)}
    seeds = sorted({seed for _, seed in runs})
    styles = {seed: ("-", "--", ":", "-.")[i % 4] for i, seed in enumerate(seeds)}
    for (arm, seed), rows in sorted(runs.items()):
        hours = [float(r["sim_time_s"]) / 3600 for r in rows]
        accuracy = [100 * float(r["accuracy"]) for r in rows]
        style = dict(color=colours[base(arm)], linestyle=styles[seed], linewidth=1)
        left.plot(hours, accuracy, label=f"{arm} s{seed}", **style)
        if "static" not in arm:
            right.plot(range(1, len(rows) + 1), [int(r["k"]) for r in rows], **style)
    left.axhline(100 * target, color="grey", linewidth=0.8)
    left.set(xlabel="simulated hours", ylabel="held-out accuracy (%)", ylim=(40, 65),
             title=f"accuracy against time (target {target:.0%})")  # fmt: skip
    left.legend(fontsize=6, ncol=2)
    right.set(xlabel="round", ylabel="k", yscale="log", title="k chosen by the policies")
    return save_figure(fig, out)


# ---- every folder: the figure's claims, table and plot ---------------------------------
@dataclass(frozen=True)
class Draw:
    """One committed run: its arm, seed, folder, time to target (or the bound a run that
    stopped short gives) and the k it used."""

    arm: str
    seed: int
    source: str
    hours: float
    reached: bool
    rounds: int
    ks: tuple[int, ...]
    #: the CSV's rounds, as text
    rows: tuple[dict, ...] = field(default=(), compare=False, repr=False)

    @property
    def static_k(self) -> int | None:
        prefix = "static-k"
        return int(self.arm[len(prefix) :]) if self.arm.startswith(prefix) else None

    def shown(self) -> str:
        return f"{self.hours:.2f} h" if self.reached else f"> {self.hours:.2f} h"


def load_draws(
    folder: Path = SOURCE, target: float = TARGET, pattern: str = "*/*-seed*.csv"
) -> list[Draw]:
    """Every `<arm>-seed<N>.csv` in `folder`'s sub-folders (or as `pattern` says), as
    draws."""
    draws = []
    for path in sorted(folder.glob(pattern)):
        rows = read_rows(path)
        if not rows:
            continue
        arm, seed = arm_name(path)
        hours, reached, rounds = time_to_target(rows, target)
        ks = tuple(int(r["k"]) for r in rows[:rounds])
        draws.append(Draw(arm, seed, path.parent.name, hours, reached, rounds, ks, tuple(rows)))
    return draws
