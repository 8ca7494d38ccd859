"""Claim helpers and plots that several figures share: PowerTrip against the baselines in
time to target and in accuracy at equal time, and the time-per-policy bar chart."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from powertrip.app.report import claims as C
from powertrip.app.report.comparison import accuracy_at_equal_time
from powertrip.app.report.figures import new_figure, save_figure
from powertrip.app.report.run_plots import plot_prediction_error
from reproduction.paper.data import VariantData

#: the paper's Fig. 9 policies in the order its claims list them
POLICIES = (
    "powertrip",
    "static-k*",
    "centralized-25",
    "centralized-50",
    "highest-power",
    "random",
    "radius",
    "all",
)

#: the arms of the paper's Fig. 9 (and 12): its policies, the sweep that finds k*, and `all`
FIG9_ARMS = (POLICIES[0], "sweep", *POLICIES[1:])

#: the baselines a comparison figure's 'faster than' claims name, with their labels
RIVALS = (
    ("static-k*", "static k*"),
    ("centralized-25", "centralized-25"),
    ("highest-power", "highest-power"),
    ("random", "random"),
    ("radius", "radius"),
    ("all", "all"),
)


# ---- accuracy at equal time ------------------------------------------------------------
@dataclass(frozen=True)
class AccuracyAt:
    """One seed's accuracy at a reference time (PowerTrip's time to target); exact=False:
    the run stopped before that time and `value` is its last accuracy, held at its cut-off
    (at the reference time it would be at least about that)."""

    value: float
    exact: bool = True


def accuracy_at_powertrip_time(v: VariantData, name: str) -> list[AccuracyAt]:
    """Per complete seed where PowerTrip reached the target: the accuracy `name` held at
    PowerTrip's time to target, so a baseline that never reached the target is still
    compared. A run cut off by its time budget holds its last model until the budget; one
    that stopped before that time otherwise gives its last accuracy, marked inexact."""
    found = []
    for seed in v.seeds:
        pt = v.runs.get("powertrip", {}).get(seed)
        run = v.runs.get(v.arm(name), {}).get(seed)
        if pt is None or run is None or pt.time_to_target_s is None or not run.rounds:
            continue
        at = accuracy_at_equal_time(run, pt.time_to_target_s)
        if at is not None:
            found.append(AccuracyAt(at, True))
        else:
            found.append(AccuracyAt(float(run.rounds[-1]["accuracy"]), False))
    return found


def powertrip_missed(v: VariantData) -> int:
    """Complete seeds in which PowerTrip missed the target (no equal-time reference)."""
    return sum(r.time_to_target_s is None for r in v.runs_of("powertrip"))


def fmt_accuracy_at(samples: Sequence[AccuracyAt]) -> str:
    """'41.2 ± 1.0 %'; '≥ ...' with a note when a seed stopped earlier; '-' for none."""
    if not samples:
        return "-"
    text = C.fmt_estimate(C.mean_ci(s.value for s in samples), " %", scale=100, digits=1)
    stopped = sum(not s.exact for s in samples)
    if stopped:
        text = f"≥ {text} ({stopped}/{len(samples)} seeds stopped before: cut-off accuracy)"
    return text


def equal_time_claim(
    figure: str,
    name: str,
    accuracies: Mapping[str, Sequence[AccuracyAt]],
    missed: int = 0,
    where: str = "",
) -> C.ClaimRow:
    """'At PowerTrip's time to target no policy holds a higher accuracy', paired by seed.

    A rival seed that stopped before that time counts with its cut-off accuracy, so the
    difference is an upper bound (it can only say 'no' or stay unclear)."""
    ours = list(accuracies.get(name) or [])
    rivals = {r: list(s) for r, s in accuracies.items() if r != name and s}
    verdicts = []
    for samples in rivals.values():
        bounds = [
            C.Bound(a.value - b.value, "exact" if b.exact else "upper")
            for a, b in zip(ours, samples, strict=False)
        ]
        verdicts.append(C.holds_positive(bounds) if bounds else "n/a")
    order = ("no", "unclear", "yes*", "yes")
    known = [v for v in verdicts if v != "n/a"]
    holds = min(known, key=order.index) if known and ours else "n/a"
    parts = [f"{n} {fmt_accuracy_at(s)}" for n, s in ((name, ours), *rivals.items()) if s]
    text = "; ".join(parts) if parts else "not run"
    if missed:
        text += f" ({missed} seed(s) left out: {name} missed the target)"
    return C.ClaimRow(
        figure,
        f"at {'PowerTrip' if name == 'powertrip' else name}'s time to target no policy holds "
        f"a higher accuracy{where}",
        "not reported (the paper compares times to target)",
        text,
        holds,
        len(ours),
        differs=holds not in ("yes", "n/a"),
    )


def variant_equal_time_claim(
    figure: str, v: VariantData, names: Sequence[str], where: str = ""
) -> C.ClaimRow:
    """equal_time_claim over one set-up's policies."""
    accs = {n: accuracy_at_powertrip_time(v, n) for n in names}
    return equal_time_claim(figure, "powertrip", accs, powertrip_missed(v), where)


# ---- time to target --------------------------------------------------------------------
def policy_names(v: VariantData) -> list[str]:
    """The paper's policies this set-up ran, static-k* included."""
    return [p for p in POLICIES if p in v.arms or p == "static-k*"]


def comparison_claims(
    figure: str, v: VariantData, paper: Mapping[str, float | None]
) -> list[C.ClaimRow]:
    """Figs. 9 and 12: PowerTrip is fastest, faster than each baseline, similar to
    centralized-50; paper hours and reductions beside ours."""
    names = policy_names(v)
    times = v.times(names)
    pt = paper.get("powertrip")
    rows = [
        C.fastest_claim(
            figure, "powertrip", times, f"{pt:g} h, fastest of all" if pt else "fastest of all"
        )
    ]
    for rival, label in RIVALS:
        if rival not in names or (rival not in paper and rival != "all"):
            continue
        b = paper.get(rival)
        red = paper.get(f"{rival}:reduction")
        if red is None and pt and b:
            red = 1 - pt / b
        row = C.faster_claim(
            figure,
            "powertrip",
            rival,
            times,
            pt if b else None,
            b,
            red,
            claim=f"PowerTrip reaches the target faster than {label}",
        )
        if rival == "all":
            row.paper = "not reported"
            row.differs = False
        if rival == "static-k*" and v.kstar is not None:
            row.claim += f" (k* = {v.kstar}{', every k cut off' if v.kstar_censored else ''})"
        rows.append(row)
    if "centralized-50" in names and "centralized-50" in paper:
        rows.append(
            C.similar_claim(figure, "powertrip", "centralized-50", times, "similar to PowerTrip")
        )
    return rows


def plot_time_bars(
    groups: Sequence[tuple[str, Mapping[str, Sequence[C.Sample]]]], path: Path, title: str
) -> Path:
    """Mean time to target ± 95 % CI per arm (grouped by set-up); arms cut off before the
    target in any seed are hatched and labelled '>'."""
    rows = []
    for group, times in groups:
        for arm, samples in times.items():
            est, censored = C.times_estimate(samples)
            rows.append((f"{arm} [{group}]" if len(groups) > 1 else arm, est, censored))
    fig = new_figure(8.5, 1.0 + 0.42 * max(len(rows), 2))
    ax = fig.add_subplot()
    longest = (
        max(
            (
                e.mean + (e.half_width if math.isfinite(e.half_width) else 0)
                for _, e, _ in rows
                if e.n
            ),
            default=1.0,
        )
        or 1.0
    )
    for i, (label, est, censored) in enumerate(rows):
        if est.n == 0:
            ax.text(0, i, "  not run", va="center", fontsize=8, color="gray")
            continue
        err = est.half_width if math.isfinite(est.half_width) and not censored else 0
        color = "tab:red" if label.startswith("powertrip") else "tab:blue"
        ax.barh(
            i,
            est.mean,
            xerr=None if censored else err,
            capsize=3,
            color="0.9" if censored else color,
            hatch="//" if censored else None,
            edgecolor="0.3",
            linewidth=0.5,
        )
        text = f"> {est.mean:.2f} h" if censored else f"{est.mean:.2f} ± {err:.2f} h"
        ax.text(est.mean + err + longest * 0.01, i, text, va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, longest * 1.4)
    ax.set_xlabel("time to target (h, simulated), mean ± 95 % CI over seeds")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="x")
    return save_figure(fig, path)


def comparison_plots(figure: str, v: VariantData, out: Path) -> list[Path]:
    """Figs. 9 and 12: time to target per policy, and PowerTrip's prediction error."""
    return [
        plot_time_bars(
            [(v.name, v.times(policy_names(v)))],
            out / f"fig{figure}_time_to_accuracy.png",
            f"Time to target per policy ({v.label}; {len(v.seeds)} seeds)",
        ),
        prediction_error_plot(v, out),
    ]


def prediction_error_plot(v: VariantData, out: Path) -> Path:
    return plot_prediction_error(
        v.runs_of("powertrip"),
        out / "prediction_error.png",
        "PowerTrip's round-time prediction error, all seeds",
    )
