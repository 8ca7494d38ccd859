"""The time-model equations against numbers computed by hand."""

import math

import numpy as np
import pytest

from powertrip.core import timemodel as tm


def test_propagation_delay_of_1000_miles_in_fibre():
    # 1000 mi = 1,609,344 m; fibre at 2/3 c = 199,861,638.67 m/s -> 8.0523 ms
    assert tm.propagation_delay_s(1000) == pytest.approx(
        1_609_344 / (299_792_458 * 2 / 3), rel=1e-12
    )
    assert tm.propagation_delay_s(1000) == pytest.approx(0.0080523, rel=1e-4)


def test_comm_time_is_eq3():
    # D = 5000 mi (40.26 ms), M = 1.5 GB, B = 25 MB/s -> 60 s + 0.04026 s
    t = tm.comm_time_s(5000, 25e6, 1.5e9)
    assert t == pytest.approx(60.0 + 5000 * 1609.344 / tm.FIBER_SPEED_M_PER_S)
    assert t == pytest.approx(60.04026, abs=1e-4)


def test_comm_time_rejects_bad_input():
    with pytest.raises(ValueError, match="bandwidth"):
        tm.comm_time_s(100, 0, 1e9)
    with pytest.raises(ValueError, match="update_size"):
        tm.comm_time_s(100, 1e6, -1)
    with pytest.raises(ValueError, match="distance"):
        tm.propagation_delay_s(-1)


def test_effective_gpus_is_eq6():
    # 8 GPUs installed, 2,450 W spare at 700 W per GPU -> floor(3.5) = 3
    assert tm.effective_gpus(8, 2450, 700) == 3
    # power for more GPUs than installed -> capped at N_avail
    assert tm.effective_gpus(8, 100_000, 700) == 8
    assert tm.effective_gpus(8, -5, 700) == 0
    assert tm.power_fraction(3, 8) == 0.375


def test_compute_time_scales_with_inverse_power():
    assert tm.compute_time_s(60, 0.5) == 120
    assert tm.compute_time_s(60, 1.0) == 60
    with pytest.raises(ValueError):
        tm.compute_time_s(60, 0)


def test_round_time_is_the_straggler_plus_aggregation():
    sites = [tm.SiteTime("a", 60, 10), tm.SiteTime("b", 100, 50), tm.SiteTime("c", 30, 5)]
    r = tm.round_time(sites, aggregation_s=2)
    assert r.round_time_s == 152
    assert r.straggler == "b"
    assert (r.compute_s, r.comm_s) == (100, 50)
    # waits: b 0, a 150-70 = 80, c 150-35 = 115 -> mean 65
    assert r.wait_s == pytest.approx(65)


def test_paper_and_clock_estimators():
    tau = 60.0
    p = np.array([1.0, 0.5, 0.25])
    c = np.array([10.0, 20.0, 5.0])
    # paper: tau / mean(p) + max(c); mean p over top-3 = 0.58333 -> 102.857 + 20
    assert tm.estimate_round_time_paper(tau, p, c) == pytest.approx(60 / (1.75 / 3) + 20)
    # clock: max(60+10, 120+20, 240+5) = 245
    assert tm.estimate_round_time_clock(tau, p, c) == 245
    paper = tm.prefix_round_time_estimates(tau, p, c, "paper")
    assert paper == pytest.approx([70, 60 / 0.75 + 20, 60 / (1.75 / 3) + 20])
    clock = tm.prefix_round_time_estimates(tau, p, c, "clock")
    assert clock == pytest.approx([70, 140, 245])
    with pytest.raises(ValueError, match="estimator"):
        tm.prefix_round_time_estimates(tau, p, c, "magic")


def test_power_split_prefix_estimate():
    # compute tau_B / sum(p_top-k), tau_B = DP_REFERENCE_SITES x tau = 600 s, + running max comm
    tau = 60.0
    p = np.array([1.0, 0.5, 0.25])
    c = np.array([10.0, 20.0, 5.0])
    want = [600 / 1.0 + 10, 600 / 1.5 + 20, 600 / 1.75 + 20]
    for estimator in ("paper", "clock"):
        got = tm.prefix_round_time_estimates(tau, p, c, estimator, work_model="power-split")
        assert got == pytest.approx(want)
    # compute falls as the selected sites' power grows (Eq. 7)
    compute = tm.prefix_round_time_estimates(tau, p, np.zeros(3), work_model="power-split")
    assert np.all(np.diff(compute) < 0)
    # the local-steps estimate is untouched by the third model
    assert tm.prefix_round_time_estimates(tau, p, c) == pytest.approx(
        [70, 60 / 0.75 + 20, 60 / (1.75 / 3) + 20]
    )
    with pytest.raises(ValueError, match="local-steps, data-parallel, power-split"):
        tm.prefix_round_time_estimates(tau, p, c, work_model="magic")


def test_data_parallel_compute():
    # 100 steps of 0.5 s over total power 2.5 -> 20 s
    assert tm.data_parallel_compute_time_s(100, 0.5, [1.0, 1.0, 0.5]) == 20
    assert math.isclose(tm.data_parallel_compute_time_s(10, 1.0, [0.5]), 20)


def test_comm_parts_split_eq3_into_propagation_and_transfer():
    # 5000 mi of fibre (40.26 ms) and 1.5 GB over 25 MB/s (60 s)
    latency = tm.propagation_delay_s(5000)
    propagation, transfer = tm.comm_parts_s(latency, 25e6, 1.5e9)
    assert propagation == latency and transfer == pytest.approx(60.0)
    # the parts add up to the existing one-way Eq. 3 functions, exactly
    assert propagation + transfer == tm.comm_time_from_latency_s(latency, 25e6, 1.5e9)
    assert propagation + transfer == pytest.approx(tm.comm_time_s(5000, 25e6, 1.5e9), rel=1e-15)
    assert tm.comm_parts_s(0.01, 1e6, 0) == (0.01, 0.0)


def test_comm_parts_reject_bad_input():
    with pytest.raises(ValueError, match="latency_s"):
        tm.comm_parts_s(-0.1, 1e6, 1e9)
    with pytest.raises(ValueError, match="bandwidth"):
        tm.comm_parts_s(0.01, 0, 1e9)
    with pytest.raises(ValueError, match="update_size"):
        tm.comm_parts_s(0.01, 1e6, -1)
    with pytest.raises(ValueError, match="latency_s"):
        tm.comm_parts_array_s(np.array([0.01, -0.1]), np.array([1e6, 1e6]), 1e9)
    with pytest.raises(ValueError, match="bandwidth"):
        tm.comm_parts_array_s(np.array([0.01, 0.02]), np.array([1e6, 0.0]), 1e9)
    with pytest.raises(ValueError, match="update_size"):
        tm.comm_parts_array_s(np.array([0.01]), np.array([1e6]), -1)


def test_comm_parts_array_is_the_scalar_function_per_site():
    rng = np.random.default_rng(1)
    latency = rng.uniform(0, 0.08, 50)
    bandwidth = rng.uniform(1e7, 1.25e9, 50)
    propagation, transfer = tm.comm_parts_array_s(latency, bandwidth, 1.5e9)
    assert propagation.dtype == transfer.dtype == np.float64
    for i in range(50):
        assert (propagation[i], transfer[i]) == tm.comm_parts_s(latency[i], bandwidth[i], 1.5e9)
    # the caller's array is not aliased, and a scalar bandwidth broadcasts
    propagation[0] = -1.0
    assert latency[0] >= 0
    prop, trans = tm.comm_parts_array_s(latency, 1e8, 1e9)
    assert prop.shape == trans.shape == (50,) and np.all(trans == 10.0)


@pytest.mark.parametrize("work_model", ["local-steps", "data-parallel", "power-split"])
def test_site_times_end_where_the_clocks_estimate_ends(work_model):
    """The per-site times the Flower strategy charges (their maximum) are the clock
    estimator's T(k) for the whole set, under each work model."""
    from powertrip.core.timemodel import prefix_round_time_estimates, site_times_s

    powers = np.array([1.0, 0.4, 0.7, 0.25])
    comm = np.array([3.0, 12.0, 0.5, 40.0])
    times = site_times_s(60.0, powers, comm, work_model)
    assert times.shape == (4,)
    clock = prefix_round_time_estimates(60.0, powers, comm, "clock", work_model)[-1]
    assert times.max() == pytest.approx(clock, rel=1e-12)
    with pytest.raises(ValueError, match="work_model must be one of"):
        site_times_s(60.0, powers, comm, "free-lunch")
