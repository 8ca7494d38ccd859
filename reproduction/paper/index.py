"""results/INDEX.md: which folder feeds which figure and which claims, and which claims are
the headline. Generated with claims.md (`powertrip reproduce --report-only ... --summary
results/claims.md` writes both), from the run folders and the figure registry, so it cannot
drift from what is committed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from reproduction.paper import MODULES

#: the claims the README quotes: the online policies against static k* on the seeds whose k*
#: came from other seeds (heldout.HELDOUT_SEEDS)
HEADLINE_FIGURE = "heldout"
HEADLINE_SUFFIX = "(chosen on seeds 0-4), held-out seeds"


def is_headline(row: Mapping[str, str]) -> bool:
    return row.get("figure") == HEADLINE_FIGURE and row.get("claim", "").endswith(HEADLINE_SUFFIX)


def ranges(numbers: Sequence[int]) -> str:
    """0-4, 7, 10-14: consecutive numbers as ranges."""
    out: list[str] = []
    for n in sorted(set(numbers)):
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


def arms_text(arms: set[str]) -> str:
    """The arms of a folder, static k's folded into one entry."""
    ks = sorted(
        int(a.removeprefix("static-k")) for a in arms if a.removeprefix("static-k").isdigit()
    )
    named = sorted(a for a in arms if not a.removeprefix("static-k").isdigit())
    static = [f"static k = {', '.join(map(str, ks))}"] if ks else []
    return ", ".join([*named, *static])


def folder_rows(runs: Path) -> list[list[str]]:
    """One row per set-up folder under `runs`: its seeds, runs, arms and the figures that
    read it (with their numbers of claims)."""
    readers: dict[str, list[str]] = {}
    for module in MODULES:
        for variant in module.SUITE.variants:
            readers.setdefault(variant, []).append(module.SUITE.figure)
    rows = []
    for folder in sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []:
        done = sorted(folder.glob("seed*/*/summary.json"))
        seeds = [int(p.parent.parent.name.removeprefix("seed")) for p in done]
        arms = {p.parent.name for p in done}
        figures = ", ".join(readers.get(folder.name, [])) or "none (unread)"
        rows.append([f"`{folder.name}/`", ranges(seeds), str(len(done)), arms_text(arms), figures])
    return rows


def headline_markdown(rows: Sequence[Mapping[str, str]]) -> str:
    """The headline rows as a Markdown table (INDEX.md's, and the README's between its
    `headline` markers: reproduction.paper.docblocks)."""
    lines = ["| claim | ours | holds |", "|---|---|---|"]
    headline = [r for r in rows if is_headline(r)]
    lines += [f"| {r['claim']} | {r['ours']} | {r['holds']} |" for r in headline]
    if not headline:
        lines.append("| (not run yet) | | |")
    return "\n".join(lines) + "\n"


def index_markdown(runs: Path, rows: Sequence[Mapping[str, str]]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["figure"]] = counts.get(row["figure"], 0) + 1
    lines = [
        "# results/: what is here and what reads it",
        "",
        "Generated with claims.md by `powertrip reproduce --figure all --report-only --out "
        "results/reproduce --summary results/claims.md`; do not edit by hand.",
        "",
        "## Headline claims",
        "",
        "The online policies against the static k\\* chosen on seeds 0-4, on held-out seeds "
        "10-14 (the rows of `claims.md` the README quotes): nothing in these rows was chosen "
        "on them, though figure `outer` chose the product's int8 deltas there. Seeds 5-9 are "
        "development seeds: the changes that made `adaptive` what it is were found on them.",
        "",
        headline_markdown(rows).rstrip("\n"),
        "",
        "## Figures and their claims",
        "",
        "| figure | title | claims in claims.md |",
        "|---|---|---|",
    ]
    for module in MODULES:
        suite = module.SUITE
        lines.append(f"| {suite.figure} | {suite.title} | {counts.get(suite.figure, 0)} |")
    lines += [
        "",
        "## Run folders (`reproduce/runs/<set-up>/seed<s>/<arm>/`)",
        "",
        "| folder | seeds | finished runs | arms | read by figure |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in folder_rows(runs)]
    lines += [
        "",
        "Each run keeps `config.yaml` (every setting and every parameter of its policy, and "
        "for runs made since 1.0 the code's version, commit and CPU kernels), "
        "`run-config.yaml`, `rounds.csv`, `summary.json` and `wall.csv`; `decisions.jsonl` "
        "for the online policies. A seed folder keeps its runs' site table once, in "
        "`sites.json`, which a report reads back for each run. The lab notebook before 1.0 "
        "(option arms, the plateau studies' own engine and runs, previous rules) is the "
        "archive at commit e2b9ee1 on main (`git checkout e2b9ee1`).",
    ]
    return "\n".join(lines) + "\n"


def read_claims_markdown(path: Path) -> list[dict[str, str]]:
    """The rows of a claims.md table (claims_markdown's format) as dicts."""
    rows, cols = [], None
    for line in path.read_text().splitlines():
        if not line.startswith("| "):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cols is None:
            cols = cells
        else:
            rows.append(dict(zip(cols, cells, strict=False)))
    return rows


def write_index(out: Path, rows: Sequence[Mapping[str, str]]) -> Path:
    """OUT/INDEX.md from OUT/runs and the collated claim rows."""
    path = out / "INDEX.md"
    path.write_text(index_markdown(out / "runs", rows))
    return path
