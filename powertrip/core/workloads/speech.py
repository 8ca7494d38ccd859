"""Google Speech Commands keyword spotting with KWT-1, one natural user per speaker.

Data (`data/speech_commands/`, see its README.md): 16 kHz mono WAV clips in one folder per
word. Two layouts are read:

* the repository's subset: a `manifest.csv` (path, label, speaker_id, utterance_id,
  num_samples, official_split, sha256); sizes and checksums are verified;
* the full data set as Google ships it: word folders plus `validation_list.txt` and
  `testing_list.txt`; the speaker is the file name before `_nohash_`, folders starting with
  `_` (background noise) are skipped.

Split: training = the official `training` + `validation` clips; held-out = the official
`testing` clips. Speech Commands assigns splits by a hash of the speaker, so the held-out
clips come from speakers no site has (in the 300-clip subset: 249 clips of 34 speakers for
training, 51 clips of 7 other speakers held out). Classes are the words present (30 in the
subset; the paper's v0.02 has 35), indexed in sorted order.

Features: 40 MFCCs x 98 frames per clip (`powertrip.core.workloads.audio`, librosa), computed once
and cached in `$POWERTRIP_CACHE_DIR/speech/` (default `~/.cache/powertrip/speech/`) under a hash
of the manifest (or of the file listing and split lists) and the feature settings. Each
coefficient is then standardised with the mean and deviation of the training clips, and kept
as float16 (N, 40, 98) to keep site processes small.

Model: KWT-1 (Berg et al. 2021) as in ARM-software/keyword-transformer: one patch per frame
(40x1), linear projection to 64, a class token, learned position embedding, 12 post-norm
transformer blocks (1 head, MLP 256, GELU, LayerNorm eps 1e-6, q/k/v without bias), a linear
head on the class token; truncated-normal(0.02) initialisation. 606,528 parameters before the
head (the released KWT-1 summary), 608,478 with a 30-way head.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from powertrip.core.workloads import audio
from powertrip.core.workloads.base import DataError, Dataset, Split, Workload, WorkloadDefaults

MANIFEST = "manifest.csv"
MANIFEST_COLUMNS = ("path", "label", "speaker_id", "official_split")
SPLIT_LISTS = ("validation_list.txt", "testing_list.txt")
TRAIN_SPLITS = ("training", "validation")
TEST_SPLIT = "testing"
PAPER_NUM_CLASSES = 35  # Speech Commands v0.02, used only when no data is at hand
HOW_TO_GET = (
    "The 300-clip subset ships with the repository in data/speech_commands/ (see its "
    "README.md); pass --data-dir or set POWERTRIP_DATA_DIR to use a full Speech Commands copy."
)


def default_cache_dir() -> Path:
    """`$POWERTRIP_CACHE_DIR/speech`, else `~/.cache/powertrip/speech`."""
    root = os.environ.get("POWERTRIP_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "powertrip"
    return base / "speech"


@dataclass(frozen=True)
class Clip:
    path: str  # relative to the data directory, with '/'
    label: str
    speaker: str
    split: str  # training | validation | testing
    num_samples: int | None = None
    sha256: str | None = None


@dataclass
class ClipIndex:
    root: Path
    clips: list[Clip]
    key: str  # hash of what the features depend on
    layout: str


# ---- finding the clips --------------------------------------------------------------------
def read_index(data_dir: Path) -> ClipIndex:
    """The clips of a data directory in either layout; DataError if neither is there."""
    if not data_dir.is_dir():
        raise DataError(f"Speech Commands data not found: looked in {data_dir}. {HOW_TO_GET}")
    if (data_dir / MANIFEST).is_file():
        return _read_manifest(data_dir)
    if all((data_dir / name).is_file() for name in SPLIT_LISTS):
        return _read_google_layout(data_dir)
    raise DataError(
        f"{data_dir} has neither {MANIFEST} nor {' and '.join(SPLIT_LISTS)}: not a Speech "
        f"Commands directory. {HOW_TO_GET}"
    )


def _read_manifest(data_dir: Path) -> ClipIndex:
    path = data_dir / MANIFEST
    raw = path.read_bytes()
    try:
        rows = list(csv.DictReader(raw.decode("utf-8").splitlines()))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: unreadable CSV ({exc}). {HOW_TO_GET}") from exc
    if not rows:
        raise DataError(f"{path}: no clips listed. {HOW_TO_GET}")
    missing = [c for c in MANIFEST_COLUMNS if c not in rows[0]]
    if missing:
        raise DataError(f"{path}: lacks columns {missing}; expected {MANIFEST_COLUMNS}")
    clips = []
    for line_no, row in enumerate(rows, start=2):
        split = row["official_split"]
        if split not in (*TRAIN_SPLITS, TEST_SPLIT) or not row["path"] or not row["label"]:
            raise DataError(f"{path}:{line_no}: bad row {row}")
        n = row.get("num_samples")
        try:
            num_samples = int(n) if n else None
        except ValueError:
            raise DataError(f"{path}:{line_no}: num_samples {n!r} is not a number") from None
        clips.append(
            Clip(
                path=row["path"],
                label=row["label"],
                speaker=row["speaker_id"] or _speaker_of(row["path"]),
                split=split,
                num_samples=num_samples,
                sha256=row.get("sha256") or None,
            )
        )
    key = _key(raw)
    return ClipIndex(data_dir, clips, key, f"{MANIFEST} ({len(clips)} clips)")


def _speaker_of(rel_path: str) -> str:
    return Path(rel_path).name.split("_nohash_")[0]


def _read_google_layout(data_dir: Path) -> ClipIndex:
    lists = {}
    for name in SPLIT_LISTS:
        text = (data_dir / name).read_text(encoding="utf-8")
        lists[name] = {line.strip() for line in text.splitlines() if line.strip()}
    validation, testing = (lists[name] for name in SPLIT_LISTS)
    clips, listing = [], []
    for word_dir in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        if word_dir.name.startswith(("_", ".")):
            continue
        for wav in sorted(word_dir.glob("*.wav")):
            rel = f"{word_dir.name}/{wav.name}"
            split = (
                TEST_SPLIT if rel in testing else "validation" if rel in validation else "training"
            )
            clips.append(Clip(rel, word_dir.name, _speaker_of(rel), split))
            listing.append(f"{rel}\t{wav.stat().st_size}\t{split}")
    if not clips:
        raise DataError(f"{data_dir}: no <word>/*.wav clips found. {HOW_TO_GET}")
    key = _key("\n".join(listing).encode())
    return ClipIndex(data_dir, clips, key, f"word folders + split lists ({len(clips)} clips)")


def _key(content: bytes) -> str:
    digest = hashlib.sha256(content + audio.FEATURE_VERSION.encode())
    return digest.hexdigest()[:20]


# ---- features -----------------------------------------------------------------------------
def compute_features(index: ClipIndex, progress: bool = True) -> np.ndarray:
    """(N, 40, 98) float32 MFCCs of every clip, verifying size and checksum when listed."""
    out = np.empty((len(index.clips), audio.NUM_MFCC, audio.NUM_FRAMES), dtype=np.float32)
    for i, clip in enumerate(index.clips):
        path = index.root / clip.path
        if clip.sha256 is not None:
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError as exc:
                raise DataError(f"{path}: cannot read ({exc}). {HOW_TO_GET}") from exc
            if digest != clip.sha256:
                raise DataError(
                    f"{path}: checksum mismatch with {MANIFEST} (corrupted or replaced). "
                    f"{HOW_TO_GET}"
                )
        samples = audio.read_wav(path, HOW_TO_GET)
        if clip.num_samples is not None and len(samples) != clip.num_samples:
            raise DataError(
                f"{path}: {len(samples)} samples, {MANIFEST} says {clip.num_samples}. {HOW_TO_GET}"
            )
        out[i] = audio.mfcc(samples)
        if progress and (i + 1) % 5000 == 0:
            print(f"speech: MFCCs {i + 1}/{len(index.clips)}", file=sys.stderr)
    return out


def cached_features(index: ClipIndex, cache_dir: Path) -> np.ndarray:
    """MFCCs from `cache_dir/mfcc-<key>.npy`, computed and written on a miss."""
    path = cache_dir / f"mfcc-{index.key}.npy"
    if path.is_file():
        try:
            features = np.load(path, allow_pickle=False)
            if features.shape == (len(index.clips), audio.NUM_MFCC, audio.NUM_FRAMES):
                return features
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            pass
        print(f"speech: cached MFCCs {path} are unreadable; recomputing", file=sys.stderr)
    print(
        f"speech: computing MFCCs of {len(index.clips)} clips from {index.root} into {path} "
        "(one-off)",
        file=sys.stderr,
    )
    features = compute_features(index)
    cache_dir.mkdir(parents=True, exist_ok=True)
    meta = {"source": str(index.root), "layout": index.layout, "features": audio.FEATURE_VERSION}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")  # written aside, renamed: never partial
    np.save(tmp, features)
    tmp.replace(path)
    return features


# ---- model --------------------------------------------------------------------------------
def build_kwt(
    num_classes: int,
    *,
    num_frames: int = audio.NUM_FRAMES,
    num_coeffs: int = audio.NUM_MFCC,
    dim: int = 64,
    depth: int = 12,
    heads: int = 1,
    mlp_dim: int = 256,
):
    """KWT-1 taking (batch, 40 coefficients, 98 frames); logits (batch, num_classes)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    def trunc_normal(t):
        return nn.init.trunc_normal_(t, std=0.02, a=-0.04, b=0.04)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Linear(dim, dim, bias=False)
            self.k = nn.Linear(dim, dim, bias=False)
            self.v = nn.Linear(dim, dim, bias=False)
            self.out = nn.Linear(dim, dim)

        def forward(self, x):
            b, n, _ = x.shape

            def split(t):
                return t.view(b, n, heads, dim // heads).transpose(1, 2)

            y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)))
            return self.out(y.transpose(1, 2).reshape(b, n, dim))

    class Block(nn.Module):  # post-norm, as KWT's default (prenorm=False)
        def __init__(self) -> None:
            super().__init__()
            self.attn = Attention()
            self.norm1 = nn.LayerNorm(dim, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))
            self.norm2 = nn.LayerNorm(dim, eps=1e-6)

        def forward(self, x):
            x = self.norm1(x + self.attn(x))
            return self.norm2(x + self.mlp(x))

    class KWT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch_proj = nn.Linear(num_coeffs, dim)
            self.class_token = nn.Parameter(trunc_normal(torch.empty(1, 1, dim)))
            self.pos_emb = nn.Parameter(trunc_normal(torch.empty(1, num_frames + 1, dim)))
            self.blocks = nn.ModuleList(Block() for _ in range(depth))
            self.head = nn.Linear(dim, num_classes)
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    trunc_normal(module.weight)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)

        def forward(self, x):  # x: (batch, coefficients, frames)
            x = self.patch_proj(x.transpose(1, 2))
            x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
            x = x + self.pos_emb
            for block in self.blocks:
                x = block(x)
            return self.head(x[:, 0])

    return KWT()


# ---- workload -----------------------------------------------------------------------------
class SpeechWorkload(Workload):
    name = "speech"
    summary = (
        "Google Speech Commands keyword spotting, KWT-1 on 40x98 MFCCs (lr 0.001, batch 16), "
        "partitioned by speaker"
    )
    data_subdir = "speech_commands"
    defaults = WorkloadDefaults(
        lr=0.001,
        batch_size=16,
        local_steps=10,
        target_accuracy=0.1,
        update_size_bytes=1.5e9,
        tau_s=60.0,  # OUR CHOICE: the paper gives no T (why: WorkloadDefaults.tau_s)
        eval_samples=2000,
        optimizer="adamw",  # KWT's optimiser; SGD at lr 0.001 leaves the loss flat for minutes
    )

    def __init__(self, cache_dir: str | Path | None = None) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.num_classes: int | None = None

    def load(self, data_dir: str | Path | None = None, seed: int = 0) -> Dataset:
        index = read_index(self.data_dir(data_dir))
        features = cached_features(index, self.cache_dir or default_cache_dir())
        labels = sorted({c.label for c in index.clips})
        speakers = sorted({c.speaker for c in index.clips})
        label_ix = {name: i for i, name in enumerate(labels)}
        speaker_ix = {name: i for i, name in enumerate(speakers)}
        y = np.array([label_ix[c.label] for c in index.clips], dtype=np.int64)
        users = np.array([speaker_ix[c.speaker] for c in index.clips], dtype=np.int64)
        is_train = np.array([c.split in TRAIN_SPLITS for c in index.clips])
        if not is_train.any() or is_train.all():
            raise DataError(
                f"{index.root}: need both training/validation and testing clips "
                f"({int(is_train.sum())} training, {int((~is_train).sum())} testing)"
            )
        # standardise each coefficient with training-clip statistics (in place: the full
        # data set's features are ~1.6 GB as float32), then keep float16
        train_feats = features[is_train]
        mean = train_feats.mean(axis=(0, 2), keepdims=True)
        std = train_feats.std(axis=(0, 2), keepdims=True) + 1e-6
        del train_feats
        features -= mean
        features /= std
        x = features.astype(np.float16)
        del features
        self.num_classes = len(labels)
        return Dataset(
            train=Split(x[is_train], y[is_train], users[is_train]),
            test=Split(x[~is_train], y[~is_train], users[~is_train]),
            user_names=speakers,
            num_classes=len(labels),
            source=f"{index.root} ({index.layout})",
        )

    def prepare(self, cache_dir: str | Path | None = None) -> Path:
        """Compute the MFCC cache of the default data directory ahead of a run."""
        index = read_index(self.data_dir(None))
        cache = Path(cache_dir) if cache_dir else self.cache_dir or default_cache_dir()
        cached_features(index, cache)
        return cache / f"mfcc-{index.key}.npy"

    def _classes_without_loading(self) -> int:
        try:
            index = read_index(self.data_dir(None))
        except (DataError, OSError):
            return PAPER_NUM_CLASSES
        return len({c.label for c in index.clips})

    def build_model(self, device: str = "cpu"):
        num_classes = self.num_classes or self._classes_without_loading()
        return build_kwt(num_classes)

    def inputs(self, x: np.ndarray):
        import torch

        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
