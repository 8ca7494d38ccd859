"""`powertrip data info|prepare`: what each site gets, and one-off data preparation."""

from __future__ import annotations

import argparse
import sys
import zipfile

import numpy as np

from powertrip.core.config import ConfigError
from powertrip.core.workloads import DataError, UnknownWorkload, Workload, get_workload


def training_samples(workload: Workload, data_dir: str | None = None) -> int | None:
    """How many training samples the workload's data holds, read from its metadata where
    it can be (FEMNIST's split array, Shakespeare's cache, Speech Commands' clip list)
    rather than by loading it; None when it cannot tell without preparing the data. The
    `num_sites` check before a run starts uses it: a partition needs a sample per site."""
    counter = getattr(workload, "num_train_samples", None)
    if callable(counter):  # a workload that knows its own size
        return counter(data_dir)
    try:
        if workload.name == "synthetic":  # generated in memory in milliseconds
            return len(workload.load(data_dir).train)
        if workload.name == "femnist":
            from powertrip.core.workloads.femnist import FILE_NAME

            with np.load(workload.data_dir(data_dir) / FILE_NAME, allow_pickle=False) as npz:
                return int((npz["leaf_split"] == 0).sum())  # only this array is read
        if workload.name == "shakespeare":
            from powertrip.core.workloads.shakespeare import CACHE_NPZ

            path = workload.data_dir(data_dir) / CACHE_NPZ
            if not path.is_file():
                return None  # prepared by the first run
            with np.load(path, allow_pickle=False) as npz:
                return len(npz["y_train"])
        if workload.name == "speech":
            from powertrip.core.workloads.speech import TRAIN_SPLITS, read_index

            index = read_index(workload.data_dir(data_dir))
            return sum(clip.split in TRAIN_SPLITS for clip in index.clips)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError):
        return None  # unreadable: the run's own loading says what is wrong
    return None


def info(args: argparse.Namespace) -> int:
    workload = get_workload(args.workload)
    if args.sites < 1:
        print("powertrip data info: --sites must be >= 1", file=sys.stderr)
        return 2
    dataset = workload.load(args.data_dir, args.seed)
    try:
        partition = workload.partition(dataset, args.sites, args.seed)
    except ValueError as exc:
        print(f"powertrip data info: {exc}", file=sys.stderr)
        return 2
    sizes = partition.sizes()
    classes = np.array([len(np.unique(dataset.train.y[ix])) for ix in partition.site_indices])
    print(f"workload      {workload.name}: {workload.summary}")
    print(f"source        {dataset.source}")
    print(
        f"samples       {len(dataset.train)} train, {len(dataset.test)} held-out, "
        f"{len(dataset.user_names)} natural users, {dataset.num_classes} classes"
    )
    print(f"partition     {partition.note}")
    print(
        f"per site      samples min {sizes.min()} / median {int(np.median(sizes))} / "
        f"max {sizes.max()}"
    )
    print(
        f"class cover   classes per site min {classes.min()} / median {int(np.median(classes))} / "
        f"max {classes.max()} of {dataset.num_classes}"
    )
    covered = len(np.unique(dataset.train.y))
    print(f"all sites     {covered} of {dataset.num_classes} classes present in training data")
    return 0


def prepare(args: argparse.Namespace) -> int:
    workload = get_workload(args.workload)
    prepare_fn = getattr(workload, "prepare", None)
    if prepare_fn is None:
        print(f"{workload.name}: nothing to prepare (its data ships with the repository)")
        return 0
    path = prepare_fn(args.cache_dir) if args.cache_dir else prepare_fn()
    print(f"{workload.name}: prepared {path}")
    return 0


def pretrain(args: argparse.Namespace) -> int:
    """`powertrip data pretrain shakespeare-lm`: the pretrained base, with a progress bar."""
    from pathlib import Path

    from tqdm import tqdm

    from powertrip.core.pretrain import pretrain_base
    from powertrip.core.workloads.shakespeare_lm import default_base_path

    out = Path(args.out) if args.out else default_base_path()
    with tqdm(total=args.steps, desc="pretrain", unit="step") as bar:

        def progress(step: int, loss: float) -> None:
            bar.update(1)
            if step % 50 == 0:
                bar.set_postfix(loss=f"{loss:.3f}")

        record = pretrain_base(
            out, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
            progress=progress,
        )  # fmt: skip
    held = record["held_out"]
    print(
        f"{out}: {record['parameters']} parameters, {record['bytes']} bytes; reserved plays' "
        f"held-out windows: accuracy {held['accuracy']:.3f}, perplexity {held['perplexity']:.2f}"
    )
    return 0


def main(args: argparse.Namespace) -> int:
    commands = {"info": info, "prepare": prepare, "pretrain": pretrain}
    try:
        return commands[args.data_command](args)
    except (UnknownWorkload, DataError, ConfigError) as exc:
        print(f"powertrip data: {exc}", file=sys.stderr)
        return 2
