"""One static report.html per directory: the plots, the table and the set-up."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path


def _table(rows: Sequence[dict]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row.values()) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def setup_rows(config: dict, summary: dict) -> list[dict]:
    clock = summary.get("clock") or config.get("clock", "simulated")
    clock_text = (
        "simulated clock: real training and accuracy, time from the model"
        if clock == "simulated"
        else "wall clock: real elapsed time over real links"
    )
    items = [
        ("workload", config.get("workload")),
        ("clock", clock_text),
        ("work model", config.get("work_model", "local-steps")),
        ("sites", config.get("num_sites")),
        ("seed", config.get("seed")),
        ("update size (GB, emulated)", config.get("update_size_gb")),
        ("target accuracy", config.get("target_accuracy")),
        ("estimator", config.get("estimator")),
        (
            "lr / batch / local steps",
            f"{config.get('lr')} / {config.get('batch_size')} / {config.get('local_steps')}",
        ),
        ("tau (s, full-power local work)", config.get("tau_s")),
    ]
    return [{"setting": k, "value": v} for k, v in items if v is not None]


def write_html(
    directory: str | Path, title: str, sections: Sequence[tuple[str, str]], images: Sequence[Path]
) -> Path:
    """`sections` are (heading, html) pairs; images are embedded by relative path."""
    directory = Path(directory)
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for heading, content in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>{content}")
    if images:
        parts.append("<h2>Plots</h2>")
        for image in images:
            rel = Path(image).relative_to(directory)
            parts.append(
                f'<figure><img src="{html.escape(str(rel))}" alt="{html.escape(rel.stem)}">'
                f"<figcaption>{html.escape(rel.stem.replace('_', ' '))}</figcaption></figure>"
            )
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
        "text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}"
        "img{max-width:100%;border:1px solid #eee}figure{margin:1.5em 0}"
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    )
    path = directory / "report.html"
    path.write_text(page)
    return path


table = _table
