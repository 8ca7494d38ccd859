"""Shared by the tests of the Shakespeare (LEAF LSTM) and speech (KWT-1) workloads
(test_workloads_models.py, test_workloads_shakespeare.py, test_workloads_speech.py): one
torch thread for every test of a module that imports `_one_torch_thread` (autouse), and the
checks of a partition of the training samples into sites."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Small models: one thread is faster, and immune to a busy machine's oversubscription."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _assert_good_partition(part, num_samples: int, users: np.ndarray | None = None):
    all_ix = np.concatenate(part.site_indices)
    assert len(all_ix) == len(np.unique(all_ix)) == num_samples  # no sample in two sites
    assert all(len(ix) > 0 for ix in part.site_indices)  # no site empty
    if users is not None:  # whole users: no user spans two sites
        seen: set[int] = set()
        for ix in part.site_indices:
            site_users = set(users[ix].tolist())
            assert not site_users & seen
            seen |= site_users


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a.site_indices, b.site_indices, strict=True))
