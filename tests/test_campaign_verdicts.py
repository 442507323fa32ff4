"""benchmarks/campaign_verdicts.py: its "own" rule judges as before matched steps, and leaves the product's rule
in place afterwards, on the simulated engine's queued steps."""

import importlib.util
from pathlib import Path

import numpy as np

from loadgen import noise_prior, queue_rate, simengine, verdict
from specs.config import SLASpec

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "campaign_verdicts.py"
_spec = importlib.util.spec_from_file_location("campaign_verdicts", _path)
campaign_verdicts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(campaign_verdicts)

SLA = SLASpec(ttft_ms=300, itl_ms=50, max_error_rate=0.01)
RNG = np.random.default_rng(5)
PROMPTS = RNG.integers(100, 600, 500)
OUTPUTS = RNG.integers(8, 17, 500)
MODEL = simengine.ServiceModel(max_batch=2, prefill_ms_per_token=1.0, decode_base_ms=20, run_jitter_cv=0.02)


def _sweep(run: int):
    start = MODEL.started(run)
    return [
        simengine.virtual_step(start, r, 12.0, PROMPTS, OUTPUTS, SLA, seed=int(r * 100), run_seed=run) for r in (3, 4)
    ]


def test_the_own_rule_disables_matched_steps_and_restores_them():
    rounds = [_sweep(1), _sweep(2)]
    assert queue_rate.matched_steps(rounds) is not None
    with campaign_verdicts.rule("own"):
        assert all(m.matched_steps(rounds) is None for m in (queue_rate, noise_prior, verdict))
        own = verdict.judge_service_rates(rounds[:1], rounds[1:], final=True, prior_var=0.03**2, prior_df=4)
    matched = verdict.judge_service_rates(rounds[:1], rounds[1:], final=True, prior_var=0.03**2, prior_df=4)
    assert all(m.matched_steps is queue_rate.matched_steps for m in (noise_prior, verdict))
    assert "matched" in matched.candidate and "matched" not in own.candidate
    assert matched.se_bootstrap == 0.0 < own.se_bootstrap
    with campaign_verdicts.rule("matched"):  # the product's rule: nothing replaced
        assert verdict.matched_steps is queue_rate.matched_steps
