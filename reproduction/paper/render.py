"""Per-figure reports of `powertrip reproduce`: our figure beside the paper's, the claims
table (report.html and claims.csv in OUT/<figure>/) and the collated summary (OUT/claims.csv,
OUT/claims.md). Everything is read back from the run directories (see paper.data)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from powertrip.app.experiments.suite import Suite, deferred_source, suite_arm_names, variant_ks
from powertrip.app.report import claims as C
from powertrip.app.report import objectives as O
from powertrip.app.report.html import Section, Table, write_html
from powertrip.app.report.result import RunResult
from reproduction.paper import MODULES, VARIANTS, module_of
from reproduction.paper.common import accuracy_at_powertrip_time, fmt_accuracy_at
from reproduction.paper.data import VariantData, load_variant, source_kstar
from reproduction.paper.index import write_index


def load_figure(out: Path, key: str, meta: Mapping[str, Any]) -> dict[str, VariantData]:
    """Every set-up of a figure with the runs its arms need ('static-k@V*' resolved from
    V's finished sweep). A module with its own `load(out, meta)` (held-out seeds) loads
    its runs itself."""
    module = module_of(key)
    if hasattr(module, "load"):
        return module.load(out, meta)
    suite = module.SUITE
    seeds = list(meta.get("seeds") or [])
    sweep = list(meta.get("sweep_k") or [])
    num_sites = int((meta.get("base_config") or {}).get("num_sites") or 100)
    data = {}
    kstars: dict[str, int | None] = {}
    for variant in suite.variants:
        grid = variant_ks(VARIANTS[variant], sweep, num_sites)
        arms = suite_arm_names(suite, variant, num_sites, grid)
        aliases = {}
        for spec in arms:
            source = deferred_source(spec)
            if source:
                if source not in kstars:
                    source_grid = variant_ks(VARIANTS[source], sweep, num_sites)
                    kstars[source] = source_kstar(out, source, seeds, source_grid)
                k = kstars[source]
                aliases[spec] = f"static-k{k}" if k is not None else ""
        label = VARIANTS[variant].label
        optional = getattr(module, "OPTIONAL_ARMS", ())
        data[variant] = load_variant(out, variant, label, arms, seeds, grid, aliases, optional)
    return data


def claims_table(rows: Sequence[C.ClaimRow]) -> Table:
    return Table(
        ["claim", "paper", "ours (mean ± 95 % CI over seeds)", "holds?", "why it may differ"],
        [[r.claim, r.paper, r.ours, r.holds, r.why] for r in rows],
        caption="holds?: yes = the 95 % CI agrees with the claim's direction; yes* = the mean "
        "does but the CI does not exclude chance; unclear = runs cut off before the target "
        "leave it open; n/a = nothing to compare yet.",
    )


def time_table(v: VariantData, names: Sequence[str], footprint: bool = False) -> Table:
    """Time to target per policy and, beside PowerTrip, each policy's accuracy at the time
    PowerTrip reached the target (so one that never reached it is compared too); with
    `footprint`, energy, egress cost and carbon to target too (Fig. 9)."""
    equal_time = "powertrip" in v.arms
    rows = []
    for name in names:
        samples = v.samples(name)
        label = name if name != "static-k*" or v.kstar is None else f"static-k* (k = {v.kstar})"
        reached = sum(s.reached for s in samples)
        row = [label, C.fmt_time(samples), f"{reached}/{len(samples)}"]
        if equal_time:
            row.append(fmt_accuracy_at(accuracy_at_powertrip_time(v, name)))
        if footprint:
            row += [fmt_footprint(v.runs_of(name), O.RANKINGS[o]) for o in O.FOOTPRINT]
        rows.append(row)
    headers = ["policy", "time to target (h)", "seeds reaching target"]
    if equal_time:
        headers.append("accuracy at PowerTrip's time to target")
    caption = f"{v.label}: complete seeds {v.seeds} of {v.all_seeds}"
    if footprint:
        headers += ["energy to target (kWh)", "egress to target ($)", "CO2 to target (kg)"]
        caption += (
            "; energy, egress and CO2: mean ± 95 % CI over seeds ('>': some seed missed the "
            "target, its use so far counted; '-': runs from before the accounting)"
        )
    return Table(headers, rows, caption=caption)


def fmt_footprint(runs: Sequence[RunResult], objective: O.Objective) -> str:
    """One footprint objective over seeds, like fmt_time: to target, or what a run that
    missed the target spent (then a lower bound, '>'); '-' when no run has it."""
    values, censored = [], False
    for run in runs:
        reached = run.time_to_target_s is not None
        value = run.summary.get(objective.to_target if reached else objective.spent)
        if value is None:
            return "-"
        values.append(float(value))
        censored |= not reached
    est = C.mean_ci(values)
    if est.n == 0:
        return "-"
    if censored:
        return f"> {est.mean:.{objective.decimals}f}"
    return C.fmt_estimate(est, digits=objective.decimals)


def render_figure(out: Path, key: str, meta: Mapping[str, Any]) -> Path:
    """OUT/<figure>/report.html and claims.csv for one figure."""
    module = module_of(key)
    suite = module.SUITE
    data = load_figure(out, key, meta)
    fig_dir = out / suite.out_name
    fig_dir.mkdir(parents=True, exist_ok=True)
    rows = module.claims(data, meta)
    C.write_claims_csv(fig_dir / "claims.csv", rows)
    images = module.plots(data, fig_dir, meta)
    if hasattr(module, "table"):
        tables = module.table(data, meta)
    else:
        num_sites = int((meta.get("base_config") or {}).get("num_sites") or 100)
        footprint = bool(getattr(module, "TABLE_FOOTPRINT", False))
        tables = [time_table(d, table_names(suite, d, num_sites), footprint) for d in data.values()]
    title = f"Fig. {suite.figure}" if suite.figure[:1].isdigit() else suite.figure.capitalize()
    sections = [
        Section(
            f"{title}: {suite.title}",
            paper=suite.paper,
            images=images,
            notes=[f"Set-up(s): {'; '.join(d.label for d in data.values())}."]
            if data
            else list(getattr(module, "NOTES", ())),
        ),
        Section(
            "Claims",
            tables=[claims_table(rows)],
            notes=["Also written to claims.csv. Generated from the runs; not edited by hand."],
        ),
        Section(getattr(module, "TABLE_TITLE", "Times per policy"), tables=tables),
        Section("How it was run", notes=how_notes(meta, data)),
    ]
    return write_html(fig_dir, f"PowerTrip reproduction: {title.lower()}", sections)


def table_names(suite: Suite, v: VariantData, num_sites: int) -> list[str]:
    """The arms a figure's default times table lists: every swept k (grid and refinement)
    only where the figure is about k (Figs. 8, 11), else static-k* alone."""
    names = suite_arm_names(suite, v.name, num_sites, v.sweep)
    return [a for a in names if suite.show_sweep or not a.removeprefix("static-k").isdigit()]


def how_notes(meta: Mapping[str, Any], data: Mapping[str, VariantData]) -> list[str]:
    base = meta.get("base_config") or {}
    refined = {d.name: d.refined for d in data.values() if d.refined}
    notes = [
        f"Seeds {meta.get('seeds')}; static-k sweep grid k = {meta.get('sweep_k')}"
        + (f", refined {refined}" if refined else "")
        + f"; every arm of a (set-up, seed) group is cut off at {meta.get('budget_factor')}x "
        "PowerTrip's time to target in that group (fixed-round set-ups excepted).",
        f"Base config: workload {base.get('workload')}, {base.get('num_sites')} sites, lr "
        f"{base.get('lr')}, {base.get('local_steps')} local steps, target "
        f"{base.get('target_accuracy')}, max {base.get('max_rounds')} rounds, "
        f"{base.get('eval_samples')} evaluation samples.",
        f"Time model: {base.get('comm_directions')} transfer(s) charged per round "
        f"(Eq. 3: 1 = the update to the aggregator), work model {base.get('work_model')}, "
        f"PowerTrip's estimator {base.get('estimator')}, {base.get('distance_distribution')} "
        f"distances, {base.get('link_model', 'inverse')} link model, {base.get('clock')} clock.",
        f"Runs are in runs/<set-up>/seed<s>/<policy>/ (rounds.csv, decisions.jsonl with the "
        f"shadow decisions, summary.json); `powertrip report <run dir>` renders one. "
        f"{meta.get('cores')} CPU cores.",
    ]
    unsupported = {k: v for k, v in (meta.get("unsupported") or {}).items() if k in data}
    notes.extend(f"Set-up {k} not run: {why}" for k, why in unsupported.items())
    if meta.get("quick"):
        notes.insert(0, "QUICK MODE: a tiny smoke-test set-up, not the paper's experiment.")
    return notes


def render_all(out: Path, figures: Sequence[str], meta: Mapping[str, Any]) -> dict[str, Path]:
    """Render each figure's report, then the collated OUT/claims.csv and OUT/claims.md."""
    reports = {key: render_figure(out, key, meta) for key in figures}
    write_summary(out, meta)
    return reports


def write_summary(out: Path, meta: Mapping[str, Any]) -> Path:
    """Collate every OUT/<figure>/claims.csv into OUT/claims.csv and OUT/claims.md, and
    write OUT/INDEX.md (folders, figures, headline claims: reproduction.paper.index)."""
    rows: list[dict[str, str]] = []
    for module in MODULES:
        path = out / module.SUITE.out_name / "claims.csv"
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
        f"{meta.get('sweep_k')} (plus midpoints beside k*), every arm cut off at "
        f"{meta.get('budget_factor')}x PowerTrip's time"
        f"{' - QUICK smoke-test set-up, not the paper experiment' if meta.get('quick') else ''}"
        ". `holds?`: yes = 95 % CI agrees; yes* = mean agrees, CI does not exclude chance; "
        "unclear = cut-off runs leave it open; n/a = not run. Paired rows (figures heldout, "
        "outer, regions): the mean of per-seed differences, its percentile-bootstrap 95 % CI "
        "and, after `t`, its Student-t 95 % CI; faster, slower, lower, higher or within 5 % "
        "only where both intervals say so, else level."
    )
    md = out / "claims.md"
    md.write_text(C.claims_markdown(rows, header))
    write_index(out, rows)
    return md
