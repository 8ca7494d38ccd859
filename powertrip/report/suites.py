"""Compatibility shim: the per-figure reports of `powertrip reproduce` now live in
`powertrip.paper` (one module per figure) and are rendered by `powertrip.paper.render`.

Kept so that older callers of `render_suites` / `write_summary` keep working; nothing in
powertrip.report imports it, so report/ never depends on paper/ at import time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def render_suites(out: Path, figures: Sequence[str], meta: Mapping[str, Any]) -> dict[str, Path]:
    """Render every figure's report and the summary (see paper.render.render_all)."""
    from powertrip.paper.render import render_all

    return render_all(out, figures, meta)


def write_summary(out: Path, meta: Mapping[str, Any]) -> Path:
    """Collate the figures' claims.csv into OUT/claims.csv and OUT/claims.md."""
    from powertrip.paper.render import write_summary as write

    return write(out, meta)
