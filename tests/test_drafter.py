"""The drafter's pure parts: vLLM's spec-decode counters, the candidate's arguments, the break-even
model, the proposer rule and the drafter records in the research memory (no engine, no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers_drafter import decode_bound, drafter_record, write_config
from helpers_memory import memory_store
from memory_db import DrafterRecord
from research import drafter
from research.proposals import Diagnosis
from research.rules import drafter_training

METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 191.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 573.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 0.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_spec_decode_counters_are_read_per_position():
    from engines.vllm import VllmAdapter

    got = VllmAdapter.speculative_counters(METRICS)
    assert got == {
        "num_drafts": 191.0,
        "num_draft_tokens": 573.0,
        "num_accepted_tokens": 5.0,
        "accepted_pos0": 4.0,
        "accepted_pos1": 1.0,
        "accepted_pos2": 0.0,
    }


def test_served_acceptance_accumulates_deltas_over_sweeps():
    served = drafter.ServedAcceptance()
    zero = {
        "num_drafts": 0.0,
        "num_draft_tokens": 0.0,
        "num_accepted_tokens": 0.0,
        "accepted_pos0": 0.0,
        "accepted_pos1": 0.0,
    }
    first = {
        "num_drafts": 10.0,
        "num_draft_tokens": 20.0,
        "num_accepted_tokens": 12.0,
        "accepted_pos0": 8.0,
        "accepted_pos1": 4.0,
    }
    second = {
        "num_drafts": 30.0,
        "num_draft_tokens": 60.0,
        "num_accepted_tokens": 22.0,
        "accepted_pos0": 16.0,
        "accepted_pos1": 6.0,
    }
    served.add(zero, first)
    served.add(first, second)
    assert served.drafts == 30 and served.accepted_tokens == 22
    assert served.accepted_per_position == pytest.approx([16 / 30, 6 / 30])
    assert served.acceptance_length == pytest.approx(1 + 22 / 30)


def test_candidate_args_replace_any_earlier_speculation(tmp_path):
    args = ["--max-num-seqs", "2", "--speculative-config", '{"method":"ngram"}', "--enforce-eager"]
    out = drafter.candidate_args(args, tmp_path / "d", 3, "vllm")
    assert out[:3] == ["--max-num-seqs", "2", "--enforce-eager"]
    assert out[3] == "--speculative-config"
    assert json.loads(out[4]) == {"method": "draft_model", "model": str(tmp_path / "d"), "num_speculative_tokens": 3}


def test_break_even_and_draft_cost_follow_the_bytes_read(tmp_path):
    write_config(tmp_path)  # SmolLM2-135M
    cost = drafter.draft_cost_ratio(tmp_path, draft_layers=4)
    assert 0.25 < cost < 0.35  # SmolLM2-135M: the head is a fifth of the bytes, 4 of 30 layers the rest
    assert drafter.draft_cost_ratio(tmp_path, draft_layers=30) == pytest.approx(1.0)
    assert drafter.break_even_acceptance(3, cost) == pytest.approx(3 * cost + 1.0)


def test_rule_proposes_training_with_the_acceptance_that_pays_off():
    s = drafter_training(
        decode_bound(at_cap_requests_running_mean=2.0, spec_decode_acceptance_rate=0.5),
        k=3,
        draft_cost_ratio=0.3,
        gpu_count=1,
    )
    assert s is not None and s.command == "autoresearch drafter train ep --k 3"
    assert s.ngram_acceptance_length == pytest.approx(2.5)
    assert s.break_even_acceptance_length == pytest.approx(0.9 + s.verify_cost)
    assert 1.0 < s.verify_cost < 1.1


def test_rule_stays_silent_when_drafting_cannot_pay():
    # n-gram drafts were mostly rejected: the traffic is not predictable enough
    assert drafter_training(decode_bound(spec_decode_acceptance_rate=0.1), gpu_count=1) is None
    # a batch this large is compute-bound: verification costs k+1 steps
    assert drafter_training(decode_bound(at_cap_requests_running_mean=200.0), gpu_count=1) is None
    # decode steps 20x their bandwidth bound (a CPU host): a draft step costs nearly a target step
    why: list[str] = []
    assert drafter_training(decode_bound(roofline_ratio=20.0), k=3, gpu_count=0, why_not=why) is None
    assert why and "beyond the 4 a round can yield" in why[0]
    # no decode bottleneck at all
    assert drafter_training(Diagnosis(endpoint="ep", engine_kind="vllm")) is None


def test_drafters_are_recorded_and_marked_stale_when_the_model_drifts(store):
    rec = drafter_record(
        endpoint="ep",
        model_signature="m1",
        acceptance_offline={"acceptance_length": 1.8, "accepted_per_position": [0.5, 0.2, 0.1]},
    )
    store.record_drafter(rec)
    assert store.mark_drafters_stale("ep", "m1") == []
    assert store.mark_drafters_stale("ep", "m2") == [rec.drafter_id]
    (got,) = store.drafters("ep")
    assert got.status == "stale" and "m1 -> m2" in got.stale_reason
    assert got.acceptance_offline["accepted_per_position"] == [0.5, 0.2, 0.1]
    other = rec.model_copy(update={"drafter_id": "", "data_signature": "d2", "model_signature": "m2"})
    other = DrafterRecord.model_validate(other.model_dump())
    store.record_drafter(other)
    assert store.mark_drafters_stale("ep", reason="traffic drifted (prompt_tokens)") == [other.drafter_id]
    assert {d.stale_reason for d in store.drafters("ep")} == {
        "model changed: m1 -> m2",
        "traffic drifted (prompt_tokens)",
    }


# --- the drafter rule in the proposal round, and the verdict written back (real DuckDB, no engine)


@pytest.fixture
def local_spec(definitions, tmp_path):
    """tiny_random's endpoint with a local model folder (only its config.json is read here)."""
    model = write_config(tmp_path / "model")  # SmolLM2-135M
    spec = definitions.endpoint("tiny_random")
    return spec.model_copy(update={"model": spec.model.model_copy(update={"path": str(model)})})


def _on_one_gpu(spec):
    return spec.model_copy(update={"hardware": spec.hardware.model_copy(update={"gpu_count": 1})})


def _trained(spec, tmp_path, **update) -> DrafterRecord:
    from research.drift import model_fingerprint

    rec = drafter_record(
        endpoint=spec.name,
        model_signature=model_fingerprint(spec),
        path=str(write_config(tmp_path / "draft", num_hidden_layers=4)),
        train={"draft_cost_ratio": 0.29},
        acceptance_offline={"acceptance_length": 2.3, "accepted_per_position": [0.56, 0.43, 0.33]},
    )
    return DrafterRecord.model_validate(rec.model_copy(update=update).model_dump()) if update else rec


def _predictable(spec) -> Diagnosis:
    """Decode-bound, small batch, structured replies: the rule says a drafter would pay (on a GPU)."""
    return decode_bound(spec.name, at_cap_requests_running_mean=2.0, spec_decode_acceptance_rate=0.5)


def test_a_fresh_drafter_joins_the_round_as_a_lossless_candidate(local_spec, tmp_path):
    from research.proposals import ProposalBatch

    spec = _on_one_gpu(local_spec)
    store = memory_store(tmp_path)
    rec = _trained(spec, tmp_path)
    store.record_drafter(rec)
    batch = drafter.propose_drafter(
        spec, _predictable(spec), ProposalBatch(source="rules"), n=3, memory=store, campaign_id="c1"
    )
    (proposal,) = batch.proposals
    iv = proposal.intervention
    assert iv.technique == drafter.TECHNIQUE and not iv.lossy
    assert json.loads(iv.engine_arg_diff["--speculative-config"]) == {
        "method": "draft_model",
        "model": rec.path,
        "num_speculative_tokens": 3,
    }
    assert (
        batch.drafter is not None
        and str(round(batch.drafter.break_even_acceptance_length, 2)) in proposal.falsification
    )
    # it was proposed as a candidate, so no open question asks for a drafter to be trained
    assert store.query("select count(*) as n from open_questions")["n"][0] == 0
    # in a full round the drafter takes the last-ranked proposal's place
    full = ProposalBatch(
        source="rules", proposals=[proposal.model_copy(update={"proposal_id": f"p{i}"}) for i in range(3)]
    )
    got = drafter.propose_drafter(spec, _predictable(spec), full, n=3, memory=store).proposals
    assert [p.proposal_id for p in got] == ["p0", "p1", proposal.proposal_id]
    # a drafter already judged, stale, or of another model: the round only suggests
    for update in ({"verdict": "worse"}, {"status": "stale"}, {"model_signature": "another"}):
        other = memory_store(tmp_path / next(iter(update)))
        other.record_drafter(_trained(spec, tmp_path, **update))
        assert (
            drafter.propose_drafter(
                spec, _predictable(spec), ProposalBatch(source="rules"), n=3, memory=other
            ).proposals
            == []
        )


def test_without_a_drafter_the_round_records_the_suggestion_as_an_open_question(local_spec, tmp_path):
    from research.proposals import ProposalBatch

    spec = _on_one_gpu(local_spec)
    store = memory_store(tmp_path)
    batch = drafter.propose_drafter(
        spec, _predictable(spec), ProposalBatch(source="rules"), n=3, memory=store, campaign_id="c1"
    )
    assert batch.proposals == [] and batch.drafter is not None
    assert batch.drafter.command == f"autoresearch drafter train {spec.name} --k 3"
    questions = store.query("select question, rationale, campaign_id from open_questions")
    assert questions.height == 1 and questions["campaign_id"][0] == "c1"
    assert batch.drafter.command in questions["rationale"][0]
    # the same suggestion next round is the same question, not a second one
    drafter.propose_drafter(
        spec, _predictable(spec), ProposalBatch(source="rules"), n=3, memory=store, campaign_id="c1"
    )
    assert store.query("select count(*) as n from open_questions")["n"][0] == 1
    # the reason is kept when the rule stays silent (no decode bottleneck)
    silent = drafter.propose_drafter(
        spec,
        Diagnosis(endpoint=spec.name, engine_kind=spec.engine.kind),
        ProposalBatch(source="rules"),
        n=3,
        memory=store,
    )
    assert silent.drafter is None and "decode is not a bottleneck" in silent.drafter_why_not


def test_an_engine_that_cannot_serve_a_drafter_says_so(definitions):
    from research.proposals import ProposalBatch

    spec = definitions.endpoint("tiny_transformers")
    batch = drafter.propose_drafter(spec, _predictable(spec), ProposalBatch(source="rules"), n=3)
    assert batch.drafter is None and "cannot serve a trained draft model" in batch.drafter_why_not
    with pytest.raises(drafter.DrafterError, match="transformers"):
        drafter.candidate_args([], Path("d"), 3, spec.engine.kind)


def test_the_harness_verdict_and_served_acceptance_reach_the_drafter_record(local_spec, tmp_path):
    from loadgen.results import StepResult, SweepResult

    store = memory_store(tmp_path)
    rec = _trained(local_spec, tmp_path)
    store.record_drafter(rec)
    diff = drafter.draft_model_diff("vllm", Path(rec.path), 3)
    step = StepResult.model_construct(
        engine_metrics={"spec_decode_draft_tokens_delta": 300.0, "spec_decode_accepted_tokens_delta": 120.0}
    )
    sweeps = [SweepResult.model_construct(steps=[step, step])]
    assert drafter.record_judgement(store, local_spec, {"--speculative-config": "{}"}, "worse", None, sweeps) is None
    assert (
        drafter.record_judgement(store, local_spec, diff, "worse", "lossless, checked on logprobs", sweeps)
        == rec.drafter_id
    )
    (got,) = store.drafters(local_spec.name)
    assert got.verdict == "worse" and got.correctness == "lossless, checked on logprobs"
    assert got.acceptance_served["acceptance_rate"] == pytest.approx(0.4)
    assert got.acceptance_served["acceptance_length"] == pytest.approx(1 + 0.4 * 3)
    assert got.acceptance_offline == rec.acceptance_offline  # the offline figures are kept
