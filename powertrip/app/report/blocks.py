"""Pages whose numbers are rendered, not typed: a page keeps each rendered part between
marker lines `<!-- NAME:begin -->` and `<!-- NAME:end -->`, and a renderer rewrites what
lies between them. The paper's docs (reproduction/paper/docblocks.py) and the speed tables
(bench/render.py) both write their pages this way."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path


def replace_blocks(text: str, contents: Mapping[str, str]) -> str:
    """`text` with each marked block replaced; a marker pair that is missing is an error."""
    for name, body in contents.items():
        begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
        if begin not in text or end not in text:
            raise ValueError(f"no '{begin.strip()}' ... '{end}' block")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + body + end + tail
    return text


def write_pages(
    pages: Mapping[Path, Mapping[str, str]], root: Path, *, check: bool, source: str
) -> int:
    """Rewrite each page's blocks (or, with `check`, only say which are stale: exit 1);
    `source` says in the message where the numbers come from."""
    stale = []
    for page, contents in pages.items():
        old = page.read_text()
        new = replace_blocks(old, contents)
        if new != old:
            stale.append(page)
            if not check:
                page.write_text(new)
    names = ", ".join(str(p.relative_to(root)) for p in stale) or "nothing"
    if check:
        if stale:
            print(f"{names}: rendered blocks are stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    print(f"docs rendered from {source}: {names} changed")
    return 0
