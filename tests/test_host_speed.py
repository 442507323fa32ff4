"""Service rates compared at a common host speed (loadgen.host_speed, loadgen.host_elasticity).

On the simulated engine of known service rate, each step's host is planted: a slower host stretches every
service time of that step by the host's factor to a planted power (the engine's elasticity: -1 for a
decode-bound configuration, 0 for one the host's memory does not slow), and the step records the host's
memory-pass time as the probe would. Each side's exponent is fitted from its repeats; the drift then leaves
the judged difference, a planted gain is still found at its size, and an engine that does not follow the
host is not "corrected" into noise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specs.config import SLASpec, SweepSpec
from loadgen import simengine
from loadgen.host_elasticity import PRIOR_EXPONENT, PRIOR_EXPONENT_SD, fit_elasticity, host_adjustment
from loadgen.noise_prior import repeat_evidence
from loadgen.queue_rate import HostAdjustment, common_host_s, service_rate, step_host_s
from loadgen.results import StepResult
from loadgen.verdict import judge_service_rates, service_rate_differences

SLA = SLASpec(ttft_ms=300, itl_ms=50, max_error_rate=0.01)
RNG = np.random.default_rng(5)
PROMPTS = RNG.lognormal(math.log(300), 0.6, 2000).astype(int) + 8
OUTPUTS = RNG.integers(16, 65, 2000)
ENGINE = simengine.ServiceModel()
HOST_CV = 0.08  # the host's speed from step to step (the vLLM CPU steps' was 6-7%)
PASS_S = 1.0e-3  # one memory pass on the nominal host


def _host_drifted_sweep(
    model, rates, seed: int, *, probe: bool = True, follows: float = -1.0, level: float = 1.0
) -> list[StepResult]:
    """One sweep whose every step runs on a host slower or faster by a drawn factor (around ``level``); the
    engine's rate goes as that factor to the power ``follows``; the step records the host's memory-pass time
    twice (before and after it, with 1% reading noise) unless ``probe`` is off. A step's rate fixes its
    requests (``seed``), as in a real sweep, so repeats share their schedules."""
    rng = np.random.default_rng(seed)
    steps = []
    for k, rate in enumerate(rates):
        slow = level * float(rng.lognormal(0.0, HOST_CV))
        step = simengine.virtual_step(
            model.planted(slow**follows - 1), rate, 8.0, PROMPTS, OUTPUTS, SLA, seed=int(rate * 100), run_seed=seed + k
        )
        readings = [PASS_S * slow * float(rng.lognormal(0.0, 0.01)) for _ in range(2)] if probe else []
        steps.append(step.model_copy(update={"host_memory_pass_s": readings}))
    return steps


@pytest.fixture(scope="module")
def rates() -> list[float]:
    served = simengine.virtual_step(ENGINE, 90.0, 60.0, PROMPTS, OUTPUTS, SLA, seed=1, run_seed=1).throughput_rps
    return [served * f for f in (1.3, 1.6, 1.9)]


def _differences(effect: float, seeds, rates, probe: bool, follows: float = -1.0) -> list[float]:
    """Each seed: two interleaved rounds (A B A B), as a verdict's rounds; the first round's difference."""
    out = []
    for seed in seeds:
        a = [_host_drifted_sweep(ENGINE, rates, 1000 + 10 * seed + r, probe=probe, follows=follows) for r in (0, 1)]
        b = [
            _host_drifted_sweep(ENGINE.planted(effect), rates, 2000 + 10 * seed + r, probe=probe, follows=follows)
            for r in (0, 1)
        ]
        out += service_rate_differences(a, b)[:1]
    return out


def test_the_host_drift_leaves_the_difference_and_a_planted_gain_keeps_its_size(rates):
    seeds = range(12)
    raw = _differences(0.0, seeds, rates, probe=False)
    held = _differences(0.0, seeds, rates, probe=True)
    assert len(raw) == len(held) == len(seeds)
    # three steps' drift of 8% each reach a sweep as ~4.6%, a pair's difference as ~6.5%; the probe, with
    # each side's exponent fitted on its two rounds, removes most of it
    assert np.std(held, ddof=1) < 0.6 * np.std(raw, ddof=1), (np.std(held), np.std(raw))
    gained = _differences(0.10, seeds, rates, probe=True)
    assert abs(float(np.mean(gained)) - math.log(1.10)) < 0.03, np.mean(gained)


@pytest.mark.parametrize("follows", [-1.0, 0.0])
def test_each_configuration_s_exponent_is_fitted_from_its_repeats(rates, follows):
    """Over seeds: four repeats recover the planted exponent (prior -0.5 between them), and an engine the
    host's memory does not slow is left as measured, where a fixed exponent of -1 would add the host's swing."""
    fits = [
        fit_elasticity([_host_drifted_sweep(ENGINE, rates, 300 + 10 * s + r, follows=follows) for r in range(4)])
        for s in range(6)
    ]
    exponents = [f.exponent for f in fits]
    assert abs(float(np.mean(exponents)) - follows) < 0.25, exponents
    assert all(f.contrasts == 9 and f.se < 0.6 * PRIOR_EXPONENT_SD for f in fits), fits
    # one sweep repeats no schedule: the prior alone
    lone = fit_elasticity([_host_drifted_sweep(ENGINE, rates, 7, follows=follows)])
    assert lone.contrasts == 0 and lone.exponent == PRIOR_EXPONENT
    if follows == 0.0:
        raw = _differences(0.0, range(10), rates, probe=False, follows=0.0)
        held = _differences(0.0, range(10), rates, probe=True, follows=0.0)
        fixed = []
        for seed in range(10):
            a = _host_drifted_sweep(ENGINE, rates, 1000 + 10 * seed, follows=0.0)
            b = _host_drifted_sweep(ENGINE, rates, 2000 + 10 * seed, follows=0.0)
            at = common_host_s(a + b)
            one = [service_rate(side, host=HostAdjustment(at_host_s=at, exponent=-1.0)).rate for side in (a, b)]
            fixed.append(math.log(one[1] / one[0]))
        # a fixed -1 adds the host's whole swing; the fitted exponent (near 0, pulled a little toward the
        # prior's -0.5 by two rounds) adds a fraction of it
        assert np.std(fixed, ddof=1) > 1.5 * np.std(raw, ddof=1), (np.std(fixed), np.std(raw))
        assert np.std(held, ddof=1) < 0.3 * np.std(fixed, ddof=1), (np.std(held), np.std(fixed))


def test_a_host_swing_between_two_sweeps_takes_their_evidence_s_degree_of_freedom(rates):
    """The host 20% slower through all of the second sweep: its own difference is the one thing the fit can
    explain it with, so the floor keeps almost none of its pair's degree of freedom; a swing within the
    sweeps leaves most of it."""
    between = [
        _host_drifted_sweep(ENGINE, rates, 500, follows=-0.5, level=1.0),
        _host_drifted_sweep(ENGINE, rates, 501, follows=-0.5, level=1.2),
    ]
    within = [_host_drifted_sweep(ENGINE, rates, 500 + r, follows=-0.5) for r in (0, 1)]
    assert fit_elasticity(between).sweep_df > 0.8
    assert repeat_evidence(between, "service_rate").df < 0.2
    assert repeat_evidence(within, "service_rate").df > 2 * repeat_evidence(between, "service_rate").df
    adjusted = host_adjustment(between, between)
    assert adjusted is not None and adjusted.sweep_df == pytest.approx(fit_elasticity(between).sweep_df)


def test_the_verdict_states_its_rates_at_one_host_speed_and_a_comparison_is_adjusted_everywhere_or_nowhere(rates):
    a = [_host_drifted_sweep(ENGINE, rates, s) for s in (1, 2)]
    b = [_host_drifted_sweep(ENGINE, rates, s) for s in (3, 4)]
    host = common_host_s([st for sweep in a + b for st in sweep])
    assert host is not None and 0.7 * PASS_S < host < 1.3 * PASS_S
    stats = judge_service_rates(a, b)
    assert "common host speed" in stats.baseline and "common host speed" in stats.candidate
    # one step without a reading: nothing is adjusted, on either side
    b[0][1] = b[0][1].model_copy(update={"host_memory_pass_s": []})
    assert common_host_s([st for sweep in a + b for st in sweep]) is None
    stats = judge_service_rates(a, b)
    assert "common host speed" not in stats.baseline + stats.candidate
    # as measured, the rate is the engine's own; at a host speed it moves by the steps' readings
    as_measured = service_rate(a[0])
    at_host = service_rate(a[0], host=HostAdjustment(at_host_s=PASS_S, exponent=-0.5))
    factor = math.exp(0.5 * np.mean([math.log(step_host_s(st) / PASS_S) for st in a[0]]))
    assert at_host.rate == pytest.approx(as_measured.rate * factor, rel=0.02)


def test_a_floor_from_repeats_on_a_drifting_host_is_smaller_with_the_probe(rates):
    def evidence(probe: bool):
        sweeps = [_host_drifted_sweep(ENGINE, rates, 50 + s, probe=probe) for s in range(6)]
        return repeat_evidence(sweeps, "service_rate")

    with_probe, without = evidence(True), evidence(False)
    # the fit takes a little of the six repeats' 5 df (the host swings within the sweeps, mostly)
    assert without.df == 5 and 4 < with_probe.df < 5
    assert with_probe.sd < 0.7 * without.sd, (with_probe.sd, without.sd)


def test_the_probe_is_a_sweep_setting_of_the_service_rate_only():
    assert SweepSpec(estimator="service_rate", host_speed_probe=True).host_speed_probe
    with pytest.raises(ValueError, match="host_speed_probe adjusts the service rate only"):
        SweepSpec(estimator="crossing", host_speed_probe=True)


def test_a_candidate_of_one_sweep_takes_the_prior_not_its_baseline_s_exponent(rates):
    """One setting can move a configuration across the physical range (the reference -0.09, prefix caching
    -0.99): a candidate with no repeated schedule of its own takes the prior, the middle of that range with
    half of it as its error, not its baseline's exponent; with repeats it fits its own."""
    from loadgen.verdict import host_adjustments

    a = [_host_drifted_sweep(ENGINE, rates, 900 + r, follows=-1.0) for r in range(3)]
    one = [_host_drifted_sweep(ENGINE, rates, 950, follows=0.0)]
    ha, hb = host_adjustments(a, one)
    assert ha.exponent < -0.7 and hb.exponent == PRIOR_EXPONENT and hb.contrasts == 0
    assert hb.exponent_se == PRIOR_EXPONENT_SD and "the prior alone" in hb.describe()
    assert "the prior alone" in judge_service_rates(a, one).candidate
    several = [_host_drifted_sweep(ENGINE, rates, 960 + r, follows=0.0) for r in range(4)]
    assert host_adjustments(a, several)[1].exponent > -0.3


@pytest.mark.parametrize("candidate_follows", [0.0, -1.0])
def test_a_host_slower_only_during_a_one_sweep_candidate_moves_its_verdict_by_less_than_its_stated_error(
    rates, candidate_follows
):
    """The host 10% slower through the candidate's one sweep only, its baseline decode-bound (about -1). The
    candidate repeats no schedule, so its exponent is the prior's (-0.5 +- 0.5), half a host swing off
    whether it follows the host (-1) or not (0); borrowing the baseline's would be a whole swing off for the
    latter (one seed read +20%, its interval +1.7% to +41.7%). Over seeds, an A/A pair's verdict is never
    `better` or `worse`, its effect lies within its stated half-width of the truth (0), and that half-width
    carries the exponent's error."""
    prior_var, prior_df = 2 * 0.03**2, 4  # the default prior (loadgen.noise_prior)
    errors, widths, plain = [], [], []
    for seed in range(8):
        a = [_host_drifted_sweep(ENGINE, rates, 3000 + 10 * seed + r, follows=-1.0) for r in (0, 1)]
        b = [_host_drifted_sweep(ENGINE, rates, 4000 + 10 * seed, follows=candidate_follows, level=1.1)]
        stats = judge_service_rates(a, b, final=True, prior_var=prior_var, prior_df=prior_df)
        assert stats.verdict == "same", (seed, stats.sentence())
        assert stats.low < 0 < stats.high, (seed, stats.low, stats.high)
        errors.append(abs(stats.effect))
        widths.append((stats.high - stats.low) / 2)
        # what the exponent's error adds to the candidate's side
        hb = service_rate(b[0], host=host_adjustment(b, a + b))
        plain.append(hb.host_log_se)
    assert all(e < w for e, w in zip(errors, widths)), (errors, widths)
    # a 10% slower host for one sweep of three is ~6% from the common speed (the steps' own swing of 8%
    # moves it): with the prior's se of 0.5, about 3% of standard error on average
    assert float(np.mean(plain)) > 0.02, plain


def test_a_fitted_exponent_is_clipped_to_the_physical_range(rates):
    """A step slows at most as much as the host's memory and never speeds up on a slower host: a fit
    outside [-1, 0] (an engine planted to follow the host by -2, or by +1) is held at the bound."""
    from loadgen.host_elasticity import EXPONENT_RANGE

    for follows, bound in ((-2.0, EXPONENT_RANGE[0]), (1.0, EXPONENT_RANGE[1])):
        fit = fit_elasticity([_host_drifted_sweep(ENGINE, rates, 700 + r, follows=follows) for r in range(4)])
        assert fit.exponent == bound, (follows, fit)
