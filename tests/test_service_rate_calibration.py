"""benchmarks/service_rate_calibration.py recovers how honest a known own error is, over several seeds."""

import importlib.util
import math
from pathlib import Path

import numpy as np

from loadgen.results import StepResult

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "service_rate_calibration.py"
_spec = importlib.util.spec_from_file_location("service_rate_calibration", _path)
calibration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calibration)

LAM, MU = 1.4, 0.7  # one queued step a sweep, the service rate it reads


def _sweep(rng, own_se: float, true_sd: float) -> list[StepResult]:
    """One sweep whose service rate is off by N(0, true_sd) in log, and whose slope's interval claims own_se."""
    mu = MU * math.exp(rng.normal(0, true_sd))
    k = LAM / mu - 1
    half = 1.96 * own_se * (1 + k)
    latency = {"p50": 1.0, "p95": 2.0, "p99": 3.0, "mean": 1.0}
    return [
        StepResult(
            target_rate=LAM,
            achieved_rate=LAM,
            throughput_rps=mu,
            duration_s=24.0,
            requests=34,
            errors=0,
            error_rate=0.0,
            ttft_ms=latency,
            itl_ms=latency,
            e2e_ms=latency,
            send_lag_ms=latency,
            within_sla=False,
            ttft_growth={"slope": k, "low": k - half, "high": k + half, "n": 34.0},
        )
    ]


def _ratio(seed: int, own_se: float, true_sd: float, groups: int = 30) -> dict:
    rng = np.random.default_rng(seed)
    found = calibration.calibrate({f"g{i}": [_sweep(rng, own_se, true_sd) for _ in range(2)] for i in range(groups)})
    return found["classes"]["all"]


def test_an_honest_own_error_reads_about_one():
    covered = 0
    for seed in range(10):
        c = _ratio(seed, 0.04, 0.04)
        assert c["df"] == 30
        assert 0.6 < c["sd_ratio"] < 1.5
        covered += c["sd_ratio_low"] <= 1.0 <= c["sd_ratio_high"]
    assert covered >= 8  # a 95% interval


def test_an_own_error_that_overstates_the_repeats_reads_under_one():
    for seed in range(10):
        c = _ratio(seed, 0.04, 0.015)
        assert c["sd_ratio_high"] < 1.0  # the interval excludes honesty
        assert c["sd_ratio_low"] < 0.375 < c["sd_ratio_high"] * 1.2


def test_an_own_error_that_understates_the_repeats_reads_over_one():
    for seed in range(10):
        assert _ratio(seed, 0.015, 0.04)["sd_ratio_low"] > 1.0


def test_a_configuration_swept_once_is_no_evidence():
    rng = np.random.default_rng(0)
    found = calibration.calibrate({"once": [_sweep(rng, 0.04, 0.04)], "twice": [_sweep(rng, 0.04, 0.04)] * 2})
    assert [g["group"] for g in found["groups"]] == ["twice"]
    assert found["classes"]["all"]["df"] == 1
