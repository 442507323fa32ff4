"""Arrival processes: rates, burstiness, time scaling and production shape are what they claim."""

import numpy as np
import pytest

from loadgen import arrivals


def test_poisson_rate_and_exponential_gaps():
    t = arrivals.poisson(200.0, 50.0, seed=1)
    assert np.all(np.diff(t) >= 0) and t[-1] < 50.0
    assert abs(len(t) / 50.0 - 200.0) < 200.0 * 0.05
    gaps = np.diff(t)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.1  # exponential: CV = 1


def test_same_seed_same_schedule_and_n_form():
    assert np.array_equal(arrivals.poisson(10, 5, seed=3), arrivals.poisson(10, 5, seed=3))
    assert not np.array_equal(arrivals.poisson(10, 5, seed=3), arrivals.poisson(10, 5, seed=4))
    assert len(arrivals.gamma(10, 0.5, n=123, seed=0)) == 123


def test_gamma_burstiness_changes_variability_not_rate():
    bursty = np.diff(arrivals.gamma(100, 0.25, 100.0, seed=2))
    regular = np.diff(arrivals.gamma(100, 4.0, 100.0, seed=2))
    assert bursty.std() / bursty.mean() > 1.5 > 0.7 > regular.std() / regular.mean()
    assert abs(1 / bursty.mean() - 100) < 10 and abs(1 / regular.mean() - 100) < 5


def test_constant_and_recorded_scaling():
    c = arrivals.constant(4.0, 2.0)
    assert np.allclose(c, [0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])
    r = arrivals.recorded([105.0, 100.0, 101.0], time_scale=0.5)
    assert np.allclose(r, [0.0, 0.5, 2.5])


def test_production_shaped_keeps_counts_per_interval_and_randomises_inside():
    counts = [5, 0, 40, 10]
    t = arrivals.production_shaped(counts=counts, interval_s=10.0, seed=0)
    assert np.array_equal(np.bincount((t // 10).astype(int), minlength=4), counts)
    fast = arrivals.production_shaped(counts=counts, interval_s=10.0, time_scale=0.1, seed=0)
    assert fast.max() < 4.0 and len(fast) == sum(counts)
    stamps = np.concatenate([np.full(3, 0.5), np.full(7, 25.0)])
    shaped = arrivals.production_shaped(timestamps=stamps, interval_s=10.0, seed=1)
    assert np.array_equal(np.bincount((shaped // 10).astype(int), minlength=3), [3, 0, 7])
    doubled = arrivals.production_shaped(counts=counts, interval_s=10.0, rate_scale=2.0)
    assert len(doubled) == 2 * sum(counts)


@pytest.mark.parametrize(
    "call",
    [
        lambda: arrivals.poisson(0, 1),
        lambda: arrivals.gamma(1, -1, 1),
        lambda: arrivals.poisson(1),
        lambda: arrivals.recorded([1, float("nan")]),
        lambda: arrivals.production_shaped(counts=[1, -2]),
        lambda: arrivals.schedule("zipf", 1, 1),
    ],
)
def test_bad_input_is_a_clear_error(call):
    with pytest.raises(ValueError):
        call()
