"""A single static report.html: headings, notes, tables and the PNGs beside it.

No scripts and no external assets, so the file opens anywhere and can be archived with
its directory; images are referenced relative to the report.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powertrip.app.report.comparison import comparison_table_parts
from powertrip.app.report.objectives import RANKINGS
from powertrip.app.report.result import RunResult
from powertrip.core.clocks import clock_kind

_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2em auto;
       max-width: 1000px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 2em; border-bottom: 1px solid #eee; padding-bottom: .2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: .35em .7em; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.highlight td { background: #fff6d5; font-weight: 600; }
caption { caption-side: top; text-align: left; color: #555; padding-bottom: .3em; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
p.note { color: #555; font-size: 0.92em; }
div.pair { display: flex; gap: 1.5em; align-items: flex-start; flex-wrap: wrap; }
div.pair > div.paper { flex: 1 1 260px; background: #f7f7f7; padding: .2em 1em; }
div.pair > figure { flex: 2 1 480px; margin-top: 0; }
td.holds-yes { background: #e3f6e3; } td.holds-no { background: #fbe3e3; }
"""


@dataclass
class Table:
    """An HTML table; rows whose index is in `highlight` are emphasised (e.g. k*)."""

    headers: list[str]
    rows: list[list[str]]
    caption: str = ""
    highlight: set[int] = field(default_factory=set)
    #: footnotes printed under the table (what a column means, why a cell is '-')
    notes: list[str] = field(default_factory=list)


@dataclass
class Section:
    """One heading with notes, tables and images (paths, made relative to the report)."""

    title: str
    notes: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    #: (text, href) links, e.g. to per-run reports
    links: list[tuple[str, str]] = field(default_factory=list)
    #: what the paper's figure shows; rendered beside the first image (our figure)
    paper: str = ""


_CAPTIONS = {
    "accuracy_vs_time.png": "Held-out accuracy against time; dashed line is the target.",
    "k_vs_time.png": "Sites selected per round over time (paper Fig. 10 style).",
    "round_breakdown.png": (
        "Per round: the straggler's compute and communication (stacked, = round time) and "
        "the mean idle (wait) time of the selected sites."
    ),
    "predicted_vs_actual.png": "The policy's predicted round time against the actual one.",
    "fig8_static_k_sweep.png": (
        "Ours: time to target against static k, mean ± 95 % CI over seeds; hollow red markers "
        "were cut off before the target (lower bounds); dashed line: k*."
    ),
    "fig9_time_to_accuracy.png": (
        "Ours: time to target per policy, mean ± 95 % CI over seeds; hatched bars were cut off "
        "before the target in some seed (their mean is a lower bound)."
    ),
    "fig10_k_over_time.png": (
        "Ours: sites per round over time, PowerTrip (one line per seed) against static k*; "
        "shaded: the static policy's extra sites."
    ),
    "fig11_accuracy_gain.png": (
        "Ours: accuracy gain per round of the larger static configurations over the smallest, "
        "mean ± 95 % CI over seeds."
    ),
    "fig12_time_to_accuracy.png": (
        "Ours: time to target per policy with trace power, mean ± 95 % CI over seeds; hatched "
        "bars were cut off before the target."
    ),
    "fig13_time_to_accuracy.png": "Ours: time to target per update size and policy.",
    "fig14_time_to_accuracy.png": "Ours: time to target per workload, PowerTrip vs static k*.",
    "prediction_error.png": (
        "Round-time prediction error: histogram of (predicted - actual) / actual and the CDF "
        "of its absolute value."
    ),
    "site_map.png": "Site population: power fraction vs distance; selected sites coloured.",
    "time_to_accuracy.png": (
        "Time to target accuracy per policy (paper Fig. 9 style); hatched bars did not "
        "reach the target within the time shown."
    ),
    "static_k_sweep.png": (
        "Time to target against static k (paper Fig. 8); hollow markers at the top did not "
        "reach the target; the star is k*."
    ),
}


def write_html(dir: str | Path, title: str, sections: Sequence[Section]) -> Path:
    """Write DIR/report.html and return its path."""
    out_dir = Path(dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "report.html"
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
    ]
    for section in sections:
        parts.append(f"<h2>{esc(section.title)}</h2>")
        parts.extend(f'<p class="note">{esc(note)}</p>' for note in section.notes)
        parts.extend(_table_html(table) for table in section.tables)
        if section.links:
            items = "".join(
                f'<li><a href="{esc(href, quote=True)}">{esc(text)}</a></li>'
                for text, href in section.links
            )
            parts.append(f"<ul>{items}</ul>")
        images = list(section.images)
        if section.paper and images:
            parts.append(
                '<div class="pair"><div class="paper"><h3>The paper</h3>'
                f"<p>{esc(section.paper)}</p></div>{_figure_html(images.pop(0), out_dir)}</div>"
            )
        elif section.paper:
            parts.append(f'<div class="paper"><h3>The paper</h3><p>{esc(section.paper)}</p></div>')
        parts.extend(_figure_html(image, out_dir) for image in images)
    parts.append("</body></html>")
    out.write_text("\n".join(parts) + "\n")
    return out


def _figure_html(image: Path, out_dir: Path) -> str:
    esc = html.escape
    src = Path(os.path.relpath(Path(image).resolve(), out_dir.resolve())).as_posix()
    caption = _CAPTIONS.get(Path(image).name, Path(image).stem.replace("_", " "))
    return (
        f'<figure><img src="{esc(src, quote=True)}" alt="{esc(caption, quote=True)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def _table_html(table: Table) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in table.headers)
    body = []
    for i, row in enumerate(table.rows):
        cells = "".join(_cell_html(c) for c in row)
        cls = ' class="highlight"' if i in table.highlight else ""
        body.append(f"<tr{cls}>{cells}</tr>")
    caption = f"<caption>{esc(table.caption)}</caption>" if table.caption else ""
    notes = "".join(f'<p class="note">{esc(note)}</p>' for note in table.notes)
    return (
        f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"{notes}"
    )


def _cell_html(text: str) -> str:
    esc = html.escape
    if _is_number(text):
        return f'<td class="num">{esc(text)}</td>'
    if text in ("yes", "no"):  # a claims table's verdict
        return f'<td class="holds-{text}">{esc(text)}</td>'
    return f"<td>{esc(text)}</td>"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---- tables the reports share ----------------------------------------------------------
def comparison_table(runs: Sequence[RunResult], objective: str = "time") -> Table:
    """The comparison as an HTML table, same cells and footnotes as format_table()."""
    parts = comparison_table_parts(runs, objective)
    best = "Fastest" if objective == "time" else f"Least {RANKINGS[objective].what}"
    return Table(
        parts.headers,
        parts.cells,
        caption=f"{best} to target first, then by accuracy at the equal time T (acc@T); "
        "runs that missed the target last.",
        notes=parts.notes,
    )


def clock_text(clock: str) -> str:
    return clock_kind(clock).text


def config_table(
    config: dict[str, Any], summary: dict[str, Any] | None = None, skip: Sequence[str] = ()
) -> Table:
    """The settings a reader needs to interpret the plots (keys in `skip` left out)."""
    summary = summary or {}

    def get(key: str) -> Any:
        value = config.get(key)
        return summary.get(key) if value is None else value

    size_gb = get("update_size_gb")
    if size_gb is None and get("update_size_bytes") is not None:
        size_gb = float(get("update_size_bytes")) / 1e9
    target = get("target_accuracy")
    rows = [
        ["workload", str(get("workload") or "-")],
        ["clock", clock_text(str(get("clock") or "simulated"))],
        ["sites", str(get("num_sites") or "-")],
        ["seed", str(get("seed") if get("seed") is not None else "-")],
        ["update size", "-" if size_gb is None else f"{float(size_gb):g} GB"],
        ["work model", str(get("work_model") or "-")],
        ["target accuracy", "-" if target is None else f"{float(target) * 100:g}%"],
    ]
    for key, label in (
        ("comm_directions", "transfers charged per round (Eq. 3: 1 = the update up)"),
        ("distance_distribution", "site distances"),
        ("power", "power"),
        ("estimator", "round-time estimator"),
        ("max_rounds", "max rounds"),
        ("max_sim_hours", "max simulated hours (0 = no limit)"),
    ):
        if key not in skip and get(key) is not None:
            rows.append([label, str(get(key))])
    return Table(["setting", "value"], rows, caption="Configuration")
