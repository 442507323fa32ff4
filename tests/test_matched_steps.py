"""Matched steps (loadgen.queue_rate.matched_steps): the service rate read from the same requests on both
sides, judged by the runs' spread, on the simulated engine of known service rate over several seeds."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from loadgen import simengine
from loadgen.noise_prior import PRIOR_DF, PRIOR_SD, repeat_evidence
from loadgen.queue_rate import matched_steps, service_rate
from loadgen.verdict import floor_mde, judge_service_rates
from specs.config import SLASpec

SLA = SLASpec(ttft_ms=300, itl_ms=50, max_error_rate=0.01)
RNG = np.random.default_rng(23)
# the main job's reference in miniature: a batch of 2, prefill-bound, heterogeneous prompts
PROMPTS = RNG.lognormal(math.log(300), 0.9, 2000).astype(int) + 8
OUTPUTS = RNG.integers(8, 17, 2000)
BASE = simengine.ServiceModel(
    max_batch=2, prefill_ms_per_token=1.0, decode_base_ms=20, decode_ms_per_seq=5, run_jitter_cv=0.02
)


@pytest.fixture(scope="module")
def rates() -> list[float]:
    served = simengine.virtual_step(BASE, 50.0, 300.0, PROMPTS, OUTPUTS, SLA, seed=1, run_seed=1).throughput_rps
    return [served * 1.4, served * 1.8]  # two steps that queue, as the main job's reference has


def _sweep(model, rates, run: int, duration_s: float = 12.0):
    """One sweep: the same requests at every rate in every run (one seed per rate), a fresh start each run."""
    start = model.started(run)
    return [
        simengine.virtual_step(start, r, duration_s, PROMPTS, OUTPUTS, SLA, seed=int(r * 1000), run_seed=run)
        for r in rates
    ]


def test_matched_steps_are_those_every_sweep_queued_at_the_same_rate_and_length(rates):
    a, b = _sweep(BASE, rates, 1), _sweep(BASE, rates, 2)
    assert [[s.target_rate for s in sw] for sw in matched_steps([a, b])] == [rates, rates]
    longer = _sweep(BASE, rates[1:], 3, duration_s=18.0)  # another length: other requests
    assert matched_steps([a, longer]) is None
    calm = _sweep(BASE, [rates[0] / 3], 4)  # a step that did not queue matches nothing
    assert matched_steps([a, calm]) is None
    assert [s.target_rate for s in matched_steps([a, a[1:]])[0]] == [rates[1]]


def _verdict(effect: float, seed: int, rates, b_duration: float = 12.0):
    """A campaign's comparison: a floor of two sweeps, then a candidate's two, judged at the last look."""
    base = [_sweep(BASE, rates, seed * 10 + k) for k in range(2)]
    cand = [_sweep(BASE.planted(effect), rates, seed * 10 + 5 + k, b_duration) for k in range(2)]
    evidence = repeat_evidence(base, "service_rate")
    prior_var = (PRIOR_DF * PRIOR_SD**2 + evidence.sum_sq) / (PRIOR_DF + evidence.df)
    return judge_service_rates(base, cand, final=True, prior_var=prior_var, prior_df=PRIOR_DF + evidence.df)


def test_matched_verdicts_keep_their_error_rate_and_find_a_planted_gain(rates):
    """The premise (repeats of matched steps agree better than their slopes say) is a real engine's
    (benchmarks/service_rate_calibration.py on vLLM); this instrument's repeats vary about as much as its
    slopes say, so what it checks is that judging by the runs' spread alone keeps the error rate."""
    aa = [_verdict(0.0, seed, rates) for seed in range(1, 13)]
    assert all("matched" in s.baseline and "matched" in s.candidate for s in aa)
    assert sum(s.verdict in ("better", "worse") for s in aa) <= 1, [s.sentence() for s in aa]
    assert all(s.se_bootstrap == 0.0 for s in aa)  # the runs' spread alone: the slopes' error cancels
    # a candidate swept at another step length serves other requests: nothing matches, the intervals stand;
    # and the same engine reads slower on longer steps (a queue's transient), which is why a campaign's
    # sweeps hold their step lengths fixed (the endpoint's min_requests) and verdicts read matched steps
    unmatched = [_verdict(0.0, seed, rates, b_duration=18.0) for seed in range(1, 7)]
    assert all("matched" not in s.candidate and s.se_bootstrap > 0 for s in unmatched)
    assert np.median([s.effect for s in unmatched]) < -0.03
    gains = [_verdict(0.10, seed, rates) for seed in range(1, 9)]
    assert sum(s.verdict == "better" for s in gains) >= 7, [s.sentence() for s in gains]
    assert all(s.verdict != "worse" for s in gains)


def test_a_design_whose_rounds_recentre_can_judge_without_matching(rates):
    """match=False (the harness's sequential design, benchmarks/harness_power.py): every queued step at
    every look, the larger of the slopes' error and the runs', though these rounds share their steps."""
    base = [_sweep(BASE, rates, 30 + k) for k in range(2)]
    cand = [_sweep(BASE, rates, 35 + k) for k in range(2)]
    matched = judge_service_rates(base, cand, final=True, prior_var=PRIOR_SD**2, prior_df=PRIOR_DF)
    plain = judge_service_rates(base, cand, final=True, prior_var=PRIOR_SD**2, prior_df=PRIOR_DF, match=False)
    assert "matched" in matched.candidate and "matched" not in plain.candidate
    assert matched.se_bootstrap == 0.0 and plain.se_bootstrap > 0


def test_the_floor_promises_what_a_matched_verdict_sees(rates):
    base = [_sweep(BASE, rates, k) for k in (1, 2)]
    matched = service_rate([s for r in matched_steps(base) for s in r], matched=True)
    plain = service_rate([s for r in base for s in r])
    assert matched.matched and not plain.matched
    var, df = PRIOR_SD**2, PRIOR_DF
    assert floor_mde(matched, 2, var, df) < floor_mde(plain, 2, var, df)
    # with no spread measured at all, a matched floor still takes the slopes' own error: never zero
    assert floor_mde(matched, 2, 0.0, 0) == pytest.approx(floor_mde(plain, 2, 0.0, 0), rel=0.3)


def test_a_sweep_ends_past_a_clear_overload_so_its_repeats_share_their_queued_rungs():
    """The reference's repeats on a slow host: when 0.7 req/s broke its ITL target it queued barely
    (growth 0.10-0.12), the ladder stopped, and the queue rule added 1.0 req/s, so that sweep's queued
    steps were 0.7 and 1.0 where its repeats had 1.0 and 1.4: one rung in common. A sweep now goes on
    until one of its queued steps queued clearly, which a rung just past the service rate never does."""
    from types import SimpleNamespace

    from loadgen.sweep import CLEAR_GROWTH, _rate_that_queues

    ladder = [0.7, 1.0, 1.4, 2.0, 2.8]

    def step(rate, growth):
        return SimpleNamespace(target_rate=rate, validity="valid", ttft_growth={"slope": growth})

    weak = [step(0.7, 0.11), step(1.0, 0.22)]  # two steps queued, neither clearly
    assert _rate_that_queues(weak, ladder) == 1.4
    assert _rate_that_queues([*weak, step(1.4, 1.15)], ladder) is None
    assert _rate_that_queues([step(0.7, 0.05), step(1.0, 0.2), step(1.4, CLEAR_GROWTH)], ladder) is None
    assert _rate_that_queues([step(2.8, 1.5)], ladder) is not None  # one queued step is not two


def test_one_more_sweep_never_gives_a_floor_less_than_its_best_case(rates):
    """A floor's ``mde_next_best``, the least MDE one more sweep could give (it adds a df, and no spread at
    most), is what lets a campaign skip a sweep that cannot bring its floor under the target: it must never
    be beaten by the sweep itself. Six seeds of three sweeps each on the simulated engine with a host's
    between-run jitter."""
    from loadgen.noise import noise_floor
    from loadgen.results import SweepResult

    jittery = dataclasses.replace(BASE, run_jitter_cv=0.05)

    def swept(run: int) -> SweepResult:
        steps = _sweep(jittery, rates, run)
        return SweepResult(
            endpoint="sim", engine_args=[], launch_config_hash="h", started_at=0.0, steps=steps,
            capacity_rps=rates[0], capacity_per_gpu=rates[0], estimator="service_rate",
        )  # fmt: skip

    gaps = []
    for seed in range(6):
        sweeps = [swept(100 + 3 * seed + i) for i in range(3)]
        two, three = (noise_floor(sweeps[:k], candidate_rounds=2) for k in (2, 3))
        assert two.mde is not None and two.mde_next_best is not None and three.mde is not None
        assert two.mde_next_best < two.mde
        assert two.mde_next_best <= three.mde + 1e-12, (seed, two.mde_next_best, three.mde)
        gaps.append(three.mde - two.mde_next_best)
    assert max(gaps) > 0.005  # the bound is met with room, not by construction
