"""A tiny workload on generated data, for fast tests. Still real training with torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from powertrip.workloads.base import Dataset, Split, Workload, WorkloadDefaults

NUM_CLASSES = 10
NUM_FEATURES = 32
NUM_USERS = 200
SAMPLES_PER_USER = 60


class SyntheticWorkload(Workload):
    name = "synthetic"
    summary = "10-class Gaussian mixture, 32 features, 2-layer MLP; non-IID users (tests only)"
    defaults = WorkloadDefaults(
        lr=0.05,
        batch_size=20,
        local_steps=5,
        target_accuracy=0.8,
        update_size_bytes=1.5e9,
        tau_s=30.0,
        eval_samples=1000,
    )

    def load(self, data_dir: str | Path | None = None, seed: int = 0) -> Dataset:
        # The data set is fixed (seed 1234) so every process builds identical data; the run
        # seed only affects partitioning and training.
        rng = np.random.default_rng(1234)
        centers = rng.normal(0, 1.0, size=(NUM_CLASSES, NUM_FEATURES)).astype(np.float32)
        xs, ys, us = [], [], []
        for user in range(NUM_USERS):
            # label skew: each user mostly sees 3 classes
            favourite = rng.choice(NUM_CLASSES, size=3, replace=False)
            probs = np.full(NUM_CLASSES, 0.1 / (NUM_CLASSES - 3))
            probs[favourite] = 0.3
            y = rng.choice(NUM_CLASSES, size=SAMPLES_PER_USER, p=probs / probs.sum())
            x = centers[y] + rng.normal(0, 1.6, size=(SAMPLES_PER_USER, NUM_FEATURES))
            xs.append(x.astype(np.float32))
            ys.append(y.astype(np.int64))
            us.append(np.full(SAMPLES_PER_USER, user))
        x, y, u = np.concatenate(xs), np.concatenate(ys), np.concatenate(us)
        test_mask = np.zeros(len(y), dtype=bool)
        test_mask[rng.permutation(len(y))[: len(y) // 5]] = True
        return Dataset(
            train=Split(x[~test_mask], y[~test_mask], u[~test_mask]),
            test=Split(x[test_mask], y[test_mask], u[test_mask]),
            user_names=[f"user{i:03d}" for i in range(NUM_USERS)],
            num_classes=NUM_CLASSES,
            source="generated (seed 1234)",
        )

    def build_model(self):
        from torch import nn

        return nn.Sequential(nn.Linear(NUM_FEATURES, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES))
