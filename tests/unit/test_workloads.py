"""FEMNIST and synthetic workloads: data, model shape, partitions, training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from powertrip.core.training import batch_indices, site_seed, train_local
from powertrip.core.workloads import DataError, UnknownWorkload, get_workload
from powertrip.core.workloads.base import partition_by_user


@pytest.fixture(scope="module")
def femnist():
    workload = get_workload("femnist")
    return workload, workload.load()


def test_femnist_model_and_data(femnist):
    workload, data = femnist
    model = workload.build_model()
    assert sum(p.numel() for p in model.parameters()) == 6_603_710  # LEAF CNN
    out = model(workload.inputs(data.train.x[:4]))
    assert out.shape == (4, 62)
    # white background inverted: most pixels are background = 0, ink close to 1
    ink = workload.inputs(data.train.x[:100]).numpy()
    assert np.median(ink) == 0.0 and ink.max() == pytest.approx(1.0)
    assert len(data.train) + len(data.test) == 54_414


def test_femnist_inputs_are_the_per_pixel_conversion_byte_for_byte(femnist):
    """The images stay uint8 and `inputs` converts a batch with a 256-entry table: the bytes
    must equal converting every pixel, (255 - v) / 255 in float32, as runs always did (the
    golden runs pin them); a batch of sites (vmap's stack) keeps its leading axes."""
    workload, data = femnist
    images = data.train.x[:500]
    assert images.dtype == np.uint8 and images.shape == (500, 28, 28)
    per_pixel = ((255 - images.astype(np.float32)) / 255.0)[:, None, :, :]
    assert workload.inputs(images).numpy().tobytes() == per_pixel.tobytes()
    stacked = workload.inputs(images.reshape(5, 100, 28, 28))
    assert stacked.shape == (5, 100, 1, 28, 28)
    assert stacked.numpy().tobytes() == per_pixel.tobytes()
    assert data.num_classes == 62


def test_femnist_partition_by_writer(femnist):
    workload, data = femnist
    part = workload.partition(data, 100, seed=0)
    all_ix = np.concatenate(part.site_indices)
    assert len(all_ix) == len(np.unique(all_ix)) == len(data.train)  # no sample in two sites
    assert all(len(ix) > 0 for ix in part.site_indices)
    writers_per_site = [set(data.train.users[ix]) for ix in part.site_indices]
    for a in range(100):  # no writer spans two sites
        for b in range(a + 1, 100):
            assert not writers_per_site[a] & writers_per_site[b]
    again = workload.partition(data, 100, seed=0)
    assert all(
        np.array_equal(x, y) for x, y in zip(part.site_indices, again.site_indices, strict=True)
    )
    other = workload.partition(data, 100, seed=1)
    assert not all(
        np.array_equal(x, y) for x, y in zip(part.site_indices, other.site_indices, strict=True)
    )


def test_more_sites_than_users_splits_users():
    users = np.repeat(np.arange(3), [50, 30, 20])
    part = partition_by_user(users, 10, seed=0)
    assert len(part.site_indices) == 10
    assert all(len(ix) > 0 for ix in part.site_indices)
    assert "split" in part.note
    all_ix = np.concatenate(part.site_indices)
    assert len(all_ix) == len(np.unique(all_ix)) == 100
    with pytest.raises(ValueError, match="larger than"):
        partition_by_user(users, 101, seed=0)


def test_truncated_or_missing_femnist_file_is_a_data_error(tmp_path):
    workload = get_workload("femnist")
    with pytest.raises(DataError, match=str(tmp_path)):
        workload.load(tmp_path)
    (tmp_path / "femnist_leaf_subset.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(DataError, match="unreadable or truncated"):
        workload.load(tmp_path)


def test_unknown_workload_lists_valid_ones():
    with pytest.raises(UnknownWorkload, match="valid workloads: .*femnist.*synthetic"):
        get_workload("mnist")


def test_local_training_is_deterministic_and_learns():
    workload = get_workload("synthetic")
    data = workload.load()
    torch.manual_seed(0)
    model = workload.build_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = data.train.x[:300], data.train.y[:300]
    r1 = train_local(workload, model, x, y, steps=30, lr=0.05, batch_size=20, seed=11)
    r2 = train_local(workload, model, x, y, steps=30, lr=0.05, batch_size=20, seed=11)
    r3 = train_local(workload, model, x, y, steps=30, lr=0.05, batch_size=20, seed=12)
    for key in before:  # the model is left as it was
        assert torch.equal(model.state_dict()[key], before[key])
        assert torch.equal(r1.delta[key], r2.delta[key])
    assert any(not torch.equal(r1.delta[k], r3.delta[k]) for k in before)
    assert r1.num_samples == 300 and r1.steps == 30


def test_seeds_and_batches():
    assert site_seed(1, 2, 3) == site_seed(1, 2, 3) != site_seed(1, 2, 4)
    ix = batch_indices(7, steps=4, batch_size=5, seed=0)
    assert ix.shape == (4, 5) and ix.max() < 7
    # a batch larger than the site's data (power-split can ask for one) takes whole seeded
    # epochs in turn: every sample is used, none more than once more than any other
    big = batch_indices(7, steps=3, batch_size=20, seed=0)
    assert big.shape == (3, 20) and set(big.ravel()) == set(range(7))
    counts = np.bincount(big.ravel(), minlength=7)
    assert counts.max() - counts.min() <= 1
