"""Interventions are validated before anything runs; the rule-based proposer maps evidence to changes."""

from __future__ import annotations

import json

import pytest

from specs.engine_args import REMOVE, apply_diff
from research import rules
from research.interventions import validate_intervention
from research.llm_agents import LLMConfig, Orchestrator, SubagentContext, WireProposal, check_proposal, strict_schema
from research.proposals import Bottleneck, Diagnosis, Intervention, Proposal, RejectedProposal

BASE = ["--max-num-seqs", "2", "--max-model-len", "2048", "--enforce-eager", "--no-enable-prefix-caching"]


def check(diff, base=BASE, kind="vllm", gpus=0, **kw):
    return validate_intervention(Intervention(technique="t", engine_arg_diff=diff, **kw), base, kind, gpu_count=gpus)


@pytest.mark.parametrize(
    "diff,reason",
    [
        ({"--max-num-seqs": "-3"}, "--max-num-seqs must be >= 1"),
        ({"--max-num-seqs": "lots"}, "must be an integer"),
        ({"--max-num-seqs": None}, "needs an integer"),
        ({"--frobnicate-the-cache": "yes"}, "not a known vllm argument"),
        ({"--gpu-memory-utilization": "1.7"}, "must be in (0.0, 1.0]"),
        ({"--kv-cache-dtype": "int3"}, "must be one of"),
        ({"--speculative-config": "{ngram"}, "must be a JSON object"),
        ({"--speculative-config": '{"method": "telepathy"}'}, "method must be one of"),
        ({"--enable-prefix-caching": "yes"}, "is a switch and takes no value"),
        ({"--tensor-parallel-size": "4"}, "exceeds the 1 device"),
        ({"--port": "9000"}, "set by the vllm adapter itself"),
        ({"max num seqs": "8"}, "not a well-formed engine flag"),
        ({}, "changes nothing"),
    ],
)
def test_nonsensical_interventions_are_rejected_with_the_reason(diff, reason):
    result = check(diff)
    assert not result.ok
    assert any(reason in r for r in result.reasons), result.reasons


def test_sensible_interventions_pass_and_are_normalised():
    result = check({"--max-num-seqs": "16"})
    assert result.ok and result.args_after[:2] == ["--max-num-seqs", "16"]
    # Turning prefix caching on drops the --no- twin instead of failing on the conflict.
    result = check({"--enable-prefix-caching": None})
    assert result.ok, result.reasons
    assert "--no-enable-prefix-caching" not in result.args_after and "--enable-prefix-caching" in result.args_after
    assert result.diff["--no-enable-prefix-caching"] == REMOVE
    spec = json.dumps(rules.NGRAM_CONFIG)
    assert check({"--speculative-config": spec}).ok
    assert check({"--tensor-parallel-size": "2"}, gpus=2).ok
    lossy = check({"--kv-cache-dtype": "fp8"})
    assert lossy.ok and lossy.lossy  # quantising the KV cache changes outputs even if not declared lossy


def test_conflicting_and_unlaunchable_combinations_are_rejected():
    result = check({"--no-enable-chunked-prefill": None, "--max-num-batched-tokens": "512"})
    assert not result.ok and any("needs chunked prefill" in r for r in result.reasons)
    result = check({"--max-num-batched-tokens": "16", "--max-num-seqs": "64"})
    assert not result.ok and any("below --max-num-seqs" in r for r in result.reasons)


def test_patches_must_be_unified_diffs():
    bad = check({}, engine_patch="please make it faster")
    assert not bad.ok and any("not a unified diff" in r for r in bad.reasons)
    patch = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    assert check({}, engine_patch=patch).ok


def _smollm_diagnosis(**engine_stats) -> Diagnosis:
    """What diagnosis says about the embedded default: queue at the limit, prefix reuse, no cache hits."""
    return Diagnosis(
        endpoint="support_smollm",
        engine_kind="vllm",
        engine_args=BASE,
        bottlenecks=[
            Bottleneck(name="batch_limit", severity=0.9, evidence=["queue builds while running == --max-num-seqs 2"]),
            Bottleneck(name="prefix_cache_unused", severity=0.8, evidence=["91% prefix reuse, hit rate 0%"]),
        ],
        request_stats={"prefix_reuse": 0.91, "decode_share": 0.08},
        engine_stats={"over_requests_running_mean": 2.0, "over_requests_waiting_mean": 9.0, **engine_stats},
    )


def test_rules_propose_the_capacity_changes_for_the_embedded_default():
    proposals = rules.propose(_smollm_diagnosis(), 3)
    assert [p.bottleneck for p in proposals][:2] == ["batch_limit", "prefix_cache_unused"]
    first, second = proposals[0], proposals[1]
    assert first.intervention.technique == "raise_max_num_seqs"
    assert int(first.intervention.engine_arg_diff["--max-num-seqs"]) >= 8
    assert first.predicted_capacity_ratio and first.predicted_capacity_ratio > 1
    assert second.intervention.engine_arg_diff == {
        "--enable-prefix-caching": None,
        "--no-enable-prefix-caching": REMOVE,
    }
    assert len({p.intervention.technique for p in proposals}) == len(proposals) == 3
    for p in proposals:
        assert p.source == "rules" and p.explanation and p.prediction and p.falsification and p.observations
        args = apply_diff(BASE, p.intervention.engine_arg_diff)
        assert validate_intervention(p.intervention, BASE, "vllm", gpu_count=0).ok, args


def test_batch_limit_target_follows_client_side_concurrency_when_engine_gauges_read_zero():
    """vLLM's CPU build often samples running/waiting as 0; rate x latency still shows the demand."""
    diagnosis = _smollm_diagnosis(
        over_requests_running_mean=0.0, over_requests_waiting_mean=0.0, over_in_flight_mean=6.3
    )
    first = rules.propose(diagnosis, 1)[0]
    assert first.intervention.engine_arg_diff == {"--max-num-seqs": "8"}
    assert first.predicted_capacity_ratio and first.predicted_capacity_ratio > 1


def test_rules_skip_what_was_already_tried():
    proposals = rules.propose(_smollm_diagnosis(), 3, skip=["raise_max_num_seqs", "enable_prefix_caching"])
    techniques = [p.intervention.technique for p in proposals]
    assert "raise_max_num_seqs" not in techniques and "enable_prefix_caching" not in techniques
    assert techniques  # the batch-limit bottleneck still has an alternative (token budget)


@pytest.mark.parametrize(
    "bottleneck,technique,flag",
    [
        ("prefill_interference", "chunked_prefill", "--max-num-batched-tokens"),
        ("decode_bound", "ngram_speculative_decoding", "--speculative-config"),
        ("kv_cache_pressure", "more_kv_cache_memory", "--kv-cache-memory-bytes"),
        ("cpu_overhead", "async_scheduling", "--async-scheduling"),
    ],
)
def test_each_signature_maps_to_a_known_technique(bottleneck, technique, flag):
    diagnosis = Diagnosis(
        endpoint="e",
        engine_kind="vllm",
        engine_args=["--max-model-len", "2048"],
        bottlenecks=[Bottleneck(name=bottleneck, severity=0.7, evidence=["x"])],
    )
    [proposal] = rules.propose(diagnosis, 1)
    assert proposal.intervention.technique == technique
    assert flag in proposal.intervention.engine_arg_diff


def test_rules_speak_each_engines_flags():
    diagnosis = Diagnosis(
        endpoint="e",
        engine_kind="sglang",
        engine_args=["--disable-radix-cache"],
        bottlenecks=[
            Bottleneck(name="prefix_cache_unused", severity=0.7, evidence=["x"]),
            Bottleneck(name="batch_limit", severity=0.6, evidence=["y"]),
        ],
        request_stats={"prefix_reuse": 0.5},
    )
    proposals = rules.propose(diagnosis, 2, gpu_count=1)
    diffs = [p.intervention.engine_arg_diff for p in proposals]
    assert {"--disable-radix-cache": REMOVE} in diffs
    assert any("--max-running-requests" in d for d in diffs)


def test_orchestrator_without_a_model_uses_rules():
    assert LLMConfig.from_env({}) is None
    assert LLMConfig.from_env({"AUTORESEARCH_LLM_MODEL": "m", "AUTORESEARCH_LLM_BASE_URL": "http://127.0.0.1:1/v1"})
    config = LLMConfig.from_env({"AUTORESEARCH_LLM_MODEL": "m", "OPENAI_API_KEY": "sk-secret-value"})
    assert config.api_key == "sk-secret-value" and "sk-secret-value" not in repr(config)
    orchestrator = Orchestrator(None)
    context = SubagentContext(
        campaign_id="c", experiment_id="e", replay_pool_id="p", engine_kind="vllm", engine_args=BASE
    )
    batch = orchestrator.propose(_smollm_diagnosis(), context, 2)
    assert batch.source == "rules" and len(batch.proposals) == 2 and len(batch.questions) == 2
    with pytest.raises(Exception, match="AUTORESEARCH_LLM_MODEL"):
        Orchestrator(None, mode="llm")


def test_check_proposal_rejects_nonsense_before_it_runs():
    context = SubagentContext(
        campaign_id="c", experiment_id="e", replay_pool_id="p", engine_kind="vllm", engine_args=BASE
    )
    nonsense = Proposal(
        proposal_id="x",
        question="q",
        bottleneck="batch_limit",
        explanation="e",
        intervention=Intervention(technique="more", engine_arg_diff={"--max-num-seqs": "-5"}),
        alternatives=[
            Intervention(technique="alt", engine_arg_diff={"--bogus": "1"}),
            Intervention(technique="alt2", engine_arg_diff={"--max-num-seqs": "8"}),
        ],
        prediction="p",
        falsification="f",
        source="llm",
    )
    rejected = check_proposal(nonsense, context)
    assert isinstance(rejected, RejectedProposal) and "--max-num-seqs must be >= 1 (got -5)" in rejected.reasons
    fixed = nonsense.model_copy(
        update={"intervention": Intervention(technique="more", engine_arg_diff={"--max-num-seqs": "16"})}
    )
    accepted = check_proposal(fixed, context)
    assert isinstance(accepted, Proposal)
    assert [a.technique for a in accepted.alternatives] == ["alt2"]  # the invalid alternative is dropped


def test_strict_schema_is_closed_and_pins_flags():
    schema = strict_schema(WireProposal, {"flag": ["--max-num-seqs", "--enable-prefix-caching"]})
    assert "$defs" not in json.dumps(schema) and "$ref" not in json.dumps(schema)

    def objects(node):
        if isinstance(node, dict):
            if node.get("type") == "object":
                yield node
            for v in node.values():
                yield from objects(v)
        elif isinstance(node, list):
            for v in node:
                yield from objects(v)

    for obj in objects(schema):
        assert obj["additionalProperties"] is False and set(obj["required"]) == set(obj["properties"])
    change = schema["properties"]["intervention"]["properties"]["changes"]["items"]
    assert change["properties"]["flag"]["enum"] == ["--max-num-seqs", "--enable-prefix-caching"]
