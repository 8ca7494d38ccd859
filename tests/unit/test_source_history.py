"""The source says what the code does, not its history: no "issue #N" and no lab tag in the
product's modules and in the paper's reproduction beside them (history lives in git and
docs/reproduction.md; the archive is cited by commit, which travels with `main`, where a tag
does not)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HISTORY = re.compile(r"issue #\d+|lab-20\d\d-\d\d")


def offending_lines(folders: list[Path]) -> list[str]:
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if HISTORY.search(line):
                    found.append(f"{path.relative_to(folder.parent)}:{number}: {line.strip()}")
    return found


def test_no_module_of_the_product_tells_its_history():
    found = offending_lines([ROOT / "powertrip", ROOT / "services", ROOT / "reproduction"])
    assert not found, "\n".join(found)


def test_the_check_finds_a_planted_reference(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text('"""Fast (issue #12)."""\n')
    assert offending_lines([tmp_path / "pkg"]) == ['pkg/m.py:1: """Fast (issue #12)."""']
