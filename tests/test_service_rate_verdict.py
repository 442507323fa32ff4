"""The service-rate verdict (loadgen.verdict.judge_service_rates) in a campaign's design, and the sweeps and
floors it rests on, on the simulated engine of known service rate over several seeds."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from loadgen import simengine
from loadgen.noise_prior import PRIOR_DF, PRIOR_SD, repeat_evidence
from loadgen.verdict import judge_service_rates
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


def _verdict(effect: float, seed: int, rates, b_duration: float = 12.0):
    """A campaign's comparison: a floor of two sweeps, then a candidate's two, judged at the last look."""
    base = [_sweep(BASE, rates, seed * 10 + k) for k in range(2)]
    cand = [_sweep(BASE.planted(effect), rates, seed * 10 + 5 + k, b_duration) for k in range(2)]
    evidence = repeat_evidence(base, "service_rate")
    prior_var = (PRIOR_DF * PRIOR_SD**2 + evidence.sum_sq) / (PRIOR_DF + evidence.df)
    return judge_service_rates(base, cand, final=True, prior_var=prior_var, prior_df=PRIOR_DF + evidence.df)


def test_service_rate_verdicts_keep_their_error_rate_and_find_a_planted_gain(rates):
    """Every queued step of each side is read (reading only the steps both sides shared did not pay on
    recorded A/A launches: benchmarks/results/verdict_coverage.md): over seeds, A/A pairs are rarely
    `better` or `worse`, their error includes the slopes' own, and a planted 10% gain is found."""
    aa = [_verdict(0.0, seed, rates) for seed in range(1, 13)]
    assert sum(s.verdict in ("better", "worse") for s in aa) <= 1, [s.sentence() for s in aa]
    assert all(s.se_bootstrap > 0 for s in aa)  # the slopes' own error stands beside the runs' spread
    gains = [_verdict(0.10, seed, rates) for seed in range(1, 9)]
    assert sum(s.verdict == "better" for s in gains) >= 6, [s.sentence() for s in gains]
    assert all(s.verdict != "worse" for s in gains)


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
        assert two.mde_next_best <= two.mde  # a floor its slopes' own error decides may gain nothing
        assert two.mde_next_best <= three.mde + 1e-12, (seed, two.mde_next_best, three.mde)
        gaps.append(three.mde - two.mde_next_best)
    assert max(gaps) > 0.005  # the bound is met with room, not by construction
