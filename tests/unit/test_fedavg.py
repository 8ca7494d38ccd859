"""FedAvg weights, and the streaming accumulator against the plain weighted mean."""

import numpy as np
import pytest

from powertrip.core.fedavg import StreamingFedAvg, apply_delta, weighted_average


def _delta(value, shape=(2, 3)):
    return {"w": np.full(shape, value, dtype=np.float32), "b": np.full(3, value, dtype=np.float32)}


def test_weighted_average_uses_sample_counts():
    out = weighted_average([_delta(1.0), _delta(4.0)], [100, 300])
    # (1*100 + 4*300) / 400 = 3.25
    assert out["w"].dtype == np.float32
    np.testing.assert_allclose(out["w"], 3.25)
    np.testing.assert_allclose(out["b"], 3.25)


def test_weighted_average_rejects_bad_weights():
    with pytest.raises(ValueError):
        weighted_average([], [])
    with pytest.raises(ValueError):
        weighted_average([_delta(1.0)], [0])
    with pytest.raises(ValueError):
        weighted_average([_delta(1.0)], [1, 2])


def test_streaming_matches_plain_average_in_any_arrival_order():
    rng = np.random.default_rng(0)
    deltas = {f"s{i}": {"w": rng.normal(size=(4, 5)).astype(np.float32)} for i in range(6)}
    weights = {f"s{i}": float(i + 1) for i in range(6)}
    order = sorted(deltas)
    expected = weighted_average([deltas[s] for s in order], [weights[s] for s in order])
    results = []
    for arrival in (order, order[::-1], ["s3", "s0", "s5", "s1", "s4", "s2"]):
        acc = StreamingFedAvg(order, deltas["s0"])
        for site in arrival:
            acc.add(site, deltas[site], weights[site])
        results.append(acc.result())
        np.testing.assert_allclose(results[-1]["w"], expected["w"], rtol=1e-6)
    # fixed accumulation order: bit-for-bit identical whatever the arrival order
    assert all(np.array_equal(results[0]["w"], r["w"]) for r in results[1:])


def test_streaming_skips_failed_sites_and_keeps_memory_small():
    template = _delta(0.0)
    acc = StreamingFedAvg(["a", "b", "c"], template)
    acc.add("c", _delta(3.0), 1)
    assert acc.parked == 1  # c waits for a and b
    acc.skip("a")
    acc.add("b", _delta(1.0), 1)
    assert acc.parked == 0
    np.testing.assert_allclose(acc.result()["w"], 2.0)
    assert acc.contributors == ["b", "c"]


def test_streaming_refuses_unknown_sites_and_early_results():
    acc = StreamingFedAvg(["a", "b"], _delta(0.0))
    with pytest.raises(KeyError):
        acc.add("z", _delta(1.0), 1)
    acc.add("a", _delta(1.0), 1)
    with pytest.raises(RuntimeError, match="waiting for b"):
        acc.result()


@pytest.mark.parametrize("fold", [1, 2, 3, 4, 7])
def test_folding_deltas_together_changes_no_bit(fold):
    """Adding `fold` consecutive deltas in one pass over the sum must give exactly the bits
    of adding them one at a time, with sites skipped anywhere and any arrival order."""
    rng = np.random.default_rng(11)
    template = {"w": np.zeros((300, 250), np.float32), "b": np.zeros(9, np.float32)}
    sites = [f"s{i}" for i in range(11)]
    deltas = {
        s: {k: rng.normal(size=v.shape).astype(np.float32) for k, v in template.items()}
        for s in sites
    }
    skipped = {"s2", "s7", "s10"}
    arrival = list(rng.permutation(sites))
    results = {}
    for f in (1, fold):
        acc = StreamingFedAvg(sites, template, threads=2, fold=f)
        for site in arrival:
            if site in skipped:
                acc.skip(site)
            else:
                acc.add(site, deltas[site], 7.0 + len(site))
        results[f] = (acc.result(), acc.contributors)
    (one, one_order), (many, many_order) = results[1], results[fold]
    assert one_order == many_order == [s for s in sites if s not in skipped]
    for key in template:
        assert np.array_equal(one[key], many[key])


def test_a_short_group_waits_for_the_rest_or_for_the_end():
    template = _delta(0.0)
    sites = ["a", "b", "c", "d", "e", "f"]
    acc = StreamingFedAvg(sites, template, fold=4)
    for site in ("a", "b", "c"):
        acc.add(site, _delta(1.0), 1)
    assert acc.parked == 3 and acc.contributors == []  # a group of 4 not complete yet
    acc.add("d", _delta(1.0), 1)
    assert acc.parked == 0 and acc.contributors == ["a", "b", "c", "d"]
    acc.add("f", _delta(4.0), 1)
    assert acc.parked == 1  # e is still expected
    acc.skip("e")  # nothing left to wait for: the short group is folded
    assert acc.parked == 0 and acc.contributors == ["a", "b", "c", "d", "f"]
    np.testing.assert_allclose(acc.result()["w"], 8.0 / 5)


def test_a_malformed_delta_is_refused_and_the_parked_ones_survive():
    acc = StreamingFedAvg(["a", "b", "c"], _delta(0.0), fold=4)
    acc.add("a", _delta(1.0), 1)
    with pytest.raises(ValueError, match="b's delta has no w of shape"):
        acc.add("b", _delta(1.0, shape=(3, 2)), 1)
    with pytest.raises(ValueError, match="has no b"):
        acc.add("b", {"w": np.zeros((2, 3), np.float32)}, 1)
    acc.add("b", _delta(3.0), 1)
    acc.add("c", _delta(5.0), 2)
    np.testing.assert_allclose(acc.result()["w"], (1 + 3 + 10) / 4)
    with pytest.raises(ValueError, match="fold"):
        StreamingFedAvg(["a"], _delta(0.0), fold=0)


def test_apply_delta_adds_in_the_weights_dtype():
    w = {"w": np.ones((2, 3), dtype=np.float32), "b": np.zeros(3, dtype=np.float32)}
    new = apply_delta(w, _delta(0.5))
    np.testing.assert_allclose(new["w"], 1.5)
    assert new["w"].dtype == np.float32


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_blockwise_accumulation_is_bit_identical_to_one_whole_tensor_add(threads, parts):
    """_accumulate adds a cache-sized block at a time (below torch's parallel grain, so it
    never starts an OpenMP region), shared out over `parts` Python threads: per element it
    must be exactly one float64 `acc + w * delta`, as a single whole-tensor torch op
    computes it, at sizes around the block boundary, whatever the torch thread count."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from powertrip.core.fedavg import _BLOCK, _accumulate

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    pool = ThreadPoolExecutor(parts)
    try:
        rng = np.random.default_rng(3)
        for n in (1, 9, _BLOCK - 1, _BLOCK, _BLOCK + 1, 3 * _BLOCK + 17, 400_003):
            delta = rng.normal(size=n).astype(np.float32)
            start = rng.normal(size=n)
            mine, whole = start.copy(), torch.from_numpy(start.copy())
            for w in (3.0, 0.1234567, 17.0):
                _accumulate(mine, [(delta, w)], pool, parts)
                whole.add_(torch.from_numpy(delta).double(), alpha=w)
            assert np.array_equal(mine, whole.numpy()), n
            # several deltas in one pass: still each one's whole-tensor add, in order
            others = [(rng.normal(size=n).astype(np.float32), w) for w in (5.0, 0.37, 2.0)]
            _accumulate(mine, others, pool, parts)
            for other, w in others:
                whole.add_(torch.from_numpy(other).double(), alpha=w)
            assert np.array_equal(mine, whole.numpy()), n
    finally:
        torch.set_num_threads(previous)
        pool.shutdown()


def test_a_failure_in_a_helper_thread_reaches_the_caller():
    """A share that fails in a helper thread must raise in the caller, not die silently
    and leave a wrong sum unannounced."""
    from concurrent.futures import Executor, Future

    from powertrip.core.fedavg import _BLOCK, _accumulate

    class FailingPool(Executor):
        def submit(self, fn, /, *args, **kwargs):
            failed: Future = Future()
            failed.set_exception(MemoryError("helper ran out"))
            return failed

    acc = np.zeros(4 * _BLOCK)
    with pytest.raises(MemoryError, match="helper ran out"):
        _accumulate(acc, [(np.ones(4 * _BLOCK, np.float32), 1.0)], FailingPool(), parts=2)


def test_a_delta_of_the_wrong_size_is_refused_before_anything_is_added():
    from powertrip.core.fedavg import _BLOCK, _accumulate

    acc = np.zeros(4 * _BLOCK)
    good, short = np.ones(4 * _BLOCK, np.float32), np.ones(3 * _BLOCK, np.float32)
    with pytest.raises(ValueError, match="cannot be added"):
        _accumulate(acc, [(good, 1.0), (short, 1.0)])
    assert not acc.any()  # the good delta was not half-added either


def test_the_streaming_sum_does_not_depend_on_its_threads():
    rng = np.random.default_rng(5)
    template = {"w": np.zeros((300, 500), np.float32), "b": np.zeros(7, np.float32)}
    deltas = [
        {k: rng.normal(size=v.shape).astype(np.float32) for k, v in template.items()}
        for _ in range(4)
    ]
    sites = [f"s{i}" for i in range(4)]
    results = []
    for threads in (1, 2, 4):
        acc = StreamingFedAvg(sites, template, threads=threads)
        for site, delta in zip(sites, deltas, strict=True):
            acc.add(site, delta, 10.0 + len(site))
        results.append(acc.result())
    for other in results[1:]:
        for key in template:
            assert np.array_equal(results[0][key], other[key])
