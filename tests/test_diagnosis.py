"""Diagnosis from constructed sweeps and pools: the right bottlenecks, with evidence, in order."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from dagster_project.lib import load_definitions
from specs.paths import definitions_dir
from loadgen.results import LatencySummary, StepResult, SweepResult
from specs.pool_schema import POOL_SCHEMA, check_pool
from research import rules
from research.diagnosis import diagnose, engine_stats, estimate_prefix_reuse, request_stats
from research.profile import parse_profile
from research.proposals import WorkloadResult
from research.workloads import recipe_applies, select_recipes

SMOLLM_ARGS = ["--max-num-seqs", "2", "--max-model-len", "2048", "--enforce-eager", "--no-enable-prefix-caching"]
SYSTEM = "You are the support agent of Globex Bank. " + "Follow the refund policy and verify identity. " * 40


def make_pool(n: int = 60, shared: bool = True, long_every: int = 0) -> pl.DataFrame:
    rows = []
    for i in range(n):
        system = SYSTEM if shared else f"Tenant {i} policy: " + f"rule {i} " * 200
        user = f"Where is my order {i}? " * (30 if long_every and i % long_every == 0 else 1)
        body = {
            "model": "m",
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "tools": [{"type": "function", "function": {"name": "track", "parameters": {"type": "object"}}}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
            "max_tokens": 48,
        }
        rows.append(
            {
                "request_id": str(i),
                "arrival_offset_s": i * 0.5,
                "body": json.dumps(body),
                "prompt_tokens": 420 + (600 if long_every and i % long_every == 0 else 0),
                "expected_output_tokens": 48,
                "prefix_group": "sys:a" if shared else f"sys:{i}",
                "logged_cached_tokens": None,
                "source": "test",
            }
        )
    return check_pool(pl.DataFrame(rows, schema=POOL_SCHEMA))


def step(
    rate: float,
    within: bool,
    running: float,
    waiting: float,
    *,
    ttft: float,
    itl: float = 60.0,
    e2e: float | None = None,
    violations=(),
    **metrics,
) -> StepResult:
    lat = lambda v: LatencySummary(p50=v * 0.7, p95=v, p99=v * 1.2, mean=v * 0.8)  # noqa: E731
    engine = {
        "requests_running_mean": running,
        "requests_running_max": round(running + 0.4),
        "requests_waiting_mean": waiting,
        "requests_waiting_max": waiting * 2,
        "kv_cache_usage_mean": 0.1,
        "kv_cache_usage_max": 0.2,
        **metrics,
    }
    return StepResult(
        target_rate=rate,
        achieved_rate=rate,
        throughput_rps=min(rate, 1.1),
        duration_s=12,
        requests=int(12 * rate),
        errors=0,
        error_rate=0.0,
        ttft_ms=lat(ttft),
        itl_ms=lat(itl),
        e2e_ms=lat(e2e or ttft + 48 * itl),
        send_lag_ms=lat(1.0),
        within_sla=within,
        sla_violations=list(violations),
        engine_metrics=engine,
    )


def smollm_sweep(hits: float = 0.0) -> SweepResult:
    """The embedded default's baseline: 2 sequences run, the queue grows, prefix hits never happen."""
    prefix = {"prefix_cache_queries_delta": 5000.0, "prefix_cache_hits_delta": hits * 5000.0}
    return SweepResult(
        endpoint="support_smollm",
        engine_args=SMOLLM_ARGS,
        launch_config_hash="h",
        started_at=0.0,
        capacity_rps=0.5,
        steps=[
            step(0.25, True, 0.6, 0.0, ttft=300, **prefix),
            step(0.5, True, 1.6, 0.4, ttft=900, **prefix),
            step(1.0, False, 2.0, 7.5, ttft=6400, violations=["ttft p95 6400ms > 2000ms"], **prefix),
            step(2.0, False, 2.0, 19.0, ttft=15000, violations=["ttft p95 15000ms > 2000ms"], **prefix),
        ],
    )


def test_request_stats_describe_the_traffic():
    stats = request_stats(make_pool(long_every=10))
    assert stats["requests"] == 60
    assert stats["tool_use_fraction"] == 1.0 and stats["structured_output_fraction"] == 1.0
    assert stats["prompt_tokens_p95"] > stats["prompt_tokens_p50"]
    assert 0 < stats["decode_share"] < 0.2
    assert stats["arrival_rate"] == pytest.approx(2.0)
    # One long shared system prompt: most prompt text repeats an earlier prefix.
    assert stats["prefix_reuse"] > 0.6
    assert request_stats(make_pool(shared=False))["prefix_reuse"] < 0.1


def test_prefix_reuse_estimate_counts_growing_conversations():
    texts = ["sys|a", "sys|a|b", "sys|a|b|c", "other"]
    assert estimate_prefix_reuse(texts, ["g"] * 3 + ["h"]) == pytest.approx((5 + 7) / sum(map(len, texts)))


def test_engine_stats_pick_the_steps_around_capacity():
    stats = engine_stats([smollm_sweep(), smollm_sweep()])
    assert stats["at_cap_rate"] == 0.5 and stats["over_rate"] == 1.0
    assert stats["over_requests_waiting_mean"] == 7.5
    # Little's law on the client side: 1 req/s x mean e2e (0.8 x (6400 + 48 x 60) ms)
    assert stats["over_in_flight_mean"] == pytest.approx(1.0 * 0.8 * (6400 + 48 * 60) / 1000)
    assert stats["prefix_cache_hit_rate"] == 0.0 and stats["prefix_cache_queries_delta"] == 40000
    assert stats["sla_violations_ttft"] == 4 and stats["sweeps"] == 2


def test_embedded_default_diagnosis_names_batch_limit_and_unused_prefix_cache():
    diagnosis = diagnose(make_pool(), [smollm_sweep()], SMOLLM_ARGS, endpoint="support_smollm", engine_kind="vllm")
    names = [b.name for b in diagnosis.bottlenecks]
    assert names[:2] == ["batch_limit", "prefix_cache_unused"]
    batch = diagnosis.bottleneck("batch_limit")
    assert any("--max-num-seqs 2" in e for e in batch.evidence)
    assert any("waiting" in e for e in batch.evidence)
    assert any("in flight" in e and "limit of 2" in e for e in batch.evidence)
    prefix = diagnosis.bottleneck("prefix_cache_unused")
    assert any("hit rate 0%" in e for e in prefix.evidence) and any("off" in e for e in prefix.evidence)
    assert diagnosis.traits["prefix_reuse"] > 0.6 and diagnosis.traits["capacity_rps"] == 0.5
    assert "no profile" in " ".join(diagnosis.notes)
    # The rule-based proposer turns this evidence into the changes that raise capacity.
    proposals = rules.propose(diagnosis, 3)
    techniques = [p.intervention.technique for p in proposals]
    assert techniques[:2] == ["raise_max_num_seqs", "enable_prefix_caching"]
    assert any(
        t in techniques for t in ("raise_max_num_batched_tokens", "chunked_prefill", "ngram_speculative_decoding")
    )


def test_no_false_alarms_when_the_engine_is_not_the_limit():
    healthy = SweepResult(
        endpoint="e",
        engine_args=["--max-num-seqs", "64", "--enable-prefix-caching"],
        launch_config_hash="h",
        started_at=0.0,
        capacity_rps=4.0,
        steps=[
            step(2.0, True, 5, 0, ttft=200, prefix_cache_queries_delta=1000.0, prefix_cache_hits_delta=800.0),
            step(4.0, True, 9, 0.1, ttft=300, prefix_cache_queries_delta=1000.0, prefix_cache_hits_delta=800.0),
        ],
    )
    diagnosis = diagnose(make_pool(), [healthy], healthy.engine_args, engine_kind="vllm")
    assert diagnosis.bottleneck("batch_limit") is None
    assert diagnosis.bottleneck("prefix_cache_unused") is None


def test_cache_on_but_missing_is_still_flagged():
    sweep = smollm_sweep(hits=0.05)
    args = ["--max-num-seqs", "2", "--enable-prefix-caching"]
    diagnosis = diagnose(make_pool(), [sweep], args, engine_kind="vllm")
    prefix = diagnosis.bottleneck("prefix_cache_unused")
    assert prefix is not None and any("hit rate 5%" in e for e in prefix.evidence)


def test_kv_pressure_and_speculation_waste():
    sweep = smollm_sweep()
    sweep.steps[-1].engine_metrics.update(
        {
            "kv_cache_usage_max": 0.98,
            "preemptions_delta": 12.0,
            "spec_decode_draft_tokens_delta": 900.0,
            "spec_decode_accepted_tokens_delta": 90.0,
        }
    )
    args = SMOLLM_ARGS + ["--speculative-config", '{"method":"ngram","num_speculative_tokens":3}']
    diagnosis = diagnose(make_pool(), [sweep], args, engine_kind="vllm")
    kv = diagnosis.bottleneck("kv_cache_pressure")
    assert kv is not None and any("12 preemptions" in e for e in kv.evidence)
    assert diagnosis.bottleneck("speculation_waste") is not None


def test_profile_and_workloads_feed_prefill_rules():
    profile = parse_profile(Path(__file__).parent / "data" / "vllm_cpu_smollm2.pt.trace.json.gz")
    workloads = [
        WorkloadResult(
            recipe="long_prompt_interference",
            step="s",
            vary="long_prompt_interference",
            value=v,
            rate=1.0,
            itl_p95_ms=itl,
        )
        for v, itl in ((0.0, 80.0), (0.1, 140.0), (0.3, 260.0))
    ]
    workloads += [
        WorkloadResult(recipe="prompt_length_scan", step="s", vary="prompt_tokens", value=v, rate=1.0, ttft_p50_ms=t)
        for v, t in ((128, 100.0), (1536, 1500.0))
    ]
    diagnosis = diagnose(
        make_pool(), [smollm_sweep()], SMOLLM_ARGS, profile=profile, workloads=workloads, engine_kind="vllm"
    )
    interference = diagnosis.bottleneck("prefill_interference")
    assert interference is not None
    assert any("profile" in e for e in interference.evidence) and any("3.2x" in e for e in interference.evidence)
    assert diagnosis.bottleneck("prefill_bound") is not None
    assert diagnosis.profile is not None and diagnosis.profile.device == "cpu"
    assert diagnosis.bottlenecks == sorted(diagnosis.bottlenecks, key=lambda b: -b.severity)


def test_empty_pool_is_a_clear_error():
    with pytest.raises(ValueError, match="empty"):
        diagnose(make_pool().head(0), [], [], engine_kind="vllm")


def test_shipped_recipes_load_and_select_by_traits():
    definitions = load_definitions(definitions_dir())
    recipes = definitions.recipes
    assert {"prompt_length_scan", "shared_vs_unique_prefix", "long_prompt_interference"} <= set(recipes)
    traits = {"prefix_reuse": 0.9, "prompt_tokens_mean": 600.0, "output_tokens_mean": 55.0}
    assert {r.name for r in select_recipes(recipes, traits)} >= {"shared_vs_unique_prefix", "prompt_length_scan"}
    ok, reasons = recipe_applies(recipes["shared_vs_unique_prefix"], {"prefix_reuse": 0.05})
    assert not ok and "prefix_reuse" in reasons[0]


def test_launch_bound_gpu_profile_leads_to_graphs_or_async_scheduling():
    profile = parse_profile(Path(__file__).parent / "data" / "gpu_qwen3_random.pt.trace.json.gz")
    diagnosis = diagnose(
        make_pool(), [], ["--continuous-batching"], endpoint="chat", engine_kind="transformers", profile=profile
    )
    assert diagnosis.bottlenecks[0].name == "cpu_overhead"
    assert any("host-side" in e for e in diagnosis.bottlenecks[0].evidence)
    [proposal] = rules.propose(diagnosis, 1, gpu_count=1)
    assert proposal.intervention.engine_arg_diff == {"--cb-use-cuda-graph": None}


def test_batch_limit_found_from_client_side_concurrency_when_gauges_read_zero():
    """vLLM's CPU build can sample running = waiting = 0 under load; rate x latency still shows the queue."""
    quiet = SweepResult(
        endpoint="support_smollm",
        engine_args=SMOLLM_ARGS,
        launch_config_hash="h",
        started_at=0.0,
        capacity_rps=1.0,
        steps=[
            step(1.0, True, 0.0, 0.0, ttft=900, e2e=1500),
            step(1.4, False, 0.0, 0.0, ttft=4000, e2e=5000, violations=["ttft p95 4000ms > 2000ms"]),
        ],
    )
    diagnosis = diagnose(make_pool(), [quiet], SMOLLM_ARGS, endpoint="support_smollm", engine_kind="vllm")
    batch = diagnosis.bottleneck("batch_limit")
    assert batch is not None, diagnosis.bottlenecks
    assert any("in flight" in e and "--max-num-seqs 2" in e for e in batch.evidence)
    first = rules.propose(diagnosis, 3)
    seqs = [p for p in first if p.intervention.technique == "raise_max_num_seqs"]
    assert seqs and int(seqs[0].intervention.engine_arg_diff["--max-num-seqs"]) == 8  # 1.4 x 4.0 s = 5.6 in flight


def test_sparse_queue_gauges_do_not_veto_the_client_side_queue():
    """One sequence at a time (as the asset-graph test's endpoint): the gauges sampled a short
    queue (0.3 waiting), but 1.3 requests in flight against a limit of 1 while TTFT breaks the
    SLA is a queue all the same, and it outranks the prefix cache."""
    args = ["--max-num-seqs", "1"]
    sparse = SweepResult(
        endpoint="quick",
        engine_args=args,
        launch_config_hash="h",
        started_at=0.0,
        capacity_rps=0.5,
        steps=[
            step(0.5, True, 0.3, 0.0, ttft=900, e2e=1200),
            step(1.0, False, 0.3, 0.3, ttft=3200, itl=14, e2e=1625, violations=["ttft p95 3200ms > 1000ms"]),
        ],
    )
    diagnosis = diagnose(make_pool(), [sparse], args, endpoint="quick", engine_kind="vllm")
    assert diagnosis.engine_stats["over_in_flight_mean"] == pytest.approx(1.3)
    assert diagnosis.bottlenecks[0].name == "batch_limit", diagnosis.bottlenecks
    assert any("in flight" in e and "--max-num-seqs 1" in e for e in diagnosis.bottlenecks[0].evidence)
    # Exactly at the limit nothing has to wait: no queue is claimed.
    at_limit = sparse.model_copy(
        update={"steps": [sparse.steps[0], step(1.0, False, 0.3, 0.3, ttft=800, itl=14, e2e=1250)]}
    )
    assert diagnose(make_pool(), [at_limit], args, engine_kind="vllm").bottleneck("batch_limit") is None


def test_ttft_growing_with_load_while_itl_stays_flat_is_a_queue():
    """Measured on a quiet host (the asset-graph endpoint, --max-num-seqs 1): neither the gauges nor
    the in-flight count (1.1 against 1) are conclusive, but TTFT p95 grows 3.2x from 0.5 to 1 req/s
    while ITL p95 stays flat: the requests waited before they started."""
    args = ["--max-num-seqs", "1"]
    quiet = SweepResult(
        endpoint="quick",
        engine_args=args,
        launch_config_hash="h",
        started_at=0.0,
        capacity_rps=0.66,
        steps=[
            step(0.5, True, 0.2, 0.0, ttft=577, itl=16, e2e=1529),
            step(1.0, False, 0.2, 0.2, ttft=1861, itl=12, e2e=1400, violations=["ttft p95 1861ms > 1000ms"]),
        ],
    )
    diagnosis = diagnose(make_pool(), [quiet], args, endpoint="quick", engine_kind="vllm")
    assert diagnosis.engine_stats["over_in_flight_mean"] < 1.2
    assert diagnosis.bottlenecks[0].name == "batch_limit", diagnosis.bottlenecks
    assert any("grows 3.2x" in e and "ITL p95 stays flat" in e for e in diagnosis.bottlenecks[0].evidence)
    # ITL growing as fast as TTFT is decode slowing down, not a queue: this signal stays silent.
    slower = quiet.model_copy(
        update={
            "steps": [
                quiet.steps[0],
                step(1.0, False, 0.2, 0.2, ttft=1861, itl=60, e2e=1400, violations=["ttft p95 1861ms > 1000ms"]),
            ]
        }
    )
    batch = diagnose(make_pool(), [slower], args, engine_kind="vllm").bottleneck("batch_limit")
    assert batch is None or not any("stays flat" in e for e in batch.evidence)
