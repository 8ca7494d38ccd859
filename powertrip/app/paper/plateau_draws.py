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
            lines.append(
                f"- seed {seed}: no static k run in this folder reached the target (the "
                "figure, `powertrip reproduce --figure 8-9-plateau`, compares across folders)"
            )
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
    """One row per seed: accuracy against simulated hours (the target as a line: who
    crosses it first) and the k each policy chose by round. A row per seed because 50
    draws on one axis hide each other; one colour per arm in a legend above the rows. A
    label `arm [draw]` names the draw: a second draw of an arm on a seed is dashed, and a
    draw replayed from another run (the same rounds) dotted, over that run's line."""
    import matplotlib
    from matplotlib.lines import Line2D

    from powertrip.app.report.figures import new_figure, save_figure

    def base(label: str) -> str:  # "adaptive [call2]" -> "adaptive": one colour per arm
        return label.split(" [")[0]

    arms = sorted({base(label) for label, _ in runs})
    cmap = matplotlib.colormaps["tab10" if len(arms) <= 10 else "tab20"]
    colours = {arm: cmap(i % cmap.N) for i, arm in enumerate(arms)}
    seeds = sorted({seed for _, seed in runs})
    legend_rows = -(-len(arms) // 4) + 1
    fig = new_figure(width=12, height=0.25 * legend_rows + 2.4 * len(seeds))
    grid = fig.add_gridspec(
        len(seeds) + 1, 2, height_ratios=[0.1 * legend_rows] + [1.0] * len(seeds)
    )
    used: set[str] = set()  # line styles drawn, for the legend
    # the runs first, by label (an earlier batch solid), then replayed draws over them
    order = sorted(runs.items(), key=lambda kv: ("replayed" in kv[0][0], kv[0]))
    for row, seed in enumerate(seeds, 1):
        left, right = fig.add_subplot(grid[row, 0]), fig.add_subplot(grid[row, 1])
        drawn: dict[str, int] = {}
        for (label, s), rows in order:
            if s != seed or not rows:
                continue
            arm = base(label)
            style = ":" if "replayed" in label else ("-", "--", "-.")[drawn.get(arm, 0) % 3]
            used.add(style)
            drawn[arm] = drawn.get(arm, 0) + ("replayed" not in label)
            line = dict(color=colours[arm], linestyle=style, linewidth=1.2)
            hours = [float(r["sim_time_s"]) / 3600 for r in rows]
            left.plot(hours, [100 * float(r["accuracy"]) for r in rows], **line)
            if "static" not in arm:
                right.plot(range(1, len(rows) + 1), [int(r["k"]) for r in rows], **line)
        left.axhline(100 * target, color="black", linewidth=0.6)
        left.set(ylabel=f"seed {seed}\naccuracy (%)", ylim=(40, 65))
        right.set(ylabel="k", yscale="log")
        if row == 1:
            left.set_title(f"accuracy against simulated time (target {target:.0%})")
            right.set_title("k chosen by the online policies")
        if row == len(seeds):
            left.set_xlabel("simulated hours")
            right.set_xlabel("round")
    handles = [Line2D([], [], color=colours[arm], label=arm) for arm in arms]
    handles += [
        Line2D([], [], color="black", linestyle=style, label=label)
        for style, label in (("--", "a second draw"), (":", "replayed from another run"))
        if style in used
    ]
    legend = fig.add_subplot(grid[0, :])
    legend.axis("off")
    legend.legend(handles=handles, loc="center", ncol=4, fontsize=8, frameon=False)
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
