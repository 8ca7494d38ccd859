"""The docs' numbers and lists, rendered rather than typed: the README's demo table (from
results/demo/comparison.csv, what `make demo` wrote) and headline claims (the held-out rows
of results/claims.md), docs/how-it-works.md's rows of the outer study and docs/policies.md's
rows of the regions study (from results/claims.md), docs/cli.md's list of policies (from the
policy registry) and its settings table (from powertrip/core/settings.py), each between
marker lines (powertrip/app/report/blocks.py). `make docs` rewrites them, and the speed
tables (`python -m bench.render --write`); a test (tests/unit/test_docblocks.py) fails when
a page says something else.

    python -m reproduction.paper.docblocks [--check]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from powertrip.app.report import format_table
from powertrip.app.report.blocks import replace_blocks, write_pages
from reproduction.paper.index import headline_markdown, read_claims_markdown

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLI_DOC = ROOT / "docs" / "cli.md"
HOW_DOC = ROOT / "docs" / "how-it-works.md"
POLICIES_DOC = ROOT / "docs" / "policies.md"
DEMO = ROOT / "results" / "demo" / "comparison.csv"
CLAIMS = ROOT / "results" / "claims.md"


def demo_table(path: Path = DEMO) -> str:
    """The table `make demo` prints, without its footnotes (the README explains them)."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    lines = format_table(rows).splitlines()[: 2 + len(rows)]
    return "```\n" + "\n".join(lines) + "\n```\n"


def blocks(demo: Path = DEMO, claims: Path = CLAIMS) -> dict[str, str]:
    """marker name -> the text between its begin and end lines."""
    return {
        "demo-table": demo_table(demo),
        "headline": headline_markdown(read_claims_markdown(claims)),
    }


def claims_table(rows: list[dict[str, str]], figure: str, marks: tuple[str, ...]) -> str:
    """The rows of `figure` whose claim holds any of `marks`, as claim | ours | holds."""
    chosen = [r for r in rows if r["figure"] == figure and any(m in r["claim"] for m in marks)]
    lines = ["| claim | ours | holds |", "|---|---|---|"]
    lines += [f"| {r['claim']} | {r['ours']} | {r['holds']} |" for r in chosen]
    if not chosen:
        lines.append("| (not run yet) | | |")
    return "\n".join(lines) + "\n"


#: docs/how-it-works.md's rows of figure outer: the chosen step, each default against
#: FedAvg, int8 against fp32
OUTER_MARKS = ("outer step chosen", "against FedAvg, static k*", "int8 deltas against fp32")
#: docs/policies.md's rows of figure regions: the carbon baselines and objective
REGIONS_MARKS = ("where its runs ended", "per seed", "against lowcarb")


def policy_list() -> str:
    """docs/cli.md's list of policies: every registered one with its one-line summary, the
    estimator it is built on where it has its own, and its parameters as it declares them
    (type, default, doc, allowed values)."""
    from powertrip.core.policies import catalogue

    lines = []
    for p in catalogue():
        lines.append(f"* `{p['name']}`: {p['summary']}")
        if p["estimator"] is not None:
            lines.append(f"  * estimator: `{p['estimator']}`, its own (the run's is not used)")
        for q in p["parameters"]:
            default = "unset" if q["default"] is None else f"{q['default']:g}"
            lines.append(
                f"  * `{q['name']}` ({q['type']}, default {default}): {q['doc']}; {q['allowed']}"
            )
    return "".join(line + "\n" for line in lines)


def pages() -> dict[Path, dict[str, str]]:
    """Each page with rendered blocks -> its blocks."""
    from powertrip.app.settingstable import markdown_table

    rows = read_claims_markdown(CLAIMS)
    return {
        README: blocks(),
        CLI_DOC: {"policies": policy_list(), "settings": markdown_table()},
        HOW_DOC: {"outer-rows": claims_table(rows, "outer", OUTER_MARKS)},
        POLICIES_DOC: {"regions-rows": claims_table(rows, "regions", REGIONS_MARKS)},
    }


#: `text` with each marked block replaced (kept under this name for the tests and callers)
render = replace_blocks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page differs")
    args = parser.parse_args(argv)
    source = "results/ and the policy registry"
    return write_pages(pages(), ROOT, check=args.check, source=source)


if __name__ == "__main__":
    sys.exit(main())
