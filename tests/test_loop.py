"""The one research loop: the same winner from both callers, engine knowledge from the adapters,
and a roofline diagnosis on a measured low-load case (real vLLM CPU engine)."""

from __future__ import annotations

import pytest

from specs.engine_args import REMOVE, apply_diff, parse_args
from engines import resolve_model_dir
from engines.registry import ADAPTERS, adapter_class, block_size_for
from loadgen.results import LatencySummary, StepResult, SweepResult
from loadgen.sweep import run_sweep
from research import rules
from research.campaign import contender
from research.campaign.adoption import outputs_checked
from research.correctness import ReferenceOutputs, unchecked_report
from research.correctness.greedy_text import judge_greedy_text
from research.correctness.outputs import compare_greedy_text
from research.diagnosis import diagnose
from research.interventions import validate_intervention
from research.loop import CandidateVerdict, Contender, pick_winner
from research.roofline import Roofline, roofline_for
from research.state import ExperimentState

from test_diagnosis import make_pool  # noqa: E402 - pytest puts tests/ on sys.path (rootdir-relative import)


# ---------------------------------------------------------------------------------- one winner
def _sweep(capacity: float) -> SweepResult:
    return SweepResult(
        endpoint="e", engine_args=[], launch_config_hash="h", started_at=0.0, capacity_rps=capacity, steps=[]
    )


TEXT = "Paris is the capital of France."


def _checked(args: list[str], lossy: bool):
    """A greedy-text check of a candidate that gave the reference's own output: compared, and kept."""
    ids = [ord(c) for c in TEXT]
    ref = ReferenceOutputs(engine_args=[], float32=False, top_k=0, max_tokens=16, sequences=[], evidence="greedy_text")
    return judge_greedy_text(ref, args, [compare_greedy_text(0, ids, TEXT, ids, TEXT)], lossy=lossy, unit="characters")


def _unchecked(args: list[str], lossy: bool):
    """The check of a candidate whose reference got no evidence: nothing was compared."""
    ref = ReferenceOutputs(
        engine_args=[], float32=False, top_k=0, max_tokens=16, sequences=[], evidence="none", note="timed out"
    )
    return unchecked_report(ref, args, lossy=lossy)


def _record(eid: str, diff: dict, caps: list[float], *, confirmed=True, lossy=False, verdict="better", check=_checked):
    base = ["--continuous-batching"]
    args = apply_diff(base, diff)
    return ExperimentState(
        experiment_id=eid,
        round=1,
        proposal_ids=[eid],
        title=eid,
        baseline_args=base,
        engine_args=args,
        diff=diff,
        lossy=lossy,
        verdict=verdict,
        confirmed=confirmed,
        sweeps=[_sweep(c) for c in caps],
        correctness=check(args, lossy),
    )


def _as_saved_verdict(e: ExperimentState) -> CandidateVerdict:
    """What the Dagster `verdicts` asset stores for the same experiment, read back through its IO manager."""
    stored = CandidateVerdict(
        proposal_id=e.experiment_id,
        verdict=e.verdict,
        confirmed=e.confirmed,
        lossy=e.lossy,
        engine_args=e.engine_args,
        baseline_args=e.baseline_args,
        capacities=[s.capacity_rps for s in e.sweeps],
        correctness_unchecked=not outputs_checked(e),
    ).model_dump_json()
    return CandidateVerdict.model_validate_json(stored)


RECORDS = [
    # the highest single ratio is not the highest mean: a rule on ratio or on one repeat disagrees
    _record("graphs", {"--cb-use-cuda-graph": None}, [4.0, 4.4]),
    _record("graphs+tokens", {"--cb-use-cuda-graph": None, "--cb-max-batch-tokens": "16384"}, [4.2, 4.2]),
    _record("tokens", {"--cb-max-batch-tokens": "16384"}, [4.2, 4.2]),  # ties the pair: the smaller change wins
    _record("lossy-fast", {"--dtype": "float16"}, [9.0, 9.0], lossy=True),  # never adopted by itself
    _record("lucky", {"--compile": None}, [9.0, 1.0], confirmed=False, verdict="same"),  # not every repeat
    # the fastest lossless win, but its outputs were never compared: never adopted by itself
    _record("unchecked-fast", {"--max-num-seqs": "64"}, [8.0, 8.0], check=_unchecked),
]


def test_campaign_and_asset_graph_adopt_the_same_winner():
    from_campaign = pick_winner(contender(e) for e in RECORDS)
    from_assets = pick_winner(_as_saved_verdict(e).contender() for e in RECORDS)
    assert from_campaign is not None and from_assets is not None
    assert from_campaign.id == from_assets.id == "tokens"
    assert from_campaign.capacity == from_assets.capacity == pytest.approx(4.2)
    for records in (RECORDS[:1], RECORDS[3:], []):  # smaller sets: still one answer, or none for both
        a = pick_winner(contender(e) for e in records)
        b = pick_winner(_as_saved_verdict(e).contender() for e in records)
        assert (a and a.id) == (b and b.id)
    assert pick_winner(contender(e) for e in RECORDS[3:]) is None


def test_pick_winner_prefers_capacity_then_the_smaller_change():
    def win(id_, capacity, size):
        return Contender(id_, True, False, capacity, size, checked=True)

    assert pick_winner([win("a", 2.0, 3), win("b", 2.5, 5)]).id == "b"
    assert pick_winner([win("a", 2.0, 3), win("b", 2.0, 1)]).id == "b"


def test_a_win_whose_outputs_were_never_compared_is_not_adopted_by_itself():
    """No correctness evidence (the reference capture got none): the faster change waits for a person,
    in the campaign and in the asset graph alike, and its report says nothing passed."""
    fast = _record("fast", {"--max-num-seqs": "64"}, [3.0, 3.0], check=_unchecked)
    slower = _record("slower", {"--max-num-seqs": "32"}, [2.0, 2.0])
    assert not fast.correctness.passed and not fast.correctness.checked and fast.correctness.flag_for_review
    assert slower.correctness.checked and slower.correctness.passed
    for as_seen in (contender, lambda e: _as_saved_verdict(e).contender()):
        assert pick_winner(as_seen(e) for e in (fast, slower)).id == "slower"
        assert pick_winner([as_seen(fast)]) is None
    # a confirmed win with no correctness report at all (no check ran) is not adopted either
    assert pick_winner([contender(fast.model_copy(update={"correctness": None}))]) is None
    assert CandidateVerdict(proposal_id="p", verdict="better", confirmed=True, capacities=[3.0]).correctness_unchecked


def test_every_adapter_is_found_through_the_registry_and_declares_its_evidence():
    assert set(ADAPTERS) == {"vllm", "sglang", "transformers", "external"}
    assert adapter_class("vllm").can_give("logprobs") and adapter_class("vllm").can_give("token_ids")
    transformers = adapter_class("transformers")
    assert not any(transformers.can_give(e) for e in ("metrics", "profile", "logprobs", "token_ids"))
    assert {"logprobs", "stream_options", "prompt_logprobs"} <= transformers.rejected_request_fields
    with pytest.raises(ValueError, match="unknown evidence"):
        transformers.can_give("telepathy")


def test_block_size_comes_from_the_adapter(definitions):
    smollm = definitions.endpoint("support_smollm")
    assert block_size_for(smollm) == 128  # vLLM's CPU build
    assert block_size_for(smollm.with_engine_args(smollm.engine.args + ["--block-size", "64"])) == 64
    assert block_size_for(definitions.endpoint("rag_mooncake_sglang")) == 1  # radix cache


def _diagnosis_for(kind: str, args: list[str], bottleneck: str):
    from research.proposals import Bottleneck, Diagnosis

    return Diagnosis(
        endpoint="e",
        engine_kind=kind,
        engine_args=args,
        bottlenecks=[Bottleneck(name=bottleneck, severity=0.9, evidence=["constructed"])],
    )


def test_rules_cover_the_real_knobs_of_transformers_serve():
    """Continuous batching, CUDA graphs, batch-token budget, block count, attention, compile, dtype/quantization."""
    seen: dict[str, dict] = {}
    for args in (["--continuous-batching"], [], ["--continuous-batching", "--cb-num-blocks", "2048"]):
        ctx = rules.Context(
            diagnosis=_diagnosis_for("transformers", args, "cpu_overhead"),
            kind="transformers",
            args=parse_args(args),
            gpu_count=1,
            vocab=adapter_class("transformers").vocabulary,
        )
        for bottleneck in rules.PLAYBOOK:
            for iv in rules.interventions_for(bottleneck, ctx):
                seen.setdefault(iv.technique, iv.engine_arg_diff)
                assert validate_intervention(iv, args, "transformers", gpu_count=1).ok
    assert seen["continuous_batching"] == {"--continuous-batching": None}
    assert seen["cuda_graphs"] == {"--cb-use-cuda-graph": None}
    assert seen["torch_compile"] == {"--compile": None}
    assert "--cb-max-batch-tokens" in seen["raise_max_num_batched_tokens"]
    assert seen["more_kv_blocks"] == {"--cb-num-blocks": "4096"}
    assert "--attn-implementation" in seen["attention_kernel"]
    assert "--quantization" in seen["weight_quantization"]
    # a CPU host gets no GPU-only switch
    cpu = rules.Context(
        diagnosis=_diagnosis_for("transformers", ["--continuous-batching"], "cpu_overhead"),
        kind="transformers",
        args={"--continuous-batching": None},
        gpu_count=0,
        vocab=adapter_class("transformers").vocabulary,
    )
    assert not any(
        iv.technique in ("cuda_graphs", "torch_compile") for iv in rules.interventions_for("cpu_overhead", cpu)
    )


def test_graphs_on_vllm_mean_removing_enforce_eager():
    d = _diagnosis_for("vllm", ["--enforce-eager", "--max-num-seqs", "8"], "cpu_overhead")
    [proposal] = rules.propose(d, 1, gpu_count=1)
    assert proposal.intervention.engine_arg_diff == {"--enforce-eager": REMOVE}


# ------------------------------------------------------------------------------------ roofline
def _low_load_sweep(itl_p50: float, rate: float = 0.5, itl_breaks_sla: bool = True) -> SweepResult:
    lat = lambda v: LatencySummary(p50=v, p95=v * 1.3, p99=v * 1.5, mean=v)  # noqa: E731
    within = not itl_breaks_sla
    steps = [
        StepResult(
            target_rate=rate,
            achieved_rate=rate,
            throughput_rps=rate,
            duration_s=10,
            requests=5,
            errors=0,
            error_rate=0.0,
            ttft_ms=lat(50),
            itl_ms=lat(itl_p50),
            e2e_ms=lat(50 + 100 * itl_p50),
            tpot_ms=lat(itl_p50),
            send_lag_ms=lat(0.1),
            within_sla=within,
            sla_violations=[] if within else [f"itl p95 {itl_p50 * 1.3:.0f}ms > 100ms"],
        )
    ]
    return SweepResult(
        endpoint="chat", engine_args=[], launch_config_hash="h", started_at=0.0, capacity_rps=rate, steps=steps
    )


def test_roofline_separates_overhead_from_a_bandwidth_bound_decode():
    h200 = Roofline(weight_bytes=884_000_000, bandwidth_gbps=4800, device="H200", source="data sheet")  # 0.18 ms
    slow = diagnose(
        make_pool(), [_low_load_sweep(80.0)], ["--continuous-batching"], engine_kind="transformers", roofline=h200
    )
    overhead = slow.bottleneck("cpu_overhead")
    assert overhead is not None and slow.bottlenecks[0].name == "cpu_overhead"
    assert any("launch or CPU overhead" in e for e in overhead.evidence)
    assert slow.engine_stats["roofline_ratio"] > 100
    # overhead that no SLA target feels ranks below what does limit capacity
    felt_not = diagnose(
        make_pool(),
        [_low_load_sweep(80.0, itl_breaks_sla=False)],
        ["--continuous-batching"],
        engine_kind="transformers",
        roofline=h200,
    ).bottleneck("cpu_overhead")
    assert felt_not is not None and felt_not.severity <= 0.3 < overhead.severity
    # a decode step near the bound is not overhead
    near = diagnose(
        make_pool(), [_low_load_sweep(0.3)], ["--continuous-batching"], engine_kind="transformers", roofline=h200
    )
    assert near.bottleneck("cpu_overhead") is None
    # the first proposal for this engine on a GPU is CUDA graphs
    [proposal] = rules.propose(slow, 1, gpu_count=1)
    assert proposal.intervention.engine_arg_diff == {"--cb-use-cuda-graph": None}


def test_roofline_judges_a_measured_low_load_case_by_its_ratio(tiny_engine, definitions):
    """Real numbers: vLLM's CPU build serving the 3.4 M-parameter model at a low rate; the bound is the
    model's weight files over this host's measured memory bandwidth.

    How far above the bound the step lands depends on the host (4.3x on one CI machine, more here), so the
    test asserts the rule's contract on what was measured, not one host's ratio: the ratio is recorded, the
    bottleneck is named exactly when the ratio reaches the threshold, and the same measured step against a
    bound a thousand times tighter (the same weights at an H200's data-sheet bandwidth) is named overhead."""
    from autoresearch.workflows import load_pool
    from research.diagnosis import ROOFLINE_OVERHEAD_RATIO

    spec = definitions.endpoint("tiny_random")
    pool = load_pool(spec)  # its replay pool: replies run to their recorded lengths (ignore_eos)
    sweep = run_sweep(tiny_engine, pool, spec, rates=[0.5], step_duration_s=8, check_client=False)
    roofline = roofline_for(resolve_model_dir(spec), "cpu")
    assert roofline is not None and roofline.source == "measured on this host"
    assert 0 < roofline.decode_step_ms < 5  # a few MB of weights at GB/s

    def judged(bound: Roofline):
        return diagnose(pool, [sweep], list(spec.engine.args), endpoint=spec.name, engine_kind="vllm", roofline=bound)

    diagnosis = judged(roofline)
    itl = diagnosis.engine_stats["low_tpot_p50_ms"]
    ratio = diagnosis.engine_stats["roofline_ratio"]
    assert ratio == pytest.approx(itl / roofline.decode_step_ms)
    assert ratio >= 2, (itl, roofline.describe())  # a 13 MB model at batch 1 is nowhere near bandwidth-bound
    overhead = diagnosis.bottleneck("cpu_overhead")
    assert (overhead is not None) == (ratio >= ROOFLINE_OVERHEAD_RATIO), (ratio, diagnosis.bottlenecks)
    if overhead is not None:
        assert any("x the roofline" in e for e in overhead.evidence)

    tight = Roofline(weight_bytes=roofline.weight_bytes, bandwidth_gbps=4800, device="H200", source="data sheet")
    far = judged(tight).bottleneck("cpu_overhead")
    assert far is not None, "the measured step is >1000x a GPU's bound for these weights"
    assert any("launch or CPU overhead" in e for e in far.evidence)


def test_proposals_below_the_mde_fill_free_slots_and_wait_only_when_the_round_is_full():
    """Visible proposals first; below-MDE ones (largest prediction first) take the round's free slots, the
    rest wait as open questions naming the MDE."""
    from types import SimpleNamespace

    from research.campaign.planning import below_mde

    def proposal(title, ratio):
        return SimpleNamespace(title=title, predicted_capacity_ratio=ratio)

    big, prefix, tokens = proposal("seqs", 1.6), proposal("prefix caching", 1.46), proposal("tokens", 1.15)
    working = SimpleNamespace(noise=SimpleNamespace(mde=0.51))
    for subagents, runs, waits in (
        (3, ["seqs", "prefix caching", "tokens"], []),
        (2, ["seqs", "prefix caching"], ["tokens"]),
        (1, ["seqs"], ["prefix caching", "tokens"]),
    ):
        questions = []
        chosen = below_mde([tokens, big, prefix], working, subagents, questions.append)
        assert [p.title for p in chosen] == runs
        assert [q.split(" is predicted")[0] for q in questions] == waits
        assert all("minimum detectable effect 51.0%" in q for q in questions)
    unknown = SimpleNamespace(noise=SimpleNamespace(mde=None))
    assert below_mde([tokens, big], unknown, 1, lambda q: None) == [tokens, big]
