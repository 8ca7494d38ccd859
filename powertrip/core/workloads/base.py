"""The one small interface every workload implements.

A workload bundles what a site and the aggregator must agree on: the model, the data and
how it is split across sites, and the paper's hyper-parameters as defaults. Adding a workload
is one module plus one entry in `powertrip.core.workloads.REGISTRY`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from powertrip.core.datapaths import data_root

if TYPE_CHECKING:  # torch is imported lazily: processes that do not train never pay for it
    import torch


class DataError(RuntimeError):
    """The data a workload needs is missing, truncated or malformed; the message says where."""


@dataclass(frozen=True)
class WorkloadDefaults:
    """The paper's hyper-parameters (§5.1) and the emulated costs used by the time model."""

    lr: float
    batch_size: int
    local_steps: int
    target_accuracy: float
    update_size_bytes: float  # emulated M for the time model, independent of the real delta
    #: modelled time of one site's local work at full power (the paper's ideal training time
    #: T, §5.1, which it gives no value for). 60 s for the paper's workloads is OUR CHOICE:
    #: a minute puts compute (60 / p_i: 60-600 s at p in [0.1, 1]) on the scale of a 1.5 GB
    #: update's transfer (1.2 s at 100 miles to 120 s at 10,000 with B_ref 10 Gbit/s), so
    #: neither power nor distance decides the straggler alone and Eq. 8's trade-off matters;
    #: the tau sweep (reproduction/paper/tau_sweep.py) shows how k* moves with it, and
    #: tau_source measured (powertrip/core/steptime.py) replaces it with the measured work
    tau_s: float
    eval_samples: int  # held-out samples evaluated each round (fixed subset, seeded)
    # a site's local optimiser (`powertrip.core.training.OPTIMIZERS`), created fresh every round:
    # plain SGD as in the paper, except where a model does not learn with it (KWT-1 needs AdamW)
    optimizer: str = "sgd"
    #: a held-out perplexity target that replaces target_accuracy (RunConfig.target_perplexity);
    #: None for the classification workloads
    target_perplexity: float | None = None
    #: the seed that draws the evaluated held-out subset: None = the run's seed; a fixed one
    #: where an absolute target must mean the same in every seed (shakespeare-lm: the base's
    #: perplexity is 10.9, 10.0 and 10.4 on the subsets of seeds 0, 1 and 2)
    eval_seed: int | None = None


@dataclass
class Split:
    """Samples with the natural user (writer, speaker, role) each belongs to."""

    x: np.ndarray
    y: np.ndarray
    users: np.ndarray  # int index into Dataset.user_names

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Dataset:
    train: Split
    test: Split
    user_names: list[str]
    num_classes: int
    source: str  # where it was read from, for reports


@dataclass
class Partition:
    """Training-sample indices of each site, and how natural users were grouped or split."""

    site_indices: list[np.ndarray]
    note: str
    site_users: list[list[int]] = field(default_factory=list)

    def sizes(self) -> np.ndarray:
        return np.array([len(ix) for ix in self.site_indices])


class SiteData:
    """The training data a site worker trains its sites on, one site at a time.

    Why not a Partition: a workload may make a site's samples only when that site trains
    (the synthetic workload beyond its 200 users), so a worker hosting 100,000 sites holds
    none of them up front. `pooled` is what a centralized task (DATA_SCOPE_POOLED) trains on.
    """

    def __init__(self, pooled: Split, num_sites: int, note: str):
        self.pooled = pooled
        self.num_sites = num_sites
        self.note = note

    def site(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of site `index`, 0-based; IndexError outside 0..num_sites-1."""
        raise NotImplementedError

    def check(self, index: int) -> None:
        if not 0 <= index < self.num_sites:
            raise IndexError(f"site index {index} is outside 0..{self.num_sites - 1}")


class PartitionedSites(SiteData):
    """Sites as index sets into one loaded data set (every workload with real data)."""

    def __init__(self, dataset: Dataset, partition: Partition):
        train = dataset.train
        super().__init__(train, len(partition.site_indices), partition.note)
        self.site_indices = partition.site_indices

    def site(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        self.check(index)
        ix = self.site_indices[index]
        return self.pooled.x[ix], self.pooled.y[ix]


def default_data_root() -> Path:
    """`$POWERTRIP_DATA_DIR`, else the data PowerTrip carries (powertrip/core/datapaths.py)."""
    return data_root()


class Workload(ABC):
    name: str
    summary: str
    defaults: WorkloadDefaults
    data_subdir: str = ""

    def data_dir(self, data_dir: str | Path | None) -> Path:
        return Path(data_dir) if data_dir else default_data_root() / self.data_subdir

    def check_data(self, data_dir: str | Path | None = None) -> None:
        """Cheap early check (before services start) that the data directory exists."""
        if self.data_subdir or data_dir:
            path = self.data_dir(data_dir)
            if not path.is_dir():
                raise DataError(
                    f"{self.name} data not found: looked in {path}. See docs/workloads.md (Data) "
                    "for how to get it; pass --data-dir or set POWERTRIP_DATA_DIR if it lives "
                    "elsewhere. (An installed wheel carries femnist's subset, the region "
                    "catalog, the power traces and shakespeare-lm's base; the speech clips "
                    "come with a clone of the repository: data/speech_commands.)"
                )

    @abstractmethod
    def load(self, data_dir: str | Path | None = None, seed: int = 0) -> Dataset:
        """Read (or generate) the data; raise DataError naming the file and how to get it."""

    @abstractmethod
    def build_model(self, device: str = "cpu") -> torch.nn.Module:
        """A freshly initialised model (callers seed torch first) for `device`, where the
        caller then moves it: a workload may build a form that only that device runs
        (shakespeare-lm's QLoRA base is 4-bit on CUDA), the same numbers either way."""

    def partition(self, dataset: Dataset, num_sites: int, seed: int) -> Partition:
        """Group natural users into sites (LEAF style); split users when there are too few."""
        return partition_by_user(dataset.train.users, num_sites, seed)

    def site_data(self, data_dir: str | Path | None, num_sites: int, seed: int) -> SiteData:
        """What a site worker trains on: the data loaded and partitioned (`partition`)."""
        dataset = self.load(data_dir, seed)
        return PartitionedSites(dataset, self.partition(dataset, num_sites, seed))

    def inputs(self, x: np.ndarray) -> torch.Tensor:
        import torch

        return torch.from_numpy(np.ascontiguousarray(x))

    def targets(self, y: np.ndarray) -> torch.Tensor:
        import torch

        return torch.from_numpy(np.ascontiguousarray(y)).long()


def partition_by_user(users: np.ndarray, num_sites: int, seed: int) -> Partition:
    """Assign whole users to sites when there are at least as many users as sites.

    Users are shuffled with the seed and dealt to the site with the fewest samples so far
    (largest users first), which keeps sites balanced while no user spans two sites. With
    fewer users than sites, each user's samples are split into contiguous shards so that
    every site still gets data from exactly one user.
    """
    if num_sites < 1:
        raise ValueError(f"num_sites must be >= 1, got {num_sites}")
    users = np.asarray(users)
    unique, counts = np.unique(users, return_counts=True)
    n_samples = len(users)
    if n_samples < num_sites:
        raise ValueError(
            f"num_sites={num_sites} is larger than the {n_samples} training samples available"
        )
    rng = np.random.default_rng(seed)
    by_user = {int(u): np.flatnonzero(users == u) for u in unique}
    if len(unique) >= num_sites:
        order = rng.permutation(len(unique))
        # largest first (stable on the shuffled order) so the greedy fill balances well
        order = order[np.argsort(-counts[order], kind="stable")]
        load = np.zeros(num_sites, dtype=np.int64)
        site_users: list[list[int]] = [[] for _ in range(num_sites)]
        for pos in order:
            site = int(np.argmin(load))
            site_users[site].append(int(unique[pos]))
            load[site] += counts[pos]
        site_indices = [np.sort(np.concatenate([by_user[u] for u in us])) for us in site_users]
        note = (
            f"{len(unique)} users grouped into {num_sites} sites "
            f"({len(unique) / num_sites:.1f} users per site on average)"
        )
        return Partition(site_indices, note, site_users)
    # Fewer users than sites: give each user a share of sites proportional to its samples.
    shares = np.maximum(1, np.floor(counts / counts.sum() * num_sites)).astype(int)
    while shares.sum() > num_sites:
        shares[int(np.argmax(shares))] -= 1
    while shares.sum() < num_sites:
        ratio = counts / shares
        shares[int(np.argmax(ratio))] += 1
    site_indices, site_users = [], []
    for u, n_sites in zip(unique, shares, strict=True):
        ix = rng.permutation(by_user[int(u)])
        if len(ix) < n_sites:
            raise ValueError(f"user {u} has {len(ix)} samples, too few to split into {n_sites}")
        for part in np.array_split(ix, n_sites):
            site_indices.append(np.sort(part))
            site_users.append([int(u)])
    note = (
        f"only {len(unique)} users for {num_sites} sites: each user's samples split into "
        f"{shares.min()}-{shares.max()} sites"
    )
    return Partition(site_indices, note, site_users)
