"""The speech (KWT-1) workload's data: MFCC features, bad WAVs and manifests, the Google
layout, the repository's subset split by held-out speakers, partitions by speaker, the
feature cache, and training with AdamW."""

from __future__ import annotations

import hashlib
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from powertrip.core.training import train_local
from powertrip.core.workloads import DataError, audio, get_workload, speech
from powertrip.core.workloads.base import default_data_root
from tests.unit.workloads_helpers import (
    _assert_good_partition,
    _one_torch_thread,  # noqa: F401 (autouse fixture)
    _same,
)

SPEECH_DIR = default_data_root() / "speech_commands"


# ---- speech features ------------------------------------------------------------------------
def _write_wav(path: Path, n: int, rate: int = 16_000, channels: int = 1, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    samples = (np.random.default_rng(seed).normal(0, 3000, n * channels)).astype("<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(samples.tobytes())
    return path


def test_mfcc_shape_for_full_and_short_clips(tmp_path):
    pytest.importorskip("librosa")
    full = audio.read_wav(_write_wav(tmp_path / "full.wav", 16_000))
    short = audio.read_wav(_write_wav(tmp_path / "short.wav", 12_288))
    assert full.dtype == np.float32 and len(full) == 16_000 and len(short) == 12_288
    assert audio.NUM_FRAMES == 98
    a, b = audio.mfcc(full), audio.mfcc(short)
    assert a.shape == b.shape == (40, 98) and a.dtype == np.float32
    assert np.isfinite(a).all() and np.isfinite(b).all()
    assert len(audio.fit_clip(np.ones(20_000, np.float32))) == 16_000
    padded = audio.fit_clip(short)
    assert len(padded) == 16_000 and not padded[12_288:].any()


def _manifest(data_dir: Path, rows: list[tuple[str, str, str, str]]) -> None:
    lines = ["path,label,speaker_id,utterance_id,num_samples,official_split,sha256"]
    for rel, label, speaker, split in rows:
        path = data_dir / rel
        with wave.open(str(path), "rb") as wav:
            n = wav.getnframes()
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{rel},{label},{speaker},0,{n},{split},{digest}")
    (data_dir / "manifest.csv").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: _write_wav(p, 16_000, rate=8_000), "sample rate 8000"),
        (lambda p: _write_wav(p, 16_000, channels=2), "2 channels"),
        (lambda p: p.write_bytes(_write_wav(p, 16_000).read_bytes()[:10_000]), "truncated"),
        (lambda p: p.write_bytes(b"RIFF\x00\x00not a wave file at all"), "not a readable"),
    ],
    ids=["rate", "channels", "truncated", "garbage"],
)
def test_bad_wav_is_a_data_error_naming_the_file(tmp_path, make, message):
    data_dir = tmp_path / "data"
    _write_wav(data_dir / "yes" / "aaaa_nohash_0.wav", 16_000)
    _write_wav(data_dir / "no" / "bbbb_nohash_0.wav", 16_000, seed=1)
    _manifest(
        data_dir,
        [
            ("yes/aaaa_nohash_0.wav", "yes", "aaaa", "training"),
            ("no/bbbb_nohash_0.wav", "no", "bbbb", "testing"),
        ],
    )
    make(tmp_path / "bad.wav")
    with pytest.raises(DataError, match=message) as info:
        audio.read_wav(tmp_path / "bad.wav")
    assert "bad.wav" in str(info.value)
    # the same corruption inside a data directory, found by the loader (manifest without
    # sizes or checksums, so that the WAV check itself is what fails)
    make(data_dir / "no" / "bbbb_nohash_0.wav")
    (data_dir / "manifest.csv").write_text(
        "path,label,speaker_id,official_split\n"
        "yes/aaaa_nohash_0.wav,yes,aaaa,training\n"
        "no/bbbb_nohash_0.wav,no,bbbb,testing\n"
    )
    workload = speech.SpeechWorkload(cache_dir=tmp_path / "cache")
    with pytest.raises(DataError, match=message) as info:
        workload.load(data_dir)
    assert "bbbb_nohash_0.wav" in str(info.value)


def test_checksum_mismatch_missing_dir_and_unknown_layout(tmp_path):
    data_dir = tmp_path / "data"
    _write_wav(data_dir / "yes" / "aaaa_nohash_0.wav", 16_000)
    _write_wav(data_dir / "no" / "bbbb_nohash_0.wav", 16_000, seed=1)
    _manifest(
        data_dir,
        [
            ("yes/aaaa_nohash_0.wav", "yes", "aaaa", "training"),
            ("no/bbbb_nohash_0.wav", "no", "bbbb", "testing"),
        ],
    )
    _write_wav(data_dir / "no" / "bbbb_nohash_0.wav", 16_000, seed=2)  # same size, new bytes
    workload = speech.SpeechWorkload(cache_dir=tmp_path / "cache")
    with pytest.raises(DataError, match="checksum mismatch"):
        workload.load(data_dir)
    with pytest.raises(DataError, match="not found"):
        workload.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="manifest.csv"):
        workload.load(tmp_path / "empty")


def test_google_layout_with_split_lists(tmp_path):
    pytest.importorskip("librosa")
    root = tmp_path / "speech_commands_v0.02"
    clips = {
        "yes/s1_nohash_0.wav": "training",
        "yes/s2_nohash_0.wav": "validation",
        "yes/s3_nohash_0.wav": "testing",
        "no/s1_nohash_1.wav": "training",
        "no/s2_nohash_0.wav": "validation",
        "no/s3_nohash_1.wav": "testing",
        "up/s4_nohash_0.wav": "training",
    }
    for i, rel in enumerate(clips):
        _write_wav(root / rel, 16_000 if i % 2 else 13_000, seed=i)
    _write_wav(root / "_background_noise_" / "noise.wav", 32_000)
    (root / "validation_list.txt").write_text(
        "\n".join(r for r, s in clips.items() if s == "validation") + "\n"
    )
    (root / "testing_list.txt").write_text(
        "\n".join(r for r, s in clips.items() if s == "testing") + "\n"
    )
    workload = speech.SpeechWorkload(cache_dir=tmp_path / "cache")
    data = workload.load(root)
    assert data.num_classes == 3 and data.user_names == ["s1", "s2", "s3", "s4"]
    assert len(data.train) == 5 and len(data.test) == 2  # validation clips train
    assert data.train.x.shape == (5, 40, 98)
    assert set(data.test.users.tolist()) == {2}  # held-out speaker s3 only
    assert not set(data.train.users.tolist()) & set(data.test.users.tolist())
    assert len(list((tmp_path / "cache").glob("mfcc-*.npy"))) == 1


@pytest.fixture(scope="module")
def speech_subset(tmp_path_factory):
    """The repository's 300 real clips (files read and verified), with stand-in features so
    the test does not spend seconds on MFCCs; the real front end is tested above."""
    if not (SPEECH_DIR / "manifest.csv").is_file():
        pytest.skip("data/speech_commands is not present")
    mp = pytest.MonkeyPatch()
    mp.setattr(audio, "mfcc", lambda s: np.full((40, 98), float(np.abs(s).mean()), np.float32))
    workload = speech.SpeechWorkload(cache_dir=tmp_path_factory.mktemp("speech-cache"))
    try:
        data = workload.load(SPEECH_DIR)
    finally:
        mp.undo()
    return workload, data


def test_speech_subset_split_by_held_out_speakers(speech_subset):
    workload, data = speech_subset
    assert len(data.train) == 249 and len(data.test) == 51
    assert data.num_classes == 30 and len(data.user_names) == 41
    assert not set(data.train.users.tolist()) & set(data.test.users.tolist())
    assert data.train.x.shape == (249, 40, 98) and data.train.x.dtype == np.float16
    torch.manual_seed(0)
    model = workload.build_model()
    assert model(workload.inputs(data.test.x[:2])).shape == (2, 30)
    result = train_local(
        workload, model, data.train.x, data.train.y, steps=1, lr=0.001, batch_size=16, seed=0
    )
    assert np.isfinite(result.mean_loss)


def test_speech_partition_by_speaker(speech_subset):
    workload, data = speech_subset
    for sites, whole_users in ((10, True), (34, True), (100, False)):
        part = workload.partition(data, sites, seed=0)
        assert len(part.site_indices) == sites
        _assert_good_partition(part, len(data.train), data.train.users if whole_users else None)
        assert _same(part, workload.partition(data, sites, seed=0))
        if not whole_users:  # more sites than speakers: each site still has one speaker
            assert all(len(set(data.train.users[ix].tolist())) == 1 for ix in part.site_indices)
    assert not _same(workload.partition(data, 10, seed=0), workload.partition(data, 10, seed=1))


def test_speech_features_are_cached_by_manifest(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    _write_wav(data_dir / "yes" / "aaaa_nohash_0.wav", 16_000)
    _write_wav(data_dir / "no" / "bbbb_nohash_0.wav", 15_000, seed=1)
    _manifest(
        data_dir,
        [
            ("yes/aaaa_nohash_0.wav", "yes", "aaaa", "training"),
            ("no/bbbb_nohash_0.wav", "no", "bbbb", "testing"),
        ],
    )
    calls = []
    monkeypatch.setattr(audio, "mfcc", lambda s: calls.append(1) or np.ones((40, 98), np.float32))
    monkeypatch.setenv("POWERTRIP_CACHE_DIR", str(tmp_path / "cache-root"))
    workload = get_workload("speech")
    workload.load(data_dir)
    workload.load(data_dir)
    assert len(calls) == 2  # two clips, computed once
    assert len(list((tmp_path / "cache-root" / "speech").glob("mfcc-*.npy"))) == 1
    _manifest(
        data_dir,
        [
            ("yes/aaaa_nohash_0.wav", "yes", "aaaa", "testing"),
            ("no/bbbb_nohash_0.wav", "no", "bbbb", "training"),
        ],
    )
    workload.load(data_dir)  # a changed manifest is a new key
    assert len(calls) == 4


def test_speech_trains_with_adamw_which_moves_where_sgd_does_not(speech_subset):
    """KWT-1 at lr 0.001: the workload's AdamW lowers the loss on a fixed batch within 15
    steps; plain SGD at the same lr barely moves it (why speech declares adamw)."""
    workload, data = speech_subset
    assert workload.defaults.optimizer == "adamw"
    x, y = data.train.x[:16], data.train.y[:16]
    torch.manual_seed(0)
    model = workload.build_model()
    start = {k: v.clone() for k, v in model.state_dict().items()}

    def loss_after(optimizer: str) -> float:
        model.load_state_dict(start)
        result = train_local(
            workload, model, x, y, steps=15, lr=0.001, batch_size=16, seed=0, optimizer=optimizer
        )
        model.load_state_dict({k: start[k] + result.delta[k] for k in start})
        with torch.no_grad():
            return float(
                torch.nn.functional.cross_entropy(model(workload.inputs(x)), workload.targets(y))
            )

    model.load_state_dict(start)
    with torch.no_grad():
        initial = float(
            torch.nn.functional.cross_entropy(model(workload.inputs(x)), workload.targets(y))
        )
    adamw, sgd = loss_after("adamw"), loss_after("sgd")
    assert adamw < initial - 0.5, (initial, adamw)
    assert abs(sgd - initial) < initial - adamw, (initial, sgd, adamw)
