"""A tiny workload on generated data, for fast tests and scale runs. Still real training.

Up to NUM_USERS (200) sites, the 200 generated users are grouped into sites as any real
data set's users are (`partition_by_user`), as this workload always did. Beyond that each
site is a generated user of its own: its samples come from (run seed, site index) when
the site trains, so any number of sites works and a worker hosting 100,000 sites holds the
data of none of them until a round selects it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from powertrip.core.workloads.base import (
    Dataset,
    SiteData,
    Split,
    Workload,
    WorkloadDefaults,
)

NUM_CLASSES = 10
NUM_FEATURES = 32
NUM_USERS = 200
SAMPLES_PER_USER = 60
#: the fixed data set's seed: every process builds identical data whatever the run seed
DATA_SEED = 1234
#: training samples of a generated site: a user's 60 less the 20 % a user of the fixed data
#: set loses to the held-out split, on average
SITE_SAMPLES = 48
#: beyond this many sites, each site generates its own user
MAX_GROUPED_SITES = NUM_USERS


def class_centers() -> np.ndarray:
    """The classes' Gaussian centres: the first draw of the fixed data set's generator."""
    rng = np.random.default_rng(DATA_SEED)
    return rng.normal(0, 1.0, size=(NUM_CLASSES, NUM_FEATURES)).astype(np.float32)


def user_samples(
    rng: np.random.Generator, centers: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """One user's `n` samples, label-skewed: it mostly sees 3 classes (30 % each)."""
    favourite = rng.choice(NUM_CLASSES, size=3, replace=False)
    probs = np.full(NUM_CLASSES, 0.1 / (NUM_CLASSES - 3))
    probs[favourite] = 0.3
    y = rng.choice(NUM_CLASSES, size=n, p=probs / probs.sum())
    x = centers[y] + rng.normal(0, 1.6, size=(n, NUM_FEATURES))
    return x.astype(np.float32), y.astype(np.int64)


def site_samples(seed: int, index: int, centers: np.ndarray | None = None):
    """(x, y) of generated site `index` in a run seeded `seed`: a function of the two only,
    so any process makes the same samples for a site, in any order."""
    if index < 0:
        raise IndexError(f"site index must be >= 0, got {index}")
    centers = class_centers() if centers is None else centers
    # SeedSequence takes non-negative entropy: fold a negative seed into 64 bits
    rng = np.random.default_rng([DATA_SEED, seed & 0xFFFF_FFFF_FFFF_FFFF, index])
    return user_samples(rng, centers, SITE_SAMPLES)


class GeneratedSites(SiteData):
    """One generated user per site, made when the site trains (nothing held per site)."""

    def __init__(self, pooled: Split, num_sites: int, seed: int):
        note = (
            f"{num_sites} sites, each a generated user of its own ({SITE_SAMPLES} samples "
            f"from the run seed and the site index, made when the site trains)"
        )
        super().__init__(pooled, num_sites, note)
        self.seed = seed
        self.centers = class_centers()

    def site(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        self.check(index)
        return site_samples(self.seed, index, self.centers)


class SyntheticWorkload(Workload):
    name = "synthetic"
    summary = "10-class Gaussian mixture, 32 features, 2-layer MLP; non-IID users (tests only)"
    defaults = WorkloadDefaults(
        lr=0.05,
        batch_size=20,
        local_steps=5,
        target_accuracy=0.8,
        update_size_bytes=1.5e9,
        tau_s=30.0,  # OUR CHOICE, tests only: half the paper workloads' 60 s
        eval_samples=1000,
    )

    def num_train_samples(self, data_dir: str | Path | None = None) -> None:
        """No limit on the site count (`powertrip.app.experiments.datacmd.training_samples`):
        beyond NUM_USERS sites every site generates its own samples."""
        return None

    def load(self, data_dir: str | Path | None = None, seed: int = 0) -> Dataset:
        # The data set is fixed (DATA_SEED) so every process builds identical data; the run
        # seed only affects partitioning and training.
        rng = np.random.default_rng(DATA_SEED)
        centers = rng.normal(0, 1.0, size=(NUM_CLASSES, NUM_FEATURES)).astype(np.float32)
        xs, ys, us = [], [], []
        for user in range(NUM_USERS):
            x, y = user_samples(rng, centers, SAMPLES_PER_USER)
            xs.append(x)
            ys.append(y)
            us.append(np.full(SAMPLES_PER_USER, user))
        x, y, u = np.concatenate(xs), np.concatenate(ys), np.concatenate(us)
        test_mask = np.zeros(len(y), dtype=bool)
        test_mask[rng.permutation(len(y))[: len(y) // 5]] = True
        return Dataset(
            train=Split(x[~test_mask], y[~test_mask], u[~test_mask]),
            test=Split(x[test_mask], y[test_mask], u[test_mask]),
            user_names=[f"user{i:03d}" for i in range(NUM_USERS)],
            num_classes=NUM_CLASSES,
            source=f"generated (seed {DATA_SEED})",
        )

    def site_data(self, data_dir: str | Path | None, num_sites: int, seed: int) -> SiteData:
        """Up to NUM_USERS sites: the users grouped into sites (unchanged). Beyond: one
        generated user per site; centralized tasks train on the fixed data set's
        training split, a sample of the same distribution."""
        if num_sites <= MAX_GROUPED_SITES:
            return super().site_data(data_dir, num_sites, seed)
        return GeneratedSites(self.load(data_dir, seed).train, num_sites, seed)

    def build_model(self, device: str = "cpu"):
        from torch import nn

        return nn.Sequential(nn.Linear(NUM_FEATURES, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES))
