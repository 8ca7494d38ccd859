"""FEMNIST (LEAF) with the LEAF CNN; real handwritten characters partitioned by writer."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from powertrip.core.workloads.base import DataError, Dataset, Split, Workload, WorkloadDefaults

FILE_NAME = "femnist_leaf_subset.npz"
REQUIRED_KEYS = ("images", "labels", "writer", "writers", "leaf_split")
NUM_CLASSES = 62


class FemnistWorkload(Workload):
    name = "femnist"
    summary = "LEAF FEMNIST, 62 classes, CNN (lr 0.1, batch 20), partitioned by writer"
    data_subdir = "femnist_leaf_subset"
    # The paper's lr is 0.01 and its EMNIST target 45 % (Fig. 8). On this 6.7 % subset lr 0.01
    # leaves every policy short of even 45 % within `compare`'s 3 h budget, so the default is
    # the calibrated set-up of configs/reproduce.yaml: lr 0.1, target 45 % (--lr 0.01 for the
    # paper's). Comparable runs need a target every policy can reach in its budget.
    defaults = WorkloadDefaults(
        lr=0.1,
        batch_size=20,
        local_steps=10,
        target_accuracy=0.45,
        update_size_bytes=1.5e9,
        tau_s=60.0,  # OUR CHOICE: the paper gives no T (why: WorkloadDefaults.tau_s)
        eval_samples=2000,
    )

    def load(self, data_dir: str | Path | None = None, seed: int = 0) -> Dataset:
        path = self.data_dir(data_dir) / FILE_NAME
        if not path.is_file():
            raise DataError(
                f"FEMNIST data not found: looked for {path}. It ships with the repository in "
                f"data/{self.data_subdir}/ (see its README.md); pass --data-dir or set "
                "POWERTRIP_DATA_DIR if you keep it elsewhere."
            )
        try:
            with np.load(path, allow_pickle=False) as npz:
                missing = [k for k in REQUIRED_KEYS if k not in npz.files]
                if missing:
                    raise DataError(f"{path} lacks arrays {missing}; expected {REQUIRED_KEYS}")
                images = npz["images"]
                labels = npz["labels"].astype(np.int64)
                writer = npz["writer"].astype(np.int64)
                writers = [str(w) for w in npz["writers"]]
                split = npz["leaf_split"]
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise DataError(f"{path} is unreadable or truncated: {exc}") from exc
        n = len(labels)
        if images.dtype != np.uint8:
            raise DataError(f"{path}: images must be uint8 pixels, got {images.dtype}")
        if images.shape != (n, 28, 28) or len(writer) != n or len(split) != n:
            raise DataError(
                f"{path}: inconsistent array shapes (images {images.shape}, {n} labels)"
            )
        if labels.min() < 0 or labels.max() >= NUM_CLASSES:
            raise DataError(f"{path}: labels outside 0..{NUM_CLASSES - 1}")
        train, test = split == 0, split == 1
        return Dataset(
            train=Split(images[train], labels[train], writer[train]),
            test=Split(images[test], labels[test], writer[test]),
            user_names=writers,
            num_classes=NUM_CLASSES,
            source=str(path),
        )

    def inputs(self, x: np.ndarray):
        """uint8 images (..., 28, 28) as the model's float32 ink (..., 1, 28, 28)."""
        import torch

        return torch.from_numpy(np.expand_dims(INK[x], -3))

    def build_model(self, device: str = "cpu"):
        from torch import nn

        # LEAF's FEMNIST CNN (Caldas et al. 2018): two 5x5 conv + pool, FC 2048, FC 62.
        return nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(7 * 7 * 64, 2048),
            nn.ReLU(),
            nn.Linear(2048, NUM_CLASSES),
        )


#: LEAF stores white background (255) with dark ink; the CNN wants ink = 1.0. The images stay
#: uint8 (a quarter of the memory) and a batch becomes float32 when it is fed to the model: a
#: table of the 256 values, (255 - v) / 255 in float32 as numpy computes it element by element,
#: read with one gather, gives the same bytes as converting every pixel up front. Converting
#: all 54,000 images up front was 1.2-1.4 s of each service's start-up.
INK = (np.float32(255) - np.arange(256, dtype=np.float32)) / np.float32(255.0)
