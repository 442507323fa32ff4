"""Replay pools end to end under SmolLM2's real tokenizer: the bundled sample, the public Azure
and Mooncake traces, a planted-PII log (nothing persisted may contain a planted value), and a
deliberately skewed pool that the fidelity check must fail."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import polars as pl
import pyarrow.parquet as pq
import pytest

from specs.config import DefinitionSet, EndpointSpec, TrafficSpec
from specs.models import ensure_model
from replay import sample_logs
from replay.build import PoolBuild, build_pool, engine_block_size, profile_from_pool, profile_paths
from replay.fidelity import TrafficProfile, fidelity_report
from replay.sample_logs import planted_pii_logs
from specs.pool_schema import POOL_SCHEMA, SESSION_SCHEMA
from replay.sessions import SessionTracker
from replay.tokenize import ChatTokenizer

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"


@pytest.fixture(scope="module")
def tok_dir() -> Path:
    return ensure_model("builtin:smollm2-135m-instruct")


@pytest.fixture(scope="module")
def tok(tok_dir: Path) -> ChatTokenizer:
    return ChatTokenizer.from_dir(tok_dir)


@pytest.fixture(scope="module")
def support(definitions: DefinitionSet) -> EndpointSpec:
    return definitions.endpoint("support_smollm")


@pytest.fixture(scope="module")
def sample_build(support: EndpointSpec, tok_dir: Path, tmp_path_factory) -> PoolBuild:
    return build_pool(support, tok_dir, tmp_path_factory.mktemp("pool"))


def _with_traffic(spec: EndpointSpec, **traffic) -> EndpointSpec:
    return spec.model_copy(update={"traffic": TrafficSpec(**traffic)})


def test_sample_pool_passes_fidelity_and_keeps_requests_intact(
    sample_build: PoolBuild, tok: ChatTokenizer, support: EndpointSpec
) -> None:
    b = sample_build
    assert b.fidelity.passed, b.table()
    pool = b.pool
    assert list(pool.columns) == list(POOL_SCHEMA) + list(SESSION_SCHEMA) and pool.height == 600
    assert pool["arrival_offset_s"].min() == 0.0 and pool["arrival_offset_s"].is_sorted()
    assert pool["prefix_group"].n_unique() == len(sample_logs.TENANTS)
    originals = [json.loads(line)["request"] for line in sample_logs.bundled_sample().read_text().splitlines()[:600]]
    bodies = [orjson.loads(x) for x in pool["body"].to_list()]
    cap = support.traffic.max_output_tokens
    for orig, body in zip(originals, bodies):
        for key in ("tools", "response_format", "temperature", "top_p", "tool_choice"):
            assert body[key] == orig[key]
        # the endpoint's traffic.max_output_tokens clips the output limit, nothing else
        assert body["max_tokens"] == (min(orig["max_tokens"], cap) if cap else orig["max_tokens"])
        assert [m["role"] for m in body["messages"]] == [m["role"] for m in orig["messages"]]
    assert pool["prompt_tokens"].to_list()[:50] == tok.count_bodies(bodies[:50]).tolist()
    lineage = json.loads(pq.read_schema(b.pool_path).metadata[b"autoresearch.lineage"])
    assert lineage["source"].endswith("support_logs.jsonl") and len(lineage["source_sha256"]) == 64
    assert lineage["rows"] == 600 and lineage["cache_block_tokens"] == 128  # vLLM on CPU
    assert json.loads(b.pool_path.with_suffix(".lineage.json").read_text()) == lineage
    saved = TrafficProfile.load(profile_paths(b.pool_path)[0])
    assert (
        np.array_equal(saved.prompt_tokens, b.pool_profile.prompt_tokens)
        and saved.cached_fraction == b.pool_profile.cached_fraction
    )
    assert np.array_equal(saved.session_turns, b.pool_profile.session_turns)

    # redaction keeps token lengths close, request by request
    rel = np.abs(b.pool_profile.prompt_tokens - b.production_profile.prompt_tokens) / b.production_profile.prompt_tokens
    assert rel.mean() < 0.005 and rel.max() < 0.05
    # prefix-heavy workload: long shared tenant prompts make most prompt tokens cacheable
    assert b.production_profile.cached_fraction > 0.5


def test_table_and_plot(sample_build: PoolBuild, tmp_path: Path) -> None:
    table = sample_build.table()
    for row in sample_build.fidelity.rows:
        assert row.name in table and f"{row.threshold:g}" in table
    assert "fidelity: PASS" in table
    png = sample_build.plot(tmp_path / "lengths.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_skewed_pool_fails_the_check(sample_build: PoolBuild, tok: ChatTokenizer, support: EndpointSpec) -> None:
    pool = sample_build.pool
    block = engine_block_size(support)
    same = profile_from_pool(pool, tok, block)
    assert fidelity_report(same, sample_build.production_profile, support.fidelity).passed

    def halve(body: str) -> str:
        b = orjson.loads(body)
        for m in b["messages"]:
            if isinstance(m.get("content"), str):
                m["content"] = m["content"][: len(m["content"]) // 2]
        return orjson.dumps(b).decode()

    skewed = pool.with_columns(pl.col("body").map_elements(halve, return_dtype=pl.Utf8))
    report = fidelity_report(profile_from_pool(skewed, tok, block), sample_build.production_profile, support.fidelity)
    assert not report.passed
    assert "prompt_tokens_ks" in [r.name for r in report.failures]
    assert "FAIL" in report.table()


def test_no_planted_pii_in_anything_persisted(support: EndpointSpec, tok_dir: Path, tmp_path: Path) -> None:
    lines, planted = planted_pii_logs(600, seed=8)
    log = tmp_path / "prod.jsonl"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    spec = _with_traffic(support, kind="request_log", path=str(log))
    b = build_pool(spec, tok_dir, out)
    b.plot()
    assert b.pool.height == 600 and b.fidelity.passed, b.table()
    bodies = dict(zip(b.pool["request_id"].to_list(), b.pool["body"].to_list()))
    leaks = [p for p in planted if p.leaked_in(bodies[f"prod:{p.line}"])]
    assert leaks == []
    # every persisted file, decoded: the Parquet pool (all columns and metadata), the lineage, the plot
    persisted = [pl.read_parquet(b.pool_path).write_csv(), str(pq.read_schema(b.pool_path).metadata)]
    persisted += [p.read_bytes().decode("latin-1") for p in out.iterdir() if p.suffix not in (".parquet", ".npz")]
    persisted += [b.table(), json.dumps(b.lineage), json.dumps(b.fidelity.to_dict()), json.dumps(b.stats)]
    everything = "\n".join(persisted)
    assert [p.value for p in planted if p.value in everything] == []
    assert sorted(p.name for p in out.iterdir()) == [
        "support_smollm-pool.lengths.png",
        "support_smollm-pool.lineage.json",
        "support_smollm-pool.parquet",
        "support_smollm-pool.production.npz",
        "support_smollm-pool.profile.npz",
    ]


def test_azure_trace_pool_passes_with_exact_lengths(support: EndpointSpec, tok_dir: Path, tmp_path: Path) -> None:
    spec = _with_traffic(
        support,
        kind="azure",
        path=str(TRACES / "azure2023_conv.csv"),
        limit=3000,
        max_prompt_tokens=1800,
        max_output_tokens=200,
    )
    b = build_pool(spec, tok_dir, tmp_path)
    assert b.fidelity.passed, b.table()
    assert b.lineage["exact_length_rows"] == b.pool.height == 3000
    assert np.array_equal(b.pool_profile.prompt_tokens, b.production_profile.prompt_tokens)
    body = orjson.loads(b.pool["body"][0])
    assert body["ignore_eos"] is True and body["max_tokens"] == b.pool["expected_output_tokens"][0]


def test_mooncake_pool_reproduces_block_reuse(support: EndpointSpec, tok_dir: Path, tmp_path: Path) -> None:
    spec = _with_traffic(
        support,
        kind="mooncake",
        path=str(TRACES / "mooncake_synthetic.jsonl"),
        length_scale=1 / 16,
        max_prompt_tokens=1900,
        max_output_tokens=128,
    )
    b = build_pool(spec, tok_dir, tmp_path)
    assert b.fidelity.passed, b.table()
    prod, pool = b.production_profile.cached_fraction, b.pool_profile.cached_fraction
    assert prod > 0.5 and abs(pool - prod) <= 0.02
    assert b.lineage["synth_block_tokens"] == 32 and b.lineage["exact_length_rows"] == 3993


def test_shared_block_ids_give_identical_prompt_prefixes(
    support: EndpointSpec, tok_dir: Path, tmp_path: Path, tok: ChatTokenizer
) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 10, "input_length": 1400, "output_length": 5, "hash_ids": [1, 2, 9]},
        {"timestamp": 20, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    spec = _with_traffic(support, kind="mooncake", path=str(trace), length_scale=0.5)
    b = build_pool(spec, tok_dir, tmp_path / "o")
    ids = tok.encode_bodies([orjson.loads(x) for x in b.pool["body"].to_list()])
    assert b.pool["prompt_tokens"].to_list() == [750, 700, 300]
    assert np.array_equal(ids[0][:512], ids[1][:512]) and not np.array_equal(ids[0][:520], ids[1][:520])
    assert not np.array_equal(ids[0][:256], ids[2][:256])


def test_sample_generator_is_deterministic_and_in_range(tok: ChatTokenizer) -> None:
    a, b = list(sample_logs.generate(400, seed=5)), list(sample_logs.generate(400, seed=5))
    assert a == b and a != list(sample_logs.generate(400, seed=6))
    recs = [json.loads(x) for x in a]
    counts = tok.count_bodies([r["request"] for r in recs])
    outs = np.array([r["usage"]["completion_tokens"] for r in recs])
    assert 300 <= np.median(counts) <= 900 and counts.max() + 128 <= 2048
    assert outs.min() >= 16 and outs.max() <= 128
    assert len({r["tenant"] for r in recs}) == len(sample_logs.TENANTS)
    assert any(len(r["request"]["messages"]) > 3 for r in recs)  # multi-turn
    ts = (
        np.array([np.datetime64(r["timestamp"].rstrip("Z")) for r in recs]).astype("datetime64[ms]").astype(float) / 1e3
    )
    gaps = np.diff(ts)
    assert (gaps >= 0).all() and gaps.std() / gaps.mean() > 1.2  # bursty: more variable than Poisson


def test_segment_cached_encoding_equals_whole_prompt_encoding(tok: ChatTokenizer) -> None:
    bodies = [json.loads(x)["request"] for x in sample_logs.generate(200, seed=2)]
    assert tok.verify([tok.render(b) for b in bodies])
    assert tok.verify([tok.render(b) for b in bodies])  # second pass: from the cache
    assert tok.cache_hits > 0 and tok.cache_misses > 0


def test_out_of_order_log_with_bad_lines_is_sorted_and_reported(
    support: EndpointSpec, tok_dir: Path, tmp_path: Path
) -> None:
    lines = list(sample_logs.generate(60, seed=13))
    lines[10], lines[11] = lines[11], lines[10]  # logs are often written at completion time
    lines.insert(20, '{"timestamp": "2026-11-02T09:00:00Z", "request": {"messages": []}}')
    log = tmp_path / "prod.jsonl"
    log.write_text("\n".join(lines) + "\n")
    b = build_pool(_with_traffic(support, kind="request_log", path=str(log)), tok_dir, tmp_path / "o")
    assert b.pool.height == 60 and b.pool["arrival_offset_s"].is_sorted() and b.pool["arrival_offset_s"].min() == 0.0
    assert b.malformed == [(21, "field 'request.messages' missing or empty")]
    assert "1 malformed lines" in b.table() and "line 21: field 'request.messages'" in b.table()
    assert b.pool["request_id"].to_list()[10:12] == ["prod:12", "prod:11"]


def test_profile_from_source_matches_the_builds_production_profile(
    support: EndpointSpec, tok_dir: Path, tok: ChatTokenizer, tmp_path: Path
) -> None:
    from replay.build import profile_from_source

    spec = _with_traffic(
        support,
        kind="mooncake",
        path=str(TRACES / "mooncake_synthetic.jsonl"),
        limit=300,
        length_scale=1 / 16,
        max_prompt_tokens=1900,
    )
    b = build_pool(spec, tok_dir, tmp_path)
    again = profile_from_source(spec, tok)
    assert np.array_equal(again.prompt_tokens, b.production_profile.prompt_tokens)
    assert again.cached_fraction == b.production_profile.cached_fraction
    assert fidelity_report(b.production_profile, again, spec.fidelity).passed


def test_request_log_output_cap_applies_to_pool_bodies_and_production_alike(
    support: EndpointSpec, tok_dir: Path, tok: ChatTokenizer, tmp_path: Path
) -> None:
    from replay.build import profile_from_source

    spec = _with_traffic(support, kind="sample", limit=200, max_output_tokens=32)
    b = build_pool(spec, tok_dir, tmp_path)
    assert b.fidelity.passed, b.table()
    bodies = [orjson.loads(x) for x in b.pool["body"]]
    assert all(0 < body["max_tokens"] <= 32 for body in bodies)
    assert b.pool["expected_output_tokens"].max() <= 32
    assert np.array_equal(b.production_profile.output_tokens, b.pool_profile.output_tokens)
    assert np.array_equal(profile_from_source(spec, tok).output_tokens, b.production_profile.output_tokens)
    uncapped = build_pool(_with_traffic(support, kind="sample", limit=200), tok_dir, tmp_path / "uncapped")
    assert np.array_equal(uncapped.pool["prompt_tokens"].to_numpy(), b.pool["prompt_tokens"].to_numpy())


def test_prompt_transforms_are_refused_for_request_logs(support: EndpointSpec) -> None:
    with pytest.raises(ValueError, match="token-count traces only"):
        _with_traffic(support, kind="sample", max_prompt_tokens=100)


def test_sample_sessions_match_its_conversations_by_user_and_by_history(sample_build: PoolBuild) -> None:
    """The sample's conversations carry a user id; the pool groups them alike, and the resent
    message history alone (user ids removed) finds the same sessions."""
    pool = sample_build.pool
    lines = [json.loads(line) for line in sample_logs.bundled_sample().read_text().splitlines()[:600]]
    users = [x["request"]["user"] for x in lines]
    partition = lambda keys: sorted(sorted(i for i, k in enumerate(keys) if k == key) for key in set(keys))
    assert partition(pool["session_id"].to_list()) == partition(users)
    assert (
        pool["turn"].max() >= 2
        and pool.filter(pl.col("turn") == 0)["think_time_s"].null_count() == pool.filter(pl.col("turn") == 0).height
    )
    tracker = SessionTracker()
    by_history = [tracker.add(0.0, {k: v for k, v in x["request"].items() if k != "user"})[0] for x in lines]
    assert partition(by_history) == partition(users)
    rows = {r.name: r for r in sample_build.fidelity.rows}
    assert rows["turns_per_session_ks"].ok and rows["think_time_ks"].ok
