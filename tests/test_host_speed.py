"""Service rates compared at a common host speed (loadgen.host_speed, loadgen.queue_rate.common_host_s).

On the simulated engine of known service rate, each step's host is planted: a slower host stretches every
service time of that step, and the step records the host's memory-pass time as the probe would. The
drift then leaves the judged difference, and a planted gain is still found at its size.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specs.config import SLASpec, SweepSpec
from loadgen import simengine
from loadgen.noise_prior import repeat_evidence
from loadgen.queue_rate import common_host_s, service_rate, step_host_s
from loadgen.results import StepResult
from loadgen.verdict import judge_service_rates, service_rate_differences

SLA = SLASpec(ttft_ms=300, itl_ms=50, max_error_rate=0.01)
RNG = np.random.default_rng(5)
PROMPTS = RNG.lognormal(math.log(300), 0.6, 2000).astype(int) + 8
OUTPUTS = RNG.integers(16, 65, 2000)
ENGINE = simengine.ServiceModel()
HOST_CV = 0.08  # the host's speed from step to step (the vLLM CPU steps' was 6-7%)
PASS_S = 1.0e-3  # one memory pass on the nominal host


def _host_drifted_sweep(model, rates, seed: int, *, probe: bool = True) -> list[StepResult]:
    """One sweep whose every step runs on a host slower or faster by a drawn factor; the step records
    that host's memory-pass time twice (before and after it, with 1% reading noise) unless ``probe`` is off."""
    rng = np.random.default_rng(seed)
    steps = []
    for k, rate in enumerate(rates):
        slow = float(rng.lognormal(0.0, HOST_CV))
        step = simengine.virtual_step(
            model.planted(1 / slow - 1), rate, 8.0, PROMPTS, OUTPUTS, SLA, seed=int(rate * 100) + k, run_seed=seed + k
        )
        readings = [PASS_S * slow * float(rng.lognormal(0.0, 0.01)) for _ in range(2)] if probe else []
        steps.append(step.model_copy(update={"host_memory_pass_s": readings}))
    return steps


@pytest.fixture(scope="module")
def rates() -> list[float]:
    served = simengine.virtual_step(ENGINE, 90.0, 60.0, PROMPTS, OUTPUTS, SLA, seed=1, run_seed=1).throughput_rps
    return [served * f for f in (1.3, 1.6, 1.9)]


def _differences(effect: float, seeds, rates, probe: bool) -> list[float]:
    out = []
    for seed in seeds:
        a = _host_drifted_sweep(ENGINE, rates, 1000 + seed, probe=probe)
        b = _host_drifted_sweep(ENGINE.planted(effect), rates, 2000 + seed, probe=probe)
        out += service_rate_differences([a], [b])
    return out


def test_the_host_drift_leaves_the_difference_and_a_planted_gain_keeps_its_size(rates):
    seeds = range(12)
    raw = _differences(0.0, seeds, rates, probe=False)
    held = _differences(0.0, seeds, rates, probe=True)
    assert len(raw) == len(held) == len(seeds)
    # three steps' drift of 8% each reach a sweep as ~4.6%, a pair's difference as ~6.5%; the probe removes
    # most of it (what is left is the engine's own jitter and the readings' 1%)
    assert np.std(held, ddof=1) < 0.6 * np.std(raw, ddof=1), (np.std(held), np.std(raw))
    gained = _differences(0.10, seeds, rates, probe=True)
    assert abs(float(np.mean(gained)) - math.log(1.10)) < 0.03, np.mean(gained)


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
    at_host = service_rate(a[0], at_host_s=PASS_S)
    factor = math.exp(np.mean([math.log(step_host_s(st) / PASS_S) for st in a[0]]))
    assert at_host.rate == pytest.approx(as_measured.rate * factor, rel=0.02)


def test_a_floor_from_repeats_on_a_drifting_host_is_smaller_with_the_probe(rates):
    def evidence(probe: bool):
        sweeps = [_host_drifted_sweep(ENGINE, rates, 50 + s, probe=probe) for s in range(6)]
        return repeat_evidence(sweeps, "service_rate")

    with_probe, without = evidence(True), evidence(False)
    assert with_probe.df == without.df == 5
    assert with_probe.sum_sq < 0.5 * without.sum_sq, (with_probe.sum_sq, without.sum_sq)


def test_the_probe_is_a_sweep_setting_of_the_service_rate_only():
    assert SweepSpec(estimator="service_rate", host_speed_probe=True).host_speed_probe
    with pytest.raises(ValueError, match="host_speed_probe adjusts the service rate only"):
        SweepSpec(estimator="crossing", host_speed_probe=True)
