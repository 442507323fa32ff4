"""The verdict's error rates, on the simulated engine of known capacity (virtual time, several seeds).

The figures with 40 trials per cell are benchmarks/results/harness_power.json; these tests keep the
statistical properties from regressing: A/A trials are rarely judged better or worse, a planted
gain is found, the interval covers the truth, the sequential rule stops early on a large effect and
takes more rounds on a small one, and an HTTP sweep against the simulated server gives samples the
estimator reads.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specs.config import SLASpec
from loadgen import simengine
from loadgen.capacity import estimate
from loadgen.sequential import sequential_verdict
from loadgen.verdict import judge_rounds
from simulated_rounds import SLA, SimulatedRounds, workload

PROMPTS, OUTPUTS = workload(7)
BASE = simengine.ServiceModel(run_jitter_cv=0.01)
ROUNDS = SimulatedRounds(BASE, PROMPTS, OUTPUTS)
_sweep = ROUNDS.sweep


@pytest.fixture(scope="module")
def capacity() -> float:
    return ROUNDS.capacity()


@pytest.fixture(scope="module")
def prior(capacity) -> tuple[float, int]:
    return ROUNDS.prior(capacity)


def _trial(effect: float, seed: int, capacity: float, prior) -> object:
    candidate = BASE.planted(effect)

    def measure(side, i, rates):
        return _sweep(BASE if side == "A" else candidate, rates, i, seed, side)

    return sequential_verdict(measure, capacity, seed=seed, prior_var=prior[0], prior_df=prior[1])[0]


def test_the_fitted_capacity_orders_engines_and_narrows_with_more_requests(capacity):
    """Short steps measure a transient (a queue needs time to build, so 6 s steps overstate the capacity
    measured at length: docs/measurement.md); what a verdict needs is that the estimate ranks engines
    the way their capacities at length do, and that more requests tighten it. (The rates sit above the
    capacity at length, where these short steps cross.)"""
    rates = [capacity * f for f in (0.9, 1.05, 1.2, 1.35, 1.5)]
    for seed in range(6):
        slow = estimate(_sweep(BASE, rates, 0, seed, "A"), seed=seed)
        fast = estimate(_sweep(BASE.planted(0.4), rates, 0, seed, "A"), seed=seed)
        assert slow is not None and fast is not None and slow.censored is None
        assert fast.capacity > slow.capacity * 1.15
        assert slow.low <= slow.capacity <= slow.high
    one = estimate(_sweep(BASE, rates, 0, 1, "A"))
    four = estimate([s for i in range(4) for s in _sweep(BASE, rates, i, 1, "A")])
    assert four.log_se < one.log_se * 0.75


def test_aa_trials_are_rarely_judged_better_or_worse(capacity, prior):
    verdicts = [_trial(0.0, seed, capacity, prior).verdict for seed in range(1, 13)]
    assert "invalid" not in verdicts
    assert sum(v in ("better", "worse") for v in verdicts) <= 1, verdicts


def test_a_planted_gain_is_found_and_its_interval_holds_it(capacity, prior):
    stats = [_trial(0.30, seed, capacity, prior) for seed in range(1, 9)]
    assert sum(s.verdict == "better" for s in stats) >= 7, [s.sentence() for s in stats]
    for s in stats:
        assert s.low is not None and s.low > 0  # better: the interval (or its bound) clears zero
        if s.effect is not None:  # resolved inside the tested rates: a two-sided interval around the effect
            assert s.low <= s.effect <= s.high and s.mde is not None and s.mde > 0
        else:  # the candidate held beyond every tested rate: a lower bound, said so
            assert "beyond every tested rate" in (s.reason or "")
    assert all(s.verdict != "worse" for s in stats)


def test_a_planted_loss_is_judged_worse(capacity, prior):
    stats = [_trial(-0.25, seed, capacity, prior) for seed in range(1, 7)]
    assert sum(s.verdict == "worse" for s in stats) >= 5, [s.sentence() for s in stats]


def test_the_sequential_rule_stops_early_on_a_large_effect_and_goes_on_for_a_small_one(capacity, prior):
    large = [_trial(0.5, seed, capacity, prior).rounds for seed in range(1, 7)]
    small = [_trial(0.02, seed, capacity, prior).rounds for seed in range(1, 7)]
    assert max(large) <= 2
    assert np.mean(small) > np.mean(large) + 0.5


def test_without_a_measure_of_between_run_noise_one_round_decides_nothing(capacity):
    rates = [capacity * f for f in (0.8, 0.9, 1.0, 1.1, 1.2)]
    one = judge_rounds([_sweep(BASE, rates, 0, 3, "A")], [_sweep(BASE.planted(0.1), rates, 0, 3, "B")])
    assert one.verdict == "undecided"  # a clear effect still needs a second round without a prior


def test_an_http_sweep_against_the_simulated_server_feeds_the_estimator():
    from loadgen import arrivals
    from loadgen.outcome import LagBounds
    from loadgen.runner import run_open_loop
    from loadgen.stats import summarize

    # the estimator is under test, not the client: a loose lag bound, so a stall of the shared 2-core
    # host (the engine busiest at 40 req/s) does not void the steps it is fed
    loose = LagBounds(p99_ms=1000.0, min_rate_ratio=0.7)

    steps = []
    with simengine.start(BASE) as engine:
        for rate in (10.0, 25.0, 40.0):
            schedule = arrivals.poisson(rate, 3.0, seed=int(rate))
            bodies = [
                {"messages": [{"role": "user", "content": "x" * (4 * int(p))}], "max_tokens": int(o)}
                for p, o in zip(PROMPTS[: len(schedule)], OUTPUTS[: len(schedule)])
            ]
            outcome = run_open_loop(
                engine.base_url, engine.served_model, bodies, schedule, duration_s=3.0, isolate=True, lag_bounds=loose
            )
            steps.append(summarize(outcome, SLA, target_rate=rate))
    assert all(s.errors == 0 and s.sla_samples["ttft_n"] for s in steps)
    valid = [s for s in steps if s.validity == "valid"]  # a step the client could not keep is left out
    assert len(valid) >= 2, [s.invalid_reason for s in steps]
    est = estimate(steps)
    assert est is not None and est.requests == sum(s.requests for s in valid)
    # the fraction over the limits rises with the rate: the crossing lies between the lowest and highest
    assert 10.0 < est.capacity < 40.0 or est.censored is not None


def test_real_sweeps_of_the_simulated_server_give_an_interval_verdict(definitions):
    """run_sweep -> noise_floor -> compare, end to end over HTTP: the fitted capacity, the MDE and a
    verdict with its interval for a clearly faster engine."""
    import json

    import polars as pl

    from loadgen.compare import compare
    from loadgen.noise import noise_floor
    from loadgen.sweep import run_sweep

    spec = definitions.endpoint("tiny_random")
    spec = spec.model_copy(
        update={
            "sla": SLA,
            "sweep": spec.sweep.model_copy(
                update={
                    "rates": [12.0, 18.0, 24.0, 30.0, 36.0],
                    "step_duration_s": 3.0,
                    "refine_steps": 0,
                    "warmup_requests": 0,
                    "warm_prefix_groups": 0,
                    "max_send_lag_ms": 200.0,  # a planted +60% needs no tight bound: a host stall must not void it
                    "min_rate_ratio": 0.9,
                    "min_requests": 1,
                }
            ),
        }
    )
    pool = pl.DataFrame(
        {
            "request_id": [str(i) for i in range(400)],
            "body": [
                json.dumps({"messages": [{"role": "user", "content": "x" * (4 * int(p))}], "max_tokens": int(o)})
                for p, o in zip(PROMPTS[:400], OUTPUTS[:400])
            ],
        }
    )
    with simengine.start(BASE) as engine:
        baseline = [run_sweep(engine, pool, spec, repeats_label=f"base-{k}", check_client=False) for k in range(2)]
    with simengine.start(BASE.planted(0.6)) as engine:
        candidate = [run_sweep(engine, pool, spec, repeats_label="fast", check_client=False)]
    assert all(s.validity == "valid" for s in baseline + candidate), [s.invalid_reason for s in baseline + candidate]
    assert all(
        s.capacity_fit_rps is not None and s.capacity_fit_low <= s.capacity_fit_rps <= s.capacity_fit_high
        for s in baseline
    )
    floor = noise_floor(baseline)
    assert floor.steps and floor.mde is not None and floor.threshold == floor.mde and floor.between_df >= 5
    verdict = compare(floor, candidate)
    assert verdict.verdict == "better", verdict.evidence
    assert verdict.effect_low is not None and verdict.effect_low > 0
    assert "interval" in verdict.evidence or "beyond every tested rate" in verdict.evidence


def test_a_verdict_out_of_time_judges_what_it_measured_as_its_last_look(capacity, prior):
    """``time_left``: after the first round the budget says no, so the verdict is taken on one round at
    the final look's error rate: a large planted gain is still found, an A/A pair is never undecided."""
    budgets = []

    def time_left():
        budgets.append(1)
        return 0.0

    for effect, expected in ((0.3, "better"), (0.0, "same")):
        candidate = BASE.planted(effect)

        def measure(side, i, rates, candidate=candidate):
            return _sweep(BASE if side == "A" else candidate, rates, i, 11, side)

        stats, rounds = sequential_verdict(
            measure, capacity, seed=11, prior_var=prior[0], prior_df=prior[1], max_rounds=4, time_left=time_left
        )
        assert len(rounds["A"]) == 1 and stats.rounds == 1
        assert stats.verdict == expected, stats.sentence()
    assert budgets  # the budget was asked before a second round


def test_a_resumed_verdict_continues_from_the_rounds_it_was_given(capacity, prior):
    """A verdict cut by a call's time limit continues on fresh engines: the measured rounds count as
    its first rounds (the next round measured is round 3), and one already decided measures nothing."""
    for effect in (0.03, 0.5):
        candidate = BASE.planted(effect)
        asked = []

        def measure(side, i, rates, candidate=candidate):
            asked.append(i)
            return _sweep(BASE if side == "A" else candidate, rates, i, 13, side)

        rates = [capacity * f for f in (0.6, 0.8, 1.0, 1.2, 1.4)]
        before = {side: [measure(side, i, rates) for i in range(2)] for side in ("A", "B")}
        asked.clear()
        stats, rounds = sequential_verdict(
            measure, capacity, seed=13, prior_var=prior[0], prior_df=prior[1], max_rounds=4, measured=before
        )
        if effect == 0.5:  # decided on the rounds it was given
            assert asked == [] and stats.verdict == "better" and stats.rounds == 2, stats.sentence()
        else:
            assert asked and min(asked) == 2 and stats.rounds == len(rounds["A"]) > 2, (asked, stats.sentence())
            assert rounds["A"][:2] == before["A"]


def test_steady_means_latency_has_stopped_falling():
    from loadgen.steady import is_steady

    assert not is_steady([120.0, 60.0, 40.0], 0.05, 2)  # still falling
    assert is_steady([120.0, 40.0, 41.0, 39.5], 0.05, 2)  # within 5% of the best twice in a row
    assert is_steady([40.0, 41.0, 46.0], 0.05, 2)  # rising is not falling
    assert not is_steady([40.0, None, 41.0], 0.05, 2)  # a burst without a measurement does not count
    assert not is_steady([], 0.05, 2)
    from loadgen.steady import SteadyWarmup

    # the H100 warm-up of 2026-12-05: ITL rose at the last burst (load), TTFT had still been falling
    seen = SteadyWarmup(rate=4.4, burst_s=6, itl_p50_ms=[26, 27, 27, 45], ttft_p50_ms=[143, 97, 62, 69])
    assert seen.settled() == {"ITL": True, "TTFT": False}
    assert seen.describe().endswith("TTFT p50 143, 97, 62, 69 ms: TTFT still falling at the last burst")


def test_an_unresolved_crossing_is_judged_on_the_two_intervals():
    """Many bootstrap draws of a side find no crossing (its standard error is not finite): the verdict
    compares the sides' own intervals, deciding only when they do not overlap."""
    from loadgen.capacity import CapacityEstimate
    from loadgen.verdict import judge_rounds
    import loadgen.verdict as verdict_module

    def est(capacity, low, high, log_se):
        return CapacityEstimate(
            capacity=capacity,
            low=low,
            high=high,
            log_se=log_se,
            limiting="itl",
            rates=(1.0, 2.0),
            requests=100,
            draws=np.full(10, math.log(capacity)),
        )

    cases = [
        (est(1.47, 1.15, 1.55, 0.05), est(0.54, 0.22, 1.09, math.inf), "worse"),
        (est(0.54, 0.22, 1.09, math.inf), est(1.47, 1.15, 1.55, 0.05), "better"),
        (est(1.47, 1.15, 1.55, 0.05), est(1.2, 0.5, 1.3, math.inf), "same"),
    ]
    for a, b, expected in cases:
        picks = iter([a, b])
        original = verdict_module.estimate
        verdict_module.estimate = lambda steps, seed=0: next(picks)
        try:
            stats = judge_rounds([[]], [[]], final=True)
        finally:
            verdict_module.estimate = original
        assert stats.verdict == expected, stats.sentence()
        assert "two intervals" in stats.reason and stats.low <= stats.effect <= stats.high


def test_a_baseline_that_holds_every_tested_rate_is_recorded_as_numbers_that_load_again(capacity):
    """A crossing beyond every tested rate is estimated as inf; JSON has no infinity, so a verdict that
    kept it was written as null and the campaign's state would not load again (CI of stop 29)."""
    from loadgen.compare import compare
    from loadgen.noise import noise_floor
    from loadgen.results import Comparison, SweepResult

    rates = [capacity * f for f in (0.1, 0.2)]  # far below the knee: the SLA holds at every step

    def sweep(model, i, side):
        steps = _sweep(model, rates, i, 3, side)
        return SweepResult(
            endpoint="sim",
            engine_args=[],
            launch_config_hash="h",
            started_at=0.0,
            steps=steps,
            capacity_rps=max(rates),
            capacity_per_gpu=max(rates),
            capacity_bounded=False,
        )

    floor = noise_floor([sweep(BASE, i, "A") for i in range(2)])
    verdict = compare(floor, [sweep(BASE.planted(0.1), 0, "B")], final=True)
    assert all(st.within_sla for st in floor.steps[0])
    again = Comparison.model_validate_json(verdict.model_dump_json())
    assert again == verdict
    assert math.isfinite(again.baseline_capacity) and again.baseline_capacity == pytest.approx(max(rates))


def test_an_unresolved_fit_has_no_minimum_detectable_effect_and_the_state_still_reloads(tmp_path):
    """Two sweeps of two rates, one each side of the SLA (CI's resumed campaign): the fit's log_se is inf.
    Its MDE is then unknown (None), never inf: an inf threshold was written to the state file as null and
    the state could not be read back (the campaign asset failed, the review was lost)."""
    from loadgen.capacity import CapacityEstimate
    from loadgen.noise import NoiseFloor
    from loadgen.verdict import LOOKS, floor_mde
    from research.state import BaselineRecord, CampaignState, StateStore

    fit = CapacityEstimate(3.79, 2.0, 4.0, math.inf, "ttft", (2.0, 4.0), 40)
    assert floor_mde(fit, 2, 0.0009, 4, looks=LOOKS) is None
    assert floor_mde(CapacityEstimate(3.79, 3.5, 4.1, 0.05, "ttft", (2.0, 4.0), 40), 2, 0.0009, 4) > 0
    floor = NoiseFloor(repeats=2, capacities=[3.75, 4.0], capacity_mean=3.88, capacity_std=0.17,
                       capacity_rel_spread=0.064, threshold=0.2, mde=floor_mde(fit, 2, 0.0009, 4))  # fmt: skip
    store = StateStore(tmp_path, "c")
    record = BaselineRecord(engine_args=["--max-num-seqs", "4"], sweeps=[], noise=floor)
    store.save(CampaignState(campaign="c", campaign_id="c-1", endpoint="e", reference=record, working=record))
    assert store.load().working.noise.threshold == 0.2


def test_smoothed_counts_weigh_a_value_by_how_far_it_lies_from_the_limit():
    """A value at the limit counts half, far under it nothing, far over it one; without smoothing the
    counts are the plain ones; a request never answered counts fully over in both."""
    from loadgen.capacity import sla_samples
    from loadgen.results import RequestRecord

    sla = SLASpec(ttft_ms=300, itl_ms=50, e2e_ms=1000, max_error_rate=0.01)
    records = [
        RequestRecord(request_id="a", scheduled_s=0, ttft_s=0.3, itl_s=[0.05, 0.001, 0.5], e2e_s=0.2, status=200),
        RequestRecord(request_id="b", scheduled_s=0, status=200, cut=True),
        RequestRecord(request_id="c", scheduled_s=0, status=500, error="boom"),
    ]
    s = sla_samples(records, sla, soft=0.2)
    assert s["ttft_soft"][0] == pytest.approx(0.5) and s["ttft_over"][0] == 0
    assert s["itl_soft"][0] == pytest.approx(1.5, abs=1e-3) and s["itl_over"][0] == 1 and s["itl_n"][0] == 3
    assert s["e2e_soft"][0] < 1e-6
    assert s["ttft_soft"][1] == s["ttft_over"][1] == 1 and s["e2e_soft"][1] == 1  # cut before its first token
    assert s["errors_over"] == [0, 0, 1] and s["ttft_n"][2] == 0  # a failed request counts as an error only
    hard = sla_samples(records, sla, soft=0)
    assert hard["ttft_soft"] == hard["ttft_over"] and hard["itl_soft"] == hard["itl_over"]


def test_smoothed_counts_tighten_the_crossing_and_old_results_still_fit(capacity):
    """Over several seeds the fit on smoothed counts has a smaller bootstrap standard error than the fit
    on plain counts of the same requests; steps recorded without smoothed counts are fitted on plain ones."""
    rates = [capacity * f for f in (0.8, 0.9, 1.0, 1.1, 1.2)]
    ratios = []
    for seed in range(5):
        # the crossing's own fit: no step's queue reading caps it (that cap is the same for both fits)
        steps = [
            s.model_copy(update={"backlog": None, "ttft_growth": None}) for s in _sweep(BASE, rates, 0, 40 + seed, "A")
        ]
        assert all("ttft_soft" in s.sla_samples for s in steps)
        plain = [
            s.model_copy(update={"sla_samples": {k: v for k, v in s.sla_samples.items() if not k.endswith("_soft")}})
            for s in steps
        ]
        soft, hard = estimate(steps, seed=seed), estimate(plain, seed=seed)
        assert soft is not None and hard is not None
        ratios.append(soft.log_se / hard.log_se)
        # a mix of old and new steps is fitted on plain counts throughout
        mixed = estimate(plain[:2] + steps[2:], boot=0)
        assert mixed.capacity == pytest.approx(estimate(plain, boot=0).capacity)
    assert np.median(ratios) < 0.9, ratios


def test_later_rounds_measure_around_the_capacities_found_and_both_sides_share_their_rates(capacity, prior):
    """After the first round (0.6-1.4x the guess), the next rounds sit at 0.8-1.2x what the rounds so far
    measured, on the same rates for both sides (their schedules pair); without recentring they keep
    the first rates."""
    asked: dict[tuple[str, int], list[float]] = {}

    def measure(side, i, rates):
        asked[(side, i)] = list(rates)
        return _sweep(BASE if side == "A" else BASE.planted(0.03), rates, i, 21, side)

    guess = capacity * 0.9
    stats, rounds = sequential_verdict(measure, guess, seed=21, prior_var=prior[0], prior_df=prior[1], max_rounds=3)
    assert len(rounds["A"]) >= 2, stats.sentence()
    for i in range(len(rounds["A"])):
        assert asked[("A", i)] == asked[("B", i)]
    first, later = asked[("A", 0)], asked[("A", 1)]
    assert max(first) / min(first) == pytest.approx(1.4 / 0.6, rel=0.01)
    assert len(later) == 5 and max(later) / min(later) == pytest.approx(1.2 / 0.8, rel=0.01)
    centre = math.sqrt(min(later) * max(later) / 0.96)
    assert centre != pytest.approx(guess, rel=0.02)  # where the first round found the crossings, not the guess
    assert min(first) < centre < max(first)
    no = sequential_verdict(
        measure, guess, seed=21, prior_var=prior[0], prior_df=prior[1], max_rounds=2, recentre=False
    )[1]
    assert len(no["A"]) == 2 and set(first) <= set(asked[("A", 1)])


def test_a_narrower_grid_for_the_later_rounds_is_the_one_measured(capacity, prior):
    """``recentred`` sets the later rounds' rates (fewer, longer steps near the crossing): four rates
    at 0.85-1.15x, both sides on the same ones."""
    asked: dict[tuple[str, int], list[float]] = {}

    def measure(side, i, rates):
        asked[(side, i)] = list(rates)
        return _sweep(BASE if side == "A" else BASE.planted(0.03), rates, i, 22, side)

    grid = (0.85, 0.95, 1.05, 1.15)
    _, rounds = sequential_verdict(
        measure, capacity * 0.9, seed=22, prior_var=prior[0], prior_df=prior[1], max_rounds=3, recentred=grid
    )
    assert len(rounds["A"]) >= 2
    later = asked[("A", 1)]
    assert later == asked[("B", 1)] and len(later) == 4
    assert max(later) / min(later) == pytest.approx(1.15 / 0.85, rel=0.01)


@pytest.mark.parametrize("log_se,var", [(0.02, 0.032**2), (0.005, 0.116**2), (0.02, 0.02**2)])
def test_the_floors_mde_is_the_verdicts_for_a_candidate_measured_like_the_baseline(log_se, var):
    """The review's floor MDE promises what a verdict will see: the same standard error and the same
    quantile rule as the verdict itself (the main job's floor said 12.7% while its verdicts, measured
    exactly so, said 9.3%: the floor used Student's t where the estimate's own error decided)."""
    from loadgen.capacity import CapacityEstimate
    from loadgen.verdict import ALPHA, LOOKS, _interval_verdict, floor_mde

    est = CapacityEstimate(0.8, 0.75, 0.85, log_se, "ttft", (0.7, 1.4), 80)
    floor = floor_mde(est, 2, var, 5, looks=LOOKS, alpha=ALPHA / 2)
    # two rounds whose difference varies as the floor's A/A pairs did: the verdict pools their 1 df too
    diffs = [0.0, math.sqrt(2 * var)]
    verdict = _interval_verdict(0.0, log_se * math.sqrt(2), diffs, 2, 2, var, 5, ALPHA / 2, LOOKS, True, 0.02, {})
    assert floor == pytest.approx(verdict.mde, rel=1e-9)


def test_a_floor_of_more_sweeps_promises_the_verdict_of_a_candidate_with_fewer():
    """A floor tightened to K = 3 sweeps (CampaignSpec.floor_target_mde) judges candidates of at most
    two: its MDE is that verdict's (se from 1/3 + 1/2, the df of two rounds' differences), not that of
    a candidate of three sweeps, which a campaign never measures."""
    from loadgen.capacity import CapacityEstimate
    from loadgen.verdict import ALPHA, LOOKS, _interval_verdict, floor_mde

    est, var = CapacityEstimate(0.8, 0.75, 0.85, 0.005, "ttft", (0.7, 1.4), 80), 0.045**2
    floor = floor_mde(est, 3, var, 6, looks=LOOKS, alpha=ALPHA / 2, candidate_rounds=2)
    diffs = [0.0, math.sqrt(2 * var)]
    verdict = _interval_verdict(0.0, 0.005 * math.sqrt(2), diffs, 3, 2, var, 6, ALPHA / 2, LOOKS, True, 0.02, {})
    assert floor == pytest.approx(verdict.mde, rel=1e-9)
    # a third sweep buys less than a candidate measured three times would, and more than two sweeps
    assert floor_mde(est, 3, var, 6, looks=LOOKS, alpha=ALPHA / 2) < floor
    assert floor < floor_mde(est, 2, var, 5, looks=LOOKS, alpha=ALPHA / 2)
