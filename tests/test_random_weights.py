"""An endpoint of random weights (``model.weights: random``, an engine's dummy loader): its throughput is real, its
output quality is not. A lossy change there is measured, flagged with that reason, and never adopted by itself."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from loadgen.results import NoiseFloor
from research.campaign.adoption import Adoption
from research.campaign.context import CampaignContext
from research.correctness import RANDOM_WEIGHTS_REVIEW, CorrectnessReport, unmeasurable_quality
from research.state import BaselineRecord, CampaignState, ExperimentState, RoundRecord, StateStore


def test_the_gpu_endpoint_declares_random_weights_of_an_8b_shape(definitions) -> None:
    spec = definitions.endpoint("chat_llama8b_vllm")
    assert spec.model.weights == "random"
    assert spec.engine.kind == "vllm" and spec.engine.args[:2] == ["--load-format", "dummy"]
    assert definitions.endpoint("support_smollm").model.weights == "trained"


def test_a_lossy_check_on_random_weights_neither_passes_nor_fails_the_change() -> None:
    failed = CorrectnessReport(
        mode="lossy",
        passed=False,
        lossless_equivalent=False,
        float32=False,
        flag_for_review=True,
        reason="mean KL 2.31 > 0.05",
        greedy_identical=0,
        greedy_total=8,
    )
    kept = unmeasurable_quality(failed)
    assert kept.passed and kept.flag_for_review  # measured, not refused on a meaningless distance
    assert kept.reason.startswith(RANDOM_WEIGHTS_REVIEW) and "mean KL 2.31" in kept.reason  # the distances stay


def _settle(tmp_path: Path, definitions, weights: str) -> tuple[RoundRecord, CampaignState]:
    """One round whose only confirmed win is lossy, settled by the campaign's own adoption step."""
    spec = definitions.endpoint("support_smollm")
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"weights": weights})})
    campaign = definitions.campaign_of("support_smollm")
    noise = NoiseFloor(repeats=2, capacities=[1.0, 1.0], capacity_mean=1.0, capacity_std=0.0, capacity_rel_spread=0.0)
    working = BaselineRecord(engine_args=list(spec.engine.args), sweeps=[], noise=noise)
    lossy = ExperimentState(
        experiment_id="r1-kv-fp8",
        round=1,
        proposal_ids=["p1"],
        title="KV cache in fp8",
        baseline_args=list(spec.engine.args),
        engine_args=[*spec.engine.args, "--kv-cache-dtype", "fp8"],
        diff={"--kv-cache-dtype": "fp8"},
        lossy=True,
        verdict="better",
        confirmed=True,
    )
    rnd = RoundRecord(round=1, baseline_args=list(spec.engine.args), experiment_ids=[lossy.experiment_id])
    state = CampaignState(campaign=campaign.name, campaign_id="c1", endpoint=spec.name, working=working)
    state.experiments[lossy.experiment_id] = lossy
    state.rounds.append(rnd)
    pool = pl.DataFrame({"prompt_tokens": [100], "expected_output_tokens": [20], "prefix_group": [0]})
    store = StateStore(tmp_path, campaign.name)
    ctx = CampaignContext(campaign, spec, tmp_path, store, state, pool, lambda line: None)
    Adoption(ctx, None, None, None, None).settle(rnd, working, measure=False)
    return rnd, state


def test_a_lossy_win_on_random_weights_is_not_adopted_and_says_why(tmp_path: Path, definitions) -> None:
    rnd, state = _settle(tmp_path / "random", definitions, "random")
    assert rnd.adopted is None and state.working.engine_args == rnd.baseline_args
    assert any(RANDOM_WEIGHTS_REVIEW in q for q in state.open_questions), state.open_questions
    # the same win on trained weights is still not adopted by itself, for the general reason
    rnd, state = _settle(tmp_path / "trained", definitions, "trained")
    assert rnd.adopted is None
    assert state.open_questions and not any(RANDOM_WEIGHTS_REVIEW in q for q in state.open_questions)
