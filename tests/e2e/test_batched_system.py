"""The multi-process, batched system computes the plain loop's model update.

A real run (four services as processes; two site workers with `--trainer vmap --site-batch 3`,
or one worker training three sites at once with `--train-threads 3`)
writes its global model after round 1; the test recomputes that round in-process with the
plain per-site loop (`train_local`, one site after another) and plain FedAvg, from the same
initial weights, seeds and data, and compares (FedAvg on fp32 deltas, set explicitly:
the product's defaults are the Nesterov step and int8).
"""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest
import torch

from powertrip.core.fedavg import apply_delta, weighted_average
from powertrip.core.profiles import site_index
from powertrip.core.training import site_seed, train_local
from powertrip.core.workloads import get_workload
from services.aggregator.checkpoint_store import load_checkpoint

pytestmark = pytest.mark.slow


def _initial_weights(workload, seed: int) -> dict[str, np.ndarray]:
    # as the aggregator builds them (services.aggregator.evaluator.initial_weights)
    torch.manual_seed(seed)
    return {k: v.detach().numpy().copy() for k, v in workload.build_model().state_dict().items()}


def _run(out, seed: int, sites: int, workload_name: str, *layout: str) -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "powertrip.app.cli", "run",
            "--workload", workload_name, "--sites", str(sites), "--policy", "all",
            "--max-rounds", "1", "--seed", str(seed), "--target-accuracy", "0.99",
            *layout, "--out", str(out), "--quiet",
            # the plain loop below is FedAvg on fp32 deltas, not the product's defaults
            "--set", "outer_optimizer=fedavg", "--set", "delta_encoding=fp32",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


LAYOUTS = {
    "two workers, vmap": ("--workers", "2", "--trainer", "vmap", "--site-batch", "3"),
    "one worker, three training threads": ("--workers", "1", "--train-threads", "3"),
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_the_system_matches_the_plain_loop(tmp_path, layout):
    seed, sites, workload_name = 4, 12, "synthetic"
    out = tmp_path / "run"
    _run(out, seed, sites, workload_name, *LAYOUTS[layout])
    row = next(csv.DictReader((out / "rounds.csv").open()))
    chosen = row["sites"].split(";")
    assert len(chosen) == sites
    checkpoint = load_checkpoint(out)
    assert checkpoint is not None and checkpoint[1]["round"] == 1
    system = checkpoint[0]

    workload = get_workload(workload_name)
    defaults = workload.defaults
    data = workload.load(None, seed)
    part = workload.partition(data, sites, seed)
    start = _initial_weights(workload, seed)
    model = workload.build_model()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in start.items()})
    deltas, counts = [], []
    for site in chosen:
        ix = part.site_indices[site_index(site)]
        result = train_local(
            workload,
            model,
            data.train.x[ix],
            data.train.y[ix],
            steps=defaults.local_steps,
            lr=defaults.lr,
            batch_size=defaults.batch_size,
            seed=site_seed(seed, 1, site_index(site)),
        )
        deltas.append({k: v.numpy() for k, v in result.delta.items()})
        counts.append(result.num_samples)
    plain = apply_delta(start, weighted_average(deltas, counts))

    assert list(system) == list(plain)
    moved = 0.0
    for key in plain:
        np.testing.assert_allclose(system[key], plain[key], rtol=1e-5, atol=1e-6, err_msg=key)
        moved = max(moved, float(np.abs(plain[key] - start[key]).max()))
    assert moved > 1e-3  # the round changed the model, so agreement is not trivial


def test_training_threads_change_nothing_but_speed(tmp_path):
    """Per-site seeds and FedAvg's fixed order: the same bits with 1 or 3 training threads."""
    models = []
    for threads in ("1", "3"):
        out = tmp_path / f"threads-{threads}"
        _run(out, 5, 9, "synthetic", "--workers", "1", "--train-threads", threads)
        checkpoint = load_checkpoint(out)
        assert checkpoint is not None
        models.append(checkpoint[0])
    assert list(models[0]) == list(models[1])
    for key in models[0]:
        assert np.array_equal(models[0][key], models[1][key]), key
