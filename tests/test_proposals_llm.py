"""The LLM path against a real OpenAI-compatible server: vLLM CPU serving SmolLM2-135M.

SmolLM2-135M is far too small to reason about serving; what this proves is the plumbing: the
orchestrator and concurrent subagents get schema-valid structured answers (json_schema, strict,
enforced by xgrammar), every answer is validated, and nonsense is rejected before anything runs.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from research.interventions import known_flags_for
from research.llm_agents import (
    LLMConfig,
    Orchestrator,
    SubagentContext,
    WireIntervention,
    WireProposal,
    _to_intervention,
    check_proposal,
)
from research.proposals import Bottleneck, Diagnosis, Proposal, RejectedProposal

pytestmark = pytest.mark.engine

ARGS = ["--max-num-seqs", "2", "--max-model-len", "2048", "--enforce-eager", "--no-enable-prefix-caching"]
# The agent server: SmolLM2 with compact JSON (xgrammar otherwise lets a tiny model pad answers
# with newlines until max_tokens) and room for three concurrent subagents.
AGENT_ARGS = [
    "--max-num-seqs",
    "4",
    "--max-model-len",
    "2048",
    "--enforce-eager",
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
]


@pytest.fixture
def agent_engine(engine_slot, definitions):
    return engine_slot.get(definitions.endpoint("support_smollm"), AGENT_ARGS)


class RecordingClient:
    """The real openai client, with the start/end time of every completion call recorded."""

    def __init__(self, client):
        self._client = client
        self.calls: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self.chat = self
        self.completions = self

    def create(self, **kwargs):
        start = time.monotonic()
        try:
            return self._client.chat.completions.create(**kwargs)
        finally:
            with self._lock:
                self.calls.append((start, time.monotonic()))


def test_concurrent_subagents_return_schema_valid_validated_proposals(agent_engine, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_LLM_BASE_URL", agent_engine.base_url + "/v1")
    monkeypatch.setenv("AUTORESEARCH_LLM_MODEL", agent_engine.served_model)
    monkeypatch.delenv("AUTORESEARCH_LLM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = LLMConfig.from_env()
    assert config is not None and config.model == agent_engine.served_model
    # Short text fields keep a 135M model's answers inside max_tokens on two shared cores.
    config = dataclasses.replace(config, max_text_chars=40, max_tokens=1400, temperature=0.0, timeout_s=600)
    client = RecordingClient(config.client())
    orchestrator = Orchestrator(config, mode="llm", client=client)

    diagnosis = Diagnosis(
        endpoint="support_smollm",
        engine_kind="vllm",
        engine_args=ARGS,
        bottlenecks=[
            Bottleneck(name="batch_limit", severity=0.9, evidence=["9 requests wait while 2 run (--max-num-seqs 2)"]),
            Bottleneck(name="prefix_cache_unused", severity=0.8, evidence=["91% prefix reuse, cache off"]),
            Bottleneck(name="decode_bound", severity=0.4, evidence=["decode is 70% of e2e latency"]),
        ],
        traits={"prefix_reuse": 0.91, "decode_share": 0.08},
    )
    context = SubagentContext(
        campaign_id="support_smollm_default",
        experiment_id="round-1",
        replay_pool_id="pool-abc",
        sla={"ttft_ms": 2000, "itl_ms": 250},
        baseline={"capacity_rps": 0.5},
        engine_kind="vllm",
        engine_args=ARGS,
        gpu_count=0,
    )
    questions = orchestrator.questions(diagnosis, 3)
    assert sorted(q.bottleneck for q in questions) == ["batch_limit", "decode_bound", "prefix_cache_unused"]
    client.calls.clear()

    batch = orchestrator.run_subagents(questions, diagnosis, context)

    answers = batch.proposals + batch.rejected
    print(
        f"subagents: {len(batch.proposals)} accepted, {len(batch.rejected)} rejected:",
        [r.reasons[:2] for r in batch.rejected],
        [p.intervention.describe() for p in batch.proposals],
    )
    assert batch.source == "llm" and len(answers) == 3
    # The three subagents ran at the same time (overlapping calls), not one after another.
    assert len(client.calls) == 3
    latest_start = max(s for s, _ in client.calls)
    earliest_end = min(e for _, e in client.calls)
    assert latest_start < earliest_end
    known = known_flags_for("vllm")
    for answer in answers:
        if isinstance(answer, RejectedProposal):
            # Only semantic validation may reject: the model's output itself was schema-valid JSON.
            assert answer.proposal is not None, answer.reasons
            assert not any("model call failed" in r for r in answer.reasons)
            proposal = answer.proposal
        else:
            proposal = answer
        assert isinstance(proposal, Proposal) and proposal.source == "llm"
        assert proposal.proposal_id.startswith("llm-round-1-")
        assert set(proposal.intervention.engine_arg_diff) <= known  # flags pinned by the schema
        assert isinstance(proposal.explanation, str) and isinstance(proposal.falsification, str)
    for question in batch.questions:  # every subagent got the explicit context
        assert question.context["replay_pool_id"] == "pool-abc" and question.context["engine_args"] == ARGS

    # A nonsensical intervention in the same wire format is rejected before anything runs.
    nonsense = WireProposal(
        explanation="x",
        observations=[],
        prediction="p",
        predicted_capacity_ratio=None,
        falsification="f",
        intervention=WireIntervention(
            technique="t", changes=[{"flag": "--max-num-seqs", "value": "-1"}], engine_patch=None, lossy=False
        ),
        alternatives=[],
    )
    proposal = Proposal(
        proposal_id="n",
        question="q",
        bottleneck="batch_limit",
        explanation=nonsense.explanation,
        intervention=_to_intervention(nonsense.intervention),
        prediction="p",
        falsification="f",
        source="llm",
    )
    verdict = check_proposal(proposal, context)
    assert isinstance(verdict, RejectedProposal) and any("--max-num-seqs must be >= 1" in r for r in verdict.reasons)
    agent_engine.check_alive()  # the engine under test was never touched by the rejected change
