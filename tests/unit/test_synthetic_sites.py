"""The synthetic workload at any site count (issue 19): up to its 200 users the users are
grouped into sites as before; beyond, each site generates its own samples from (run seed,
site index), only when asked for."""

from __future__ import annotations

import numpy as np
import pytest

from powertrip.core.workloads import get_workload
from powertrip.core.workloads.base import PartitionedSites
from powertrip.core.workloads.synthetic import (
    MAX_GROUPED_SITES,
    NUM_CLASSES,
    NUM_FEATURES,
    SITE_SAMPLES,
    GeneratedSites,
    class_centers,
    site_samples,
)


@pytest.fixture(scope="module")
def workload():
    return get_workload("synthetic")


@pytest.mark.parametrize("num_sites", [1, 12, MAX_GROUPED_SITES])
def test_up_to_200_sites_the_users_are_grouped_as_before(workload, num_sites):
    data = workload.load(None, 3)
    part = workload.partition(data, num_sites, 3)
    sites = workload.site_data(None, num_sites, 3)
    assert isinstance(sites, PartitionedSites)
    assert sites.note == part.note and sites.num_sites == num_sites
    for index in {0, num_sites // 2, num_sites - 1}:
        x, y = sites.site(index)
        ix = part.site_indices[index]
        assert np.array_equal(x, data.train.x[ix]) and np.array_equal(y, data.train.y[ix])
    assert np.array_equal(sites.pooled.x, data.train.x)


@pytest.mark.parametrize("num_sites", [MAX_GROUPED_SITES + 1, 9_601, 100_000, 10**9])
def test_any_site_count_beyond_the_users_works_and_holds_nothing_up_front(workload, num_sites):
    sites = workload.site_data(None, num_sites, 0)
    assert isinstance(sites, GeneratedSites)
    assert not hasattr(sites, "site_indices")  # no per-site state for a billion sites
    for index in (0, num_sites - 1):
        x, y = sites.site(index)
        assert x.shape == (SITE_SAMPLES, NUM_FEATURES) and x.dtype == np.float32
        assert y.shape == (SITE_SAMPLES,) and y.dtype == np.int64
        assert 0 <= y.min() and y.max() < NUM_CLASSES and np.isfinite(x).all()
    for outside in (-1, num_sites):
        with pytest.raises(IndexError):
            sites.site(outside)


def test_a_sites_data_depends_on_the_seed_and_its_index_only(workload):
    a = workload.site_data(None, 20_000, 7)
    b = workload.site_data(None, 50_000, 7)  # another run size: the same site, same data
    for index in (0, 123, 19_999):
        xa, ya = a.site(index)
        xb, yb = b.site(index)
        assert np.array_equal(xa, xb) and np.array_equal(ya, yb)
        again = a.site(index)  # asked again (a later round): the same samples
        assert np.array_equal(again[0], xa) and np.array_equal(again[1], ya)
    x0, y0 = a.site(1)
    x1, y1 = a.site(2)
    assert not np.array_equal(x0, x1)  # different sites differ
    other_seed = workload.site_data(None, 20_000, 8).site(1)
    assert not np.array_equal(other_seed[0], x0)  # a run seed gives other sites


def test_generated_sites_are_non_iid_draws_of_the_same_classes(workload):
    """Each site mostly sees 3 classes, like the fixed data set's users, around the same
    class centres (so the fixed held-out split still measures the model)."""
    centers = class_centers()
    data = workload.load()
    for cls in range(NUM_CLASSES):  # the pooled data's class means sit at those centres
        mean = data.train.x[data.train.y == cls].mean(axis=0)
        assert np.abs(mean - centers[cls]).max() < 0.5
    top3 = []
    for index in range(200):
        x, y = site_samples(0, index, centers)
        counts = np.bincount(y, minlength=NUM_CLASSES)
        top3.append(np.sort(counts)[-3:].sum() / len(y))
    assert np.median(top3) > 0.7  # label skew: 3 favourite classes at 30 % each


def test_a_site_trains_on_its_generated_data(workload):
    """What the site worker does with a task, end to end on one generated site."""
    import torch

    from powertrip.core.training import train_local

    sites = workload.site_data(None, 1_000, 0)
    x, y = sites.site(999)
    torch.manual_seed(0)
    model = workload.build_model()
    result = train_local(workload, model, x, y, steps=5, lr=0.05, batch_size=20, seed=1)
    assert result.num_samples == SITE_SAMPLES and result.steps == 5
    assert all(torch.isfinite(d).all() for d in result.delta.values())
