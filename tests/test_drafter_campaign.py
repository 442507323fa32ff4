"""A headless campaign meets a drafter someone trained: the proposer's drafter rule sends it to the
harness, and its verdict and the acceptance the engine counted reach the drafter's record.

No engine: the engine is test_gpu_cap's stand-in server (/health and greedy completions) and the sweeps
are stubs whose steps carry the spec-decode counters a vLLM engine would report. The memory is a real DuckDB file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specs.config import CampaignSpec
from specs.engine_args import parse_args
from helpers_drafter import decode_bound, drafter_record, write_config
from helpers_memory import memory_store
from research import drafter
from research.campaign import run_campaign
from research.drift import model_fingerprint
from research.proposals import Diagnosis, ProposalBatch
from research.state import StateStore
from test_campaign import pool, sweep
from test_gpu_cap import _endpoint


def _decode_bound(endpoint: str) -> dict:
    """Decode-bound at a small batch with predictable replies: the rule says a drafter would pay."""
    return decode_bound(endpoint, severity=0.8, at_cap_requests_running_mean=2.0).model_dump(mode="json")


def _speculating_sweep(engine, pool_, spec):
    """Capacity 3 req/s with the drafter, 2 without; its steps carry the engine's spec-decode counters."""
    drafting = "--speculative-config" in parse_args(engine.spec.engine.args)
    result = sweep(3.0 if drafting else 2.0, args=tuple(engine.spec.engine.args))
    for st in result.steps:
        st.engine_metrics = (
            {"spec_decode_draft_tokens_delta": 90.0, "spec_decode_accepted_tokens_delta": 60.0} if drafting else {}
        )
    return result


def test_a_campaign_judges_a_fresh_drafter_and_records_the_verdict_on_it(tmp_path: Path):
    endpoint = _endpoint(tmp_path)
    write_config(tmp_path / "model")  # SmolLM2-135M
    draft = write_config(tmp_path / "draft", num_hidden_layers=4)
    memory = memory_store(tmp_path)
    trained = drafter_record(
        endpoint=endpoint.name,
        model_signature=model_fingerprint(endpoint),
        data_signature="d",
        path=str(draft),
        heldout_examples=0,
        train_s=100.0,
        train={"draft_cost_ratio": 0.31},
        acceptance_offline={"acceptance_length": 2.3, "accepted_per_position": [0.6, 0.4, 0.3]},
    )
    memory.record_drafter(trained)
    campaign = CampaignSpec(
        name="draft",
        endpoint=endpoint.name,
        subagents=2,
        repeats=2,
        max_rounds=1,
        proposer="rules",
        deadline_minutes=30,
        gpu_hours=5,
        extra_repeats=0,
    )
    lines: list[str] = []
    outcome = run_campaign(
        campaign,
        endpoint,
        state_dir=tmp_path / "state",
        memory=memory,
        pool=pool(),
        sweep_fn=_speculating_sweep,
        diagnose_fn=lambda *a: _decode_bound(endpoint.name),
        progress=lines.append,
    )
    assert outcome.finished, "\n".join(lines[-20:])

    state = StateStore(tmp_path / "state", "draft").load()
    runs = [e for e in state.experiments.values() if e.kind == "candidate" and "--speculative-config" in e.diff]
    (run,) = [e for e in runs if json.loads(e.diff["--speculative-config"]).get("model") == str(draft)]
    assert run.verdict == "better", (run.verdict, run.invalid_reason)  # 3 req/s against 2, beyond the noise
    (judged,) = memory.drafters(endpoint.name)
    assert judged.drafter_id == trained.drafter_id and judged.verdict == run.verdict
    assert judged.acceptance_served["acceptance_rate"] == pytest.approx(60 / 90, abs=1e-3)
    assert judged.acceptance_served["acceptance_length"] == pytest.approx(1 + 3 * 60 / 90, abs=1e-3)
    recorded = memory.query("select technique, verdict from v_experiments where technique = 'trained_drafter'")
    assert list(recorded["verdict"]) == [run.verdict]
    # judged once: the next campaign does not propose it again, it suggests training a new one instead
    batch = drafter.propose_drafter(
        endpoint,
        Diagnosis.model_validate(_decode_bound(endpoint.name)),
        ProposalBatch(source="rules"),
        n=2,
        memory=memory,
    )
    assert batch.proposals == [] and batch.drafter is not None
