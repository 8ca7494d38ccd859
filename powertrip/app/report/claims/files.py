"""claims.csv (one file per figure, collated into one) and the Markdown summary table."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

from powertrip.app.report.claims.rows import ClaimRow

#: claims.csv columns (the issue asks for at least figure, claim, paper, ours, holds)
CLAIM_COLUMNS: tuple[str, ...] = ("figure", "claim", "paper", "ours", "holds", "seeds", "why")


def write_claims_csv(path: str | Path, rows: Sequence[ClaimRow]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CLAIM_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.as_dict())
    return out


def read_claims_csv(path: str | Path) -> list[dict[str, str]]:
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in CLAIM_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        return list(reader)


def claims_markdown(rows: Sequence[Mapping[str, str]], header: str = "") -> str:
    """The summary table as Markdown (for results/claims.md)."""
    cols = ("figure", "claim", "paper", "ours", "holds", "why")
    lines = [header.rstrip(), ""] if header else []
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for row in rows:
        cells = [str(row.get(c, "")).replace("|", "\\|").replace("\n", " ") for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
