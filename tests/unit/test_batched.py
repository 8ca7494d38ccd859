"""Batched (vmap) and channels-last training give the plain loop's model update.

The plain per-site loop (`train_local`, NCHW, one site after another) is the reference; every
faster path must reproduce its deltas for the same seeds and data up to float tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from powertrip.core.batched import SiteJob, train_sites, train_sites_vmap, vmap_supported
from powertrip.core.training import train_local
from powertrip.core.workloads import get_workload


def _reference(workload, model, jobs, steps, lr, batch_size):
    return [
        train_local(
            workload, model, j.x, j.y, steps=steps, lr=lr, batch_size=batch_size, seed=j.seed
        )
        for j in jobs
    ]


def _assert_same_updates(got, want, rtol=1e-4, atol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.num_samples == w.num_samples and g.steps == w.steps
        assert g.mean_loss == pytest.approx(w.mean_loss, rel=1e-4)
        assert list(g.delta) == list(w.delta)
        for key in w.delta:
            a, b = g.delta[key].numpy(), w.delta[key].numpy()
            assert a.shape == b.shape and a.dtype == b.dtype
            # the updates are not trivially zero, so equality says something
            assert np.abs(b).max() > 0 or "bias" in key
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=key)


@pytest.fixture(scope="module")
def femnist(site_jobs):
    workload = get_workload("femnist")
    torch.manual_seed(0)
    model = workload.build_model()
    jobs = site_jobs(workload, 3, 100)
    want = _reference(workload, model, jobs, steps=3, lr=0.1, batch_size=20)
    return workload, model, jobs, want


def test_femnist_vmap_matches_plain_loop(femnist):
    workload, model, jobs, want = femnist
    before = {k: v.clone() for k, v in model.state_dict().items()}
    got = train_sites(
        workload, model, jobs, steps=3, lr=0.1, batch_size=20, trainer="vmap", site_batch=3
    )
    _assert_same_updates(got, want)
    # the model is left as it was: the next group starts from the same global weights
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_femnist_channels_last_matches_plain_loop(femnist):
    workload, model, jobs, want = femnist
    got = train_sites(
        workload,
        model,
        jobs,
        steps=3,
        lr=0.1,
        batch_size=20,
        trainer="loop",
        channels_last=True,
    )
    _assert_same_updates(got, want)
    assert all(v.is_contiguous() for r in got for v in r.delta.values())
    assert all(p.is_contiguous() for p in model.parameters())


def test_femnist_sites_differ_so_a_swap_would_be_caught(femnist):
    _, _, _, want = femnist
    a, b = want[0].delta["7.weight"].numpy(), want[1].delta["7.weight"].numpy()
    assert not np.allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("site_batch", [1, 2, 5])
def test_synthetic_vmap_matches_plain_loop_for_any_group_size(site_batch, site_jobs):
    workload = get_workload("synthetic")
    torch.manual_seed(3)
    model = workload.build_model()
    jobs = site_jobs(workload, 5, 20, seed=3)
    want = _reference(workload, model, jobs, steps=4, lr=0.05, batch_size=20)
    got = train_sites(
        workload,
        model,
        jobs,
        steps=4,
        lr=0.05,
        batch_size=20,
        trainer="vmap",
        site_batch=site_batch,
    )
    _assert_same_updates(got, want, rtol=1e-5, atol=1e-7)


def test_lstm_falls_back_to_the_loop():
    """nn.LSTM's fused kernel has no vmap rule: the trainer uses the loop and says so."""
    from powertrip.core.workloads.shakespeare import build_lstm

    model = build_lstm()
    assert not vmap_supported(model)
    workload = get_workload("shakespeare")
    rng = np.random.default_rng(0)
    jobs = [SiteJob(rng.integers(0, 80, (30, 80)), rng.integers(0, 80, 30), s) for s in range(2)]
    want = _reference(workload, model, jobs, steps=2, lr=0.8, batch_size=4)
    got = train_sites(
        workload, model, jobs, steps=2, lr=0.8, batch_size=4, trainer="vmap", site_batch=2
    )
    _assert_same_updates(got, want, rtol=1e-5, atol=1e-7)


def test_kwt_vmap_matches_plain_loop():
    from powertrip.core.workloads.speech import build_kwt

    workload = get_workload("speech")
    torch.manual_seed(0)
    model = build_kwt(num_classes=30)
    assert vmap_supported(model)
    rng = np.random.default_rng(0)
    jobs = [
        SiteJob(rng.normal(size=(12, 40, 98)).astype(np.float32), rng.integers(0, 30, 12), s)
        for s in range(2)
    ]
    want = _reference(workload, model, jobs, steps=2, lr=0.01, batch_size=4)
    got = train_sites_vmap(workload, model, jobs, steps=2, lr=0.01, batch_size=4)
    _assert_same_updates(got, want, rtol=1e-4, atol=1e-6)


def test_bad_trainer_settings_are_named():
    workload = get_workload("synthetic")
    model = workload.build_model()
    with pytest.raises(ValueError, match="trainer must be one of"):
        train_sites(workload, model, [], steps=1, lr=0.1, batch_size=2, trainer="fast")
    with pytest.raises(ValueError, match="site_batch must be >= 1"):
        train_sites(workload, model, [], steps=1, lr=0.1, batch_size=2, site_batch=0)


def test_device_auto_is_cuda_only_when_present_and_cuda_without_one_says_why():
    from powertrip.core.training import resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        resolve_device("gpu")
    if not torch.cuda.is_available():  # the GPU path itself cannot run on this machine
        with pytest.raises(ValueError, match="device cuda: torch .* (has no CUDA|sees no GPU)"):
            resolve_device("cuda")


@pytest.mark.parametrize("trainer", ["loop", "vmap"])
def test_training_follows_the_model_device_and_returns_cpu_deltas(trainer, site_jobs):
    """Both trainers move batches to where the model's parameters are and hand back CPU
    deltas (what the upload encodes). Run on the CPU here, and on CUDA where a GPU is."""
    workload = get_workload("synthetic")
    jobs = site_jobs(workload, 2, 4)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = workload.build_model().to(device)
    results = train_sites(
        workload, model, jobs, steps=2, lr=0.1, batch_size=8, trainer=trainer, site_batch=2
    )
    for result in results:
        assert all(v.device.type == "cpu" for v in result.delta.values())
        assert any(float(v.abs().max()) > 0 for v in result.delta.values())
    # delta_device=None leaves them where the model is (the plateau runner averages there)
    kept = train_sites(
        workload,
        model,
        jobs,
        steps=2,
        lr=0.1,
        batch_size=8,
        trainer=trainer,
        site_batch=2,
        delta_device=None,
    )
    for result, cpu in zip(kept, results, strict=True):
        assert all(v.device.type == device for v in result.delta.values())
        assert all(torch.equal(v.cpu(), cpu.delta[n]) for n, v in result.delta.items())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here)")
def test_femnist_vmap_on_cuda_matches_the_cpu_loop(femnist):
    """The GPU path of `make bench`'s gpu section: many sites per vmap call on CUDA give the
    plain CPU loop's updates (looser tolerance: cuDNN picks other summation orders)."""
    workload, model, jobs, want = femnist
    gpu_model = workload.build_model().cuda()
    gpu_model.load_state_dict(model.state_dict())
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # TF32 convolutions round to 10-bit mantissas
    try:
        got = train_sites(
            workload, gpu_model, jobs, steps=3, lr=0.1, batch_size=20, trainer="vmap", site_batch=3
        )
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    _assert_same_updates(got, want, rtol=1e-3, atol=1e-5)
