"""Ablation: which single choice of our set-up flips which claim.

Each variant flips one choice relative to the uniform (Fig. 9) set-up and runs PowerTrip
against static k = the k* of the uniform sweep ('static-k@uniform*', resolved once that
sweep has finished: a sweep per variant would cost 12 runs per seed each). Fig. 5's links
move k*, so `links-fig5` sweeps k itself (to 30 % of the sites) and also runs `adaptive`,
and `links-fig5-clock` is judged against that sweep's k*. The table says per variant
whether PowerTrip is still faster and how its k moves from the first round to the last;
the uniform row is the reference."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from powertrip.app.experiments.suite import Suite, Variant, deferred_source
from powertrip.app.report import claims as C
from powertrip.app.report.html import Table
from reproduction.paper.common import plot_time_bars
from reproduction.paper.data import UNIFORM, VariantData, facts

STATIC = f"static-k@{UNIFORM.name}*"

ABLATIONS = (
    Variant("two-directions", "uniform, the update charged both ways", {"comm_directions": 2}),
    Variant("data-parallel", "uniform, data-parallel work model", {"work_model": "data-parallel"}),
    Variant(
        "uniform-distances",
        "uniform, distances U[min, max] (not calibrated)",
        {"distance_distribution": "uniform"},
    ),
    # Eq. 7 as a split of the global batch (power-split): more power shortens compute
    Variant("power-split", "uniform, power-split work model", {"work_model": "power-split"}),
    # Fig. 5's links: flat bandwidth within 1,000 miles, 1/D beyond; the links change the
    # ranking and so k*, which this set-up finds with a sweep of its own. The sweep stops
    # at 30 % of the sites (ours, decided before its runs to fit 1.7 CPU hours): past k*,
    # every added site can only lower the straggler's power, and accuracy per round does
    # not grow with k in this regime (the ablation rows of results/claims.md)
    Variant(
        "links-fig5",
        "uniform, link_model fig5 (static sweep to 30 % of the sites)",
        {"link_model": "fig5"},
        sweep_up_to=0.3,
    ),
    # the same links with T-hat from the straggler: does it stop the paper's rule growing
    # to every site? Against the k* of links-fig5's sweep (static runs train identically)
    Variant(
        "links-fig5-clock",
        "uniform, link_model fig5, PowerTrip's T-hat from the straggler (estimator clock)",
        {"link_model": "fig5", "estimator": "clock"},
    ),
    # the paper's T-hat (mean power of the top k) is optimistic when a low-power site joins:
    # on seed 2 of the uniform set-up it put 64 sites at 208 s, and the round took 507 s
    Variant(
        "clock-estimator",
        "uniform, PowerTrip's T-hat consistent with the clock (the straggler, not mean power)",
        {"estimator": "clock"},
    ),
)

SUITE = Suite(
    "ablation",
    "one choice flipped at a time",
    "Not a figure of the paper: our set-up makes choices the paper leaves open (transfers "
    "per round, the work model, the distance distribution, the link model, "
    "the round-time estimator). Each variant "
    "flips one of them relative to the Fig. 9 set-up and asks again whether PowerTrip beats "
    "static k* (k* from the uniform sweep).",
    (UNIFORM.name, *(v.name for v in ABLATIONS)),
    ("powertrip", STATIC),
    variant_arms={
        UNIFORM.name: ("powertrip", "sweep", "static-k*"),
        "links-fig5": ("powertrip", "adaptive", "sweep", "static-k*"),
        "links-fig5-clock": ("powertrip", "static-k@links-fig5*"),
    },
)
#: the online policy beyond the paper, run where a set-up has a sweep of its
#: own; added after links-fig5's first runs, so a seed without it still counts (not run)
ONLINE = "adaptive"
OPTIONAL_ARMS = (ONLINE,)
VARIANTS = (UNIFORM, *ABLATIONS)

#: settings that differ between any two runs and say nothing about the set-up
_IGNORED = {"seed", "policy", "policy_params", "max_sim_hours", "data_dir", "workers"}


def flipped(v: VariantData, ref: VariantData) -> str:
    """What the variant's runs set differently from the uniform runs ('-' if unknown)."""
    mine, base = v.config(), ref.config()
    if v.name == ref.name:
        return "reference"
    if not mine or not base:
        return "-"
    diff = [
        f"{k} {base.get(k)} -> {mine.get(k)}"
        for k in sorted(mine)
        if k not in _IGNORED and mine.get(k) != base.get(k)
    ]
    params = {
        k: p
        for r in v.runs_of("powertrip")
        for k, p in (r.config.get("policy_params") or {}).items()
    }
    diff.extend(f"powertrip {k} = {p:g}" for k, p in sorted(params.items()))
    return "; ".join(diff) or "nothing (same settings as uniform)"


def _static(v: VariantData) -> str:
    """The static arm a set-up is compared with: its own sweep's k* or another's."""
    return next(a for a in SUITE.arms_of(v.name) if a.startswith("static-k"))


def _static_source(v: VariantData) -> str:
    """Whose sweep chose the static k: 'its own' or 'the <set-up>'."""
    spec = _static(v)
    return "its own" if spec == "static-k*" else f"the {deferred_source(spec)}"


def _static_k(v: VariantData) -> str:
    """The static arm's k ('?' until the sweep that chooses it has finished)."""
    arm = v.arm(_static(v))
    return arm.removeprefix("static-k") if arm else "?"


def k_path(v: VariantData) -> str:
    """PowerTrip's k in the first round -> the last, mean ± CI over seeds."""
    runs = [r for r in v.runs_of("powertrip") if r.rounds]
    if not runs:
        return "-"
    first = C.mean_ci(float(r.rounds[0]["k"]) for r in runs)
    last = C.mean_ci(float(r.rounds[-1]["k"]) for r in runs)
    return f"{C.fmt_estimate(first, digits=1)} -> {C.fmt_estimate(last, digits=1)}"


def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    unsupported = dict(meta.get("unsupported") or {})
    kstar = d[UNIFORM.name].kstar
    rows = []
    for v in d.values():
        static = _static(v)
        which = (
            f"(k = {kstar if kstar is not None else '?'} from the uniform sweep)"
            if v.name == UNIFORM.name
            else f"(k = {_static_k(v)} from {_static_source(v)} sweep)"
        )
        online = [p for p in ("powertrip", ONLINE) if p in SUITE.arms_of(v.name)]
        for policy in online:
            row = C.faster_claim(
                "ablation",
                policy,
                static,
                v.times((policy, static)),
                None,
                None,
                None,
                claim=f"{v.name}: {'PowerTrip' if policy == 'powertrip' else policy} is "
                f"faster than static k* {which}",
            )
            paper = "PowerTrip faster (Fig. 9 set-up)" if v.name == UNIFORM.name else "-"
            row.paper = paper if policy == "powertrip" else "goal (#31): within 5 % or faster"
            if v.name in unsupported:
                row.ours, row.holds = f"not run: {unsupported[v.name]}", "n/a"
            rows.extend(C.finish([row], facts(v, meta)))
    return rows


def table(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[Table]:
    """Rows = variant: PowerTrip's time, static k*'s, whether PowerTrip is faster, its k."""
    unsupported = dict(meta.get("unsupported") or {})
    ref = d[UNIFORM.name]
    rows = []
    for v in d.values():
        static = _static(v)
        times = v.times(("powertrip", static))
        pairs = list(zip(times["powertrip"], times[static], strict=False))
        verdict = C.holds_positive([C.reduction(a, b) for a, b in pairs])
        if v.name in unsupported:
            verdict = f"not run: {unsupported[v.name]}"
        rows.append(
            [
                v.name,
                flipped(v, ref),
                C.fmt_time(times["powertrip"]),
                C.fmt_time(v.samples(ONLINE)) if ONLINE in SUITE.arms_of(v.name) else "-",
                C.fmt_time(times[static])
                + (
                    ""
                    if static == STATIC
                    else f" (k* = {_static_k(v)} of {_static_source(v)} sweep)"
                ),
                verdict,
                k_path(v),
            ]
        )
    return [
        Table(
            [
                "variant",
                "flips",
                "PowerTrip time (h)",
                f"{ONLINE} time (h)",
                f"static-k* time (h), k = {ref.kstar if ref.kstar is not None else '?'}",
                "PowerTrip faster?",
                "PowerTrip k first -> last round",
            ],
            rows,
            caption="Which single choice flips which claim: each row changes one setting of "
            "the uniform set-up; 'PowerTrip faster?' is the paired verdict over seeds.",
        )
    ]


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    groups = [(v.name, v.times(("powertrip", _static(v)))) for v in d.values()]
    return [
        plot_time_bars(groups, out / "ablation_time_to_accuracy.png", "Time to target per ablation")
    ]
