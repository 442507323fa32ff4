"""Capacity is a rate the engine sustains (loadgen.sustained), on the simulated engine of known service rate.

Its truth is what the engine serves at length: the throughput of a minute at far more than it can take.
Short steps above it, under an SLA loose enough that their p95 never crosses, each "hold" their rate by
latency alone; the queue's growth says otherwise, and the capacity must not rise above what is served.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen import simengine
from loadgen.capacity import estimate
from loadgen.ladder import capacity, held, interpolated_capacity
from loadgen.report import load_curve_markdown
from loadgen.results import SweepResult
from loadgen.sustained import Z, queue_bound, served_rate, shortfall
from simulated_rounds import workload
from specs.config import SLASpec

PROMPTS, OUTPUTS = workload(7)
BASE = simengine.ServiceModel(run_jitter_cv=0.01)
LOOSE = SLASpec(ttft_ms=3000, itl_ms=200, max_error_rate=0.01)  # a 4 s step's p95 stays under it
STEP_S = 4.0
OVER = (1.25, 1.5)  # offered, as factors of the service rate: the queue grows at both
UNDER = (0.5, 0.8, 0.9)
SEEDS = range(6)


@pytest.fixture(scope="module")
def served() -> float:
    """What the engine serves at length."""
    return simengine.virtual_step(BASE, 90.0, 60.0, PROMPTS, OUTPUTS, LOOSE, seed=1, run_seed=1).throughput_rps


def _steps(served: float, factors, seed: int):
    return [
        simengine.virtual_step(
            BASE, served * f, STEP_S, PROMPTS, OUTPUTS, LOOSE, seed=seed * 7919 + int(f * 1000), run_seed=seed * 31 + k
        )
        for k, f in enumerate(factors)
    ]


def _latency_only(step) -> bool:
    """The step's percentiles and errors alone meet the SLA (what a short step reported before the rule)."""
    return step.validity == "valid" and not [v for v in step.sla_violations if not v.startswith("queue grew")]


def test_short_steps_above_the_service_rate_never_make_a_capacity_above_it(served):
    for seed in SEEDS:
        steps = _steps(served, UNDER[:2] + OVER, seed)
        assert all(_latency_only(s) for s in steps), "p95 crossed: the steps are not short enough to test the rule"
        # by latency alone every rate held, the top one 1.5x what the engine serves
        old = [
            s.model_copy(update={"ttft_growth": None, "backlog": None, "within_sla": True, "sla_violations": []})
            for s in steps
        ]
        assert capacity(old) == (served * OVER[-1], False)
        assert sum(queue_bound(s) for s in steps[2:]) >= 1
        assert not any(s.within_sla for s in steps if queue_bound(s))
        rung, method = interpolated_capacity(steps, LOOSE)
        assert served * UNDER[1] * 0.99 <= rung <= served * 1.02, (seed, rung, method)
        fit = estimate(steps, seed=seed)
        assert fit is not None and fit.censored is None and fit.sustained is not None
        # the fitted capacity is no higher than the truth beyond its own interval, and that interval holds it
        assert fit.capacity <= served * math.exp(Z * fit.log_se), (seed, fit.describe())
        assert fit.low <= served, (seed, fit.describe())


def test_steps_below_the_service_rate_are_rarely_queue_bound(served):
    flagged = [queue_bound(s) for seed in range(10) for s in _steps(served, UNDER, seed)]
    assert np.mean(flagged) <= 0.05, flagged
    # and steps well above it almost always are
    over = [queue_bound(s) for seed in SEEDS for s in _steps(served, (1.5, 1.8), seed)]
    assert np.mean(over) >= 0.8, over


def test_the_shortfall_is_judged_against_the_steps_own_noise():
    # 34 arrivals, TTFT growing 0.77 s per second of arrivals: 15 left waiting against a noise of about 6
    grown = {"slope": 0.77, "low": 0.6, "high": 0.95, "n": 34.0}
    gained, se = shortfall(grown)
    assert gained == pytest.approx(34 * 0.77 / 1.77) and math.sqrt(34) < se < 7
    # the same growth in a step of 8 requests is within its noise; none at all is nothing
    small = dict(grown, n=8.0)
    assert shortfall(small)[0] < Z * shortfall(small)[1]
    assert shortfall({"slope": -0.1, "low": -0.2, "high": 0.0, "n": 30.0})[0] == 0.0
    assert shortfall(None) is None


def test_the_load_curve_shows_offered_and_done_and_a_recorded_step_that_queued_is_not_held(served):
    steps = _steps(served, (0.5, 1.5), 0)
    # a step recorded before the rule: within the SLA by latency, its growth kept
    recorded = [s.model_copy(update={"within_sla": _latency_only(s), "sla_violations": []}) for s in steps]
    assert recorded[1].within_sla and queue_bound(recorded[1]) and not held(recorded[1])
    sweep = SweepResult(endpoint="sim", engine_args=[], launch_config_hash="x", started_at=0.0, steps=recorded)
    table = load_curve_markdown([("best", sweep)])
    header = next(line for line in table if line.startswith("| config"))
    assert "offered req/s | done req/s | queue" in header
    low, high = [line for line in table if line.startswith("| best")]
    assert f"| {steps[1].target_rate:g} | {steps[1].throughput_rps:.2f} | **grew**" in high
    assert "no: queue grew" in high and low.endswith("| yes |") and "held" in low


def test_closed_loop_users_are_not_judged_by_queue_growth():
    """Closed-loop users never queue more requests than there are users: a TTFT that climbs while they ramp
    is latency (the SLA judges it), not a queue the engine cannot serve."""
    from loadgen.results import LatencySummary, RequestRecord
    from loadgen.runner import RunOutcome
    from loadgen.stats import summarize

    times = np.linspace(0, 10, 200)

    def outcome(turns: bool) -> RunOutcome:
        records = [
            RequestRecord(
                request_id=str(i),
                scheduled_s=float(t),
                sent_s=float(t),
                ttft_s=0.05 + 0.25 * float(t),  # arrivals outpace service 1.25x
                e2e_s=0.1 + 0.25 * float(t),
                output_tokens=2,
                status=200,
                turn=0 if turns else None,
                session=str(i) if turns else None,
            )
            for i, t in enumerate(times)
        ]
        return RunOutcome(
            records=records,
            validity="valid",
            reason=None,
            target_rate=20.0,
            achieved_rate=20.0,
            duration_s=10.0,
            send_lag_ms=LatencySummary(),
            send_lag_max_ms=0.0,
            senders=1,
            connections_opened=0,
            client_errors=0,
            client_cpu_util=None,
            started_at=0.0,
        )

    open_loop, closed = summarize(outcome(False), LOOSE), summarize(outcome(True), LOOSE)
    assert not open_loop.within_sla and "queue grew" in "; ".join(open_loop.sla_violations)
    assert closed.within_sla and not closed.sla_violations
    assert not queue_bound(closed.model_copy(update={"users": 8}))


def test_a_verdict_rests_on_sustained_rates_and_still_finds_a_planted_gain(served):
    """Both sides' capacities are at most what they serve (within 5%), and a 25% faster engine is judged
    better by about that much, where by latency alone neither side's crossing lay near a tested rate."""
    from loadgen.verdict import judge_rounds

    fast, factors = BASE.planted(0.25), (0.5, 0.8, 1.25, 1.5, 1.8)

    def rounds(model, seed, side):
        return [
            [
                simengine.virtual_step(
                    model.started(seed * 100 + i + side),
                    served * f,
                    STEP_S,
                    PROMPTS,
                    OUTPUTS,
                    LOOSE,
                    seed=seed * 7919 + int(f * 1000) + i,
                    run_seed=seed * 31 + k + i + side,
                )
                for k, f in enumerate(factors)
            ]
            for i in range(2)
        ]

    for seed in range(4):
        v = judge_rounds(rounds(BASE, seed, 0), rounds(fast, seed, 50), final=True, prior_var=0.03**2, prior_df=4)
        assert v.verdict == "better", (seed, v.sentence())
        assert v.baseline_rps <= served * 1.05, (seed, v.baseline)
        if v.candidate_censored is None:
            assert v.candidate_rps <= served * 1.25 * 1.05, (seed, v.candidate)
            assert 0.1 < v.effect < 0.4, (seed, v.sentence())


def test_a_queue_inside_the_running_batch_is_counted():
    """An engine that admits every arrival into its batch (vLLM's default, here 512 sequences) queues in the
    batch: TTFT hardly climbs while every sequence decodes slower. The backlog's counts see what the TTFT
    slope misses, and rarely flag a step the engine keeps pace with."""
    wide = simengine.ServiceModel(run_jitter_cv=0.01, max_batch=512)
    sla = SLASpec(ttft_ms=5000, itl_ms=1000, max_error_rate=0.01)  # latency alone holds every step below
    truth = simengine.virtual_step(wide, 200.0, 60.0, PROMPTS, OUTPUTS, sla, seed=1, run_seed=1).throughput_rps

    def steps(factor):
        return [
            simengine.virtual_step(wide, truth * factor, 10.0, PROMPTS, OUTPUTS, sla, seed=s * 7919, run_seed=s)
            for s in range(12)
        ]

    over, under = steps(1.5), steps(0.7)
    assert all(_latency_only(s) for s in over), "p95 crossed: the steps are not short enough to test the rule"
    slope_alone = [queue_bound(s.model_copy(update={"backlog": None})) for s in over]
    assert np.mean(slope_alone) <= 0.25, "the TTFT slope already sees this queue: the case tests nothing"
    assert np.mean([queue_bound(s) for s in over]) >= 0.9
    assert np.mean([queue_bound(s) for s in under]) <= 0.1
    # what a flagged step served is no more than the engine sustains at length (its noise allowed)
    for s in over:
        if queue_bound(s):
            assert served_rate(s) <= truth * 1.1, (s.target_rate, served_rate(s), truth)
            assert "left" in "; ".join(s.sla_violations) or "waiting" in "; ".join(s.sla_violations)
    # the load curve names the counts
    sweep = SweepResult(endpoint="sim", engine_args=[], launch_config_hash="x", started_at=0.0, steps=over[:1])
    assert "in its last" in "\n".join(load_curve_markdown([("wide", sweep)]))
