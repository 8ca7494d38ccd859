"""The settings table for readers: `powertrip config settings` and docs/cli.md's "Settings"
block (rendered by `make docs`), both drawn from the rows of powertrip/core/settings.py."""

from __future__ import annotations

from typing import Any

from powertrip.core.settings import ALWAYS, SAME, RunSettings, rows


def _cell(value: Any) -> str:
    text = (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )
    return text.replace("|", "\\|") if text else "—"


def markdown_table(cls: type = RunSettings) -> str:
    """docs/cli.md's settings table."""
    lines = [
        "| setting | type | default | allowed | paper | stored runs without it | sent to | "
        "what it does |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows(cls):
        help_text = r.help + (f" (Flower strategy: {r.flower}, {r.flower_why})"
                              if r.flower is not SAME else "")  # fmt: skip
        lines.append(
            f"| `{r.name}` | {r.kind.replace('|', 'or')} | `{_cell(r.default)}` | "
            f"{_cell(r.allowed_text())} | {'' if r.paper is SAME else f'`{_cell(r.paper)}`'} | "
            f"{'' if r.later is ALWAYS else f'`{_cell(r.later)}`'} | "
            f"{', '.join(r.services) or ''} | {help_text.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def text_table(cls: type = RunSettings) -> str:
    """`powertrip config settings`: a setting a line or two, for a terminal."""
    out = []
    for r in rows(cls):
        allowed = r.allowed_text()
        out.append(
            f"{r.name} ({r.kind}; default {_cell(r.default)}"
            + (f"; {allowed}" if allowed else "")
            + (f"; paper {_cell(r.paper)}" if r.paper is not SAME else "")
            + ")"
        )
        out.append(f"    {r.help}")
    return "\n".join(out) + "\n"
