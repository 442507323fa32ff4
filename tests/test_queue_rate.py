"""The service rate from queue growth (loadgen.queue_rate), on the simulated engine of known service rate.

Its truth is what the engine serves at length: the throughput of a long, heavily overloaded step. The
verdict on it (loadgen.verdict.judge_service_rates) keeps the sequential rule's properties over seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specs.config import SLASpec
from loadgen import simengine
from loadgen.queue_rate import service_rate, ttft_growth
from loadgen.results import RequestRecord
from loadgen.noise_prior import PRIOR_DF, PRIOR_SD
from loadgen.sequential import sequential_verdict
from loadgen.verdict import judge_service_rates

SLA = SLASpec(ttft_ms=300, itl_ms=50, max_error_rate=0.01)
RNG = np.random.default_rng(11)
PROMPTS = RNG.lognormal(math.log(300), 0.6, 2000).astype(int) + 8
OUTPUTS = RNG.integers(16, 65, 2000)
BASE = simengine.ServiceModel(run_jitter_cv=0.01)
OVERLOAD = (1.2, 1.4, 1.6, 1.8)  # later rounds, as factors of the service rate found: every step queues


def _sweep(model, rates, round_index, seed, side):
    start = model.started(seed * 1000 + round_index * 2 + (side == "B"))
    return [
        simengine.virtual_step(
            start, r, 6.0, PROMPTS, OUTPUTS, SLA, seed=seed * 7919 + int(r * 100) + round_index, run_seed=seed * 31 + k
        )
        for k, r in enumerate(rates)
    ]


@pytest.fixture(scope="module")
def served() -> float:
    """What the base engine serves at length: the throughput of a minute at far more than it can take."""
    return simengine.virtual_step(BASE, 90.0, 60.0, PROMPTS, OUTPUTS, SLA, seed=1, run_seed=1).throughput_rps


def test_ttft_growth_is_the_slope_of_ttft_on_arrival_time_and_ignores_a_stall():
    rng = np.random.default_rng(3)
    times = np.sort(rng.uniform(0, 20, 40))
    ttft = 0.3 + 0.5 * times + rng.normal(0, 0.1, 40)
    ttft[5] += 6.0  # one request caught in a stall
    records = [RequestRecord(request_id=str(i), scheduled_s=t, ttft_s=y) for i, (t, y) in enumerate(zip(times, ttft))]
    g = ttft_growth(records)
    assert g is not None and g["low"] <= 0.5 <= g["high"] and abs(g["slope"] - 0.5) < 0.05 and g["n"] == 40
    assert ttft_growth(records[:5]) is None  # too few requests to say
    flat = [r.model_copy(update={"ttft_s": 0.3}) for r in records]
    assert abs(ttft_growth(flat)["slope"]) < 1e-9
    # a long replay run is fitted on evenly spaced requests: the same slope, every request counted
    many = np.sort(rng.uniform(0, 600, 30_000))
    long_run = [RequestRecord(request_id=str(i), scheduled_s=t, ttft_s=0.3 + 0.25 * t) for i, t in enumerate(many)]
    g = ttft_growth(long_run)
    assert g["n"] == 30_000 and abs(g["slope"] - 0.25) < 1e-6


def test_short_overloaded_steps_give_what_the_engine_serves_at_length_and_a_planted_gain(served):
    rates = [served * f for f in OVERLOAD]
    ratios = []
    for seed in range(4):
        base = service_rate(_sweep(BASE, rates, 0, seed, "A"))
        fast = service_rate(_sweep(BASE.planted(0.1), rates, 0, seed, "B"))
        assert base is not None and base.rate is not None and base.steps == len(rates)
        assert abs(math.log(base.rate / served)) < 0.1, (base.rate, served)
        ratios.append(fast.rate / base.rate)
    assert 1.06 < float(np.median(ratios)) < 1.14, ratios


def test_an_engine_that_never_queued_gives_no_rate_and_old_steps_none_at_all(served):
    calm = service_rate(_sweep(BASE, [served * 0.3, served * 0.5], 0, 1, "A"))
    assert calm is not None and calm.rate is None and calm.max_rate == pytest.approx(served * 0.5)
    old = [s.model_copy(update={"ttft_growth": None}) for s in _sweep(BASE, [served * 1.5], 0, 1, "A")]
    assert service_rate(old) is None
    stats = judge_service_rates([old], [old])
    assert stats.verdict == "invalid" and "TTFT growth" in stats.reason


def _trial(effect: float, seed: int, served: float):
    candidate = BASE.planted(effect)

    def measure(side, i, rates):
        return _sweep(BASE if side == "A" else candidate, rates, i, seed, side)

    return sequential_verdict(
        measure,
        served * 1.5,
        seed=seed,
        prior_var=PRIOR_SD**2,
        prior_df=PRIOR_DF,
        recentred=OVERLOAD,
        judge=judge_service_rates,
    )[0]


def test_service_rate_verdicts_keep_their_error_rate_find_a_planted_gain_and_stop_early_when_it_is_large(served):
    aa = [_trial(0.0, seed, served) for seed in range(1, 11)]
    assert "invalid" not in [s.verdict for s in aa]
    assert sum(s.verdict in ("better", "worse") for s in aa) <= 1, [s.sentence() for s in aa]
    gains = [_trial(0.1, seed, served) for seed in range(1, 7)]
    assert sum(s.verdict == "better" for s in gains) >= 5, [s.sentence() for s in gains]
    for s in gains:
        if s.effect is not None:
            assert s.low <= s.effect <= s.high and s.mde is not None
    large = [_trial(0.5, seed, served).rounds for seed in range(1, 5)]
    assert max(large) <= 2 and np.mean(large) < np.mean([s.rounds for s in aa])
