"""The replay pool's checks can fail: a metric that cannot be computed is `unmeasured`, never ok;
a pool smaller than the capacity sweep needs fails its fidelity check; a log over its malformed
limit fails the build, naming its first bad lines; and a rebuild that fails leaves the last good
pool byte-identical in place. Real files, real tokenizer (SmolLM2), bad logs written by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from specs.config import EndpointSpec, SweepSpec, TrafficSpec
from specs.models import ensure_model
from replay import sample_logs
from replay.build import MalformedSourceError, build_pool, pool_files, rejected_path
from replay.fidelity import FidelityReport, FidelityRow, TrafficProfile, fidelity_report, min_pool_requests

REPO = Path(__file__).resolve().parents[1]

# One good request-log line, written by hand (a tenant system prompt, a user turn, usage).
GOOD = {
    "timestamp": "2026-03-02T10:00:00Z",
    "request": {
        "model": "m",
        "max_tokens": 32,
        "temperature": 0.2,
        "messages": [
            {"role": "system", "content": "You are the support agent of a parcel courier."},
            {"role": "user", "content": "My parcel has not arrived, what can I do?"},
        ],
    },
    "usage": {"prompt_tokens": 40, "completion_tokens": 20},
}
BAD_JSON = '{"timestamp": "2026-03-02T10:00:01Z", "request": {"messages": ['
NO_MESSAGES = '{"timestamp": "2026-03-02T10:00:02Z", "request": {"messages": []}}'
BAD_ROLE = '{"timestamp": "2026-03-02T10:00:03Z", "request": {"messages": [{"role": "wizard", "content": "hi"}]}}'
NO_TIMESTAMP = '{"request": {"messages": [{"role": "user", "content": "hi"}]}}'


@pytest.fixture(scope="module")
def tok_dir() -> Path:
    return ensure_model("builtin:smollm2-135m-instruct")


@pytest.fixture(scope="module")
def support(definitions) -> EndpointSpec:
    return definitions.endpoint("support_smollm")


def _log(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _good(i: int) -> str:
    rec = json.loads(json.dumps(GOOD))
    rec["timestamp"] = 1_772_445_600.0 + 1.7 * i + (i % 3) * 0.9
    rec["request"]["messages"][1]["content"] += f" Order number {1000 + i}."
    return json.dumps(rec)


def _with(spec: EndpointSpec, log: Path, **traffic) -> EndpointSpec:
    return spec.model_copy(update={"traffic": TrafficSpec(kind="request_log", path=str(log), **traffic)})


def _profile(n: int) -> TrafficProfile:
    rng = np.random.default_rng(n)
    return TrafficProfile(
        np.cumsum(rng.exponential(1.0, n)),
        rng.integers(100, 900, n),
        rng.integers(16, 128, n),
        cached_fraction=0.5 if n else 0.0,
        cached_block=128,
    )


# --- unmeasured is never ok ------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1])
def test_a_pool_of_zero_or_one_request_fails_its_fidelity_check(n: int) -> None:
    pool = prod = _profile(n)
    report = fidelity_report(pool, prod, sweep=SweepSpec())
    assert not report.passed
    rows = {r.name: r for r in report.rows}
    assert rows["pool_requests"].status == "FAIL" and rows["pool_requests"].distance == n
    assert "minimum 12 distinct requests (sweep.min_requests=12" in rows["pool_requests"].note
    # distributions, gaps and their spread need 2+ values; with none, nothing is measurable at all
    unmeasurable = ["prompt_tokens_ks", "output_tokens_ks", "interarrival_ks", "burstiness_rel"]
    unmeasurable += ["concurrency_ks", "cached_fraction_abs"] if n == 0 else []
    for name in unmeasurable:
        assert rows[name].status == "unmeasured" and not rows[name].ok and rows[name].blocking, rows[name]
    assert all(r.status == "unmeasured" for r in report.rows if r.name != "pool_requests") == (n == 0)
    assert f"at least 2 requests on each side (pool {n}, production {n})" in rows["prompt_tokens_ks"].note
    # without the sweep's minimum the unmeasured rows alone fail it
    assert not fidelity_report(pool, prod).passed
    table = report.table()
    assert "fidelity: FAIL (pool_requests, prompt_tokens_ks unmeasured, output_tokens_ks unmeasured" in table
    assert "unmeasured  a KS distance needs at least 2 requests" in table


def test_an_unmeasured_metric_is_never_ok() -> None:
    row = FidelityRow("x_ks", None, None, None, 0.1, "unmeasured", note="why")
    assert not row.ok and not row.measured
    assert not FidelityReport([row]).passed and FidelityReport([row]).failures == [row]
    assert not FidelityReport([]).passed  # no metric at all proves nothing
    # a source without prefix structure (an Azure trace): the row is informational, still not ok
    pool = prod = TrafficProfile(np.arange(50.0), np.full(50, 300), np.full(50, 40))
    report = fidelity_report(pool, prod)
    cached = next(r for r in report.rows if r.name == "cached_fraction_abs")
    assert cached.status == "unmeasured" and not cached.ok and not cached.blocking
    assert "records no prefix structure" in cached.note
    assert "unmeasured (info)  the source records no prefix structure" in report.table()
    # evenly spaced production arrivals: burstiness compared absolutely, measured, not skipped
    burst = next(r for r in report.rows if r.name == "burstiness_rel")
    assert burst.status == "ok" and burst.distance == 0.0 and "absolute" in burst.note
    # requests that all share one timestamp: no arrival process to compare
    flat = TrafficProfile(np.zeros(50), np.full(50, 300), np.full(50, 40), 0.5, 128)
    burst = next(r for r in fidelity_report(flat, flat).rows if r.name == "burstiness_rel")
    assert burst.status == "unmeasured" and "share one timestamp" in burst.note
    for r in (*report.rows, *fidelity_report(flat, flat).rows):
        assert r.ok == (r.status == "ok") and (r.distance is None) == (r.status == "unmeasured")


# --- the pool's minimum size follows the sweep ---------------------------------------------------


def test_the_minimum_pool_size_is_what_a_sweep_step_sends(support: EndpointSpec) -> None:
    assert min_pool_requests(SweepSpec())[0] == 12  # automatic ladder: sweep.min_requests
    n, why = min_pool_requests(SweepSpec(rates=[1, 2, 4, 8], step_duration_s=4))
    assert n == 32 and "8 req/s held 4 s sends 32 requests" in why  # 1 req/s: held 12 s for 12 requests
    assert min_pool_requests(SweepSpec(rates=[0.5], step_duration_s=4))[0] == 8  # held 16 s (4x) for min_requests
    assert min_pool_requests(SweepSpec(users=[1, 40]))[0] == 40
    assert min_pool_requests(SweepSpec(min_requests=1))[0] == 2
    n, why = min_pool_requests(support.sweep)  # 8 req/s for 12 s
    assert n == 96 and "duplicates" in why


def test_a_one_request_log_builds_a_rejected_pool(support: EndpointSpec, tok_dir: Path, tmp_path: Path) -> None:
    log = _log(tmp_path / "one.jsonl", [_good(0)])
    b = build_pool(_with(support, log), tok_dir, tmp_path / "pools")
    assert not b.accepted and not b.passed and not b.fidelity.passed
    rows = {r.name: r for r in b.fidelity.rows}
    assert rows["pool_requests"].status == "FAIL" and "minimum 96 distinct requests" in rows["pool_requests"].note
    assert "8 req/s held 12 s sends 96 requests" in rows["pool_requests"].note
    assert all(
        rows[name].status == "unmeasured" for name in ("prompt_tokens_ks", "output_tokens_ks", "interarrival_ks")
    )
    table = b.table()
    assert "replay pool REJECTED" in table and "there is no previous pool" in table
    assert "pool_requests" in table and "unmeasured" in table and "fidelity: FAIL" in table
    assert not (tmp_path / "pools" / "support_smollm-pool.parquet").exists()
    assert b.pool_path == rejected_path(tmp_path / "pools" / "support_smollm-pool.parquet") and b.pool.height == 1
    assert b.lineage["fidelity_passed"] is False


def test_duplicated_requests_do_not_count_towards_the_minimum(
    support: EndpointSpec, tok_dir: Path, tmp_path: Path
) -> None:
    spec = support.model_copy(update={"sweep": SweepSpec(min_requests=12)})
    same = [json.dumps(dict(GOOD, timestamp=1_772_445_600.0 + 2.1 * i + (i % 4))) for i in range(40)]
    b = build_pool(_with(spec, _log(tmp_path / "same.jsonl", same)), tok_dir, tmp_path / "pools")
    row = next(r for r in b.fidelity.rows if r.name == "pool_requests")
    assert b.stats["rows"] == 40 and b.stats["distinct_requests"] == 1
    assert row.status == "FAIL" and "39 of 40 requests duplicate another" in row.note and not b.accepted


# --- malformed logs fail the build -----------------------------------------------------------------


def test_a_log_over_the_malformed_limit_fails_naming_its_first_bad_lines(
    support: EndpointSpec, tok_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "pools"
    both_bad = _log(tmp_path / "both_bad.jsonl", [BAD_JSON, NO_MESSAGES])
    with pytest.raises(MalformedSourceError) as err:
        build_pool(_with(support, both_bad), tok_dir, out)
    msg = str(err.value)
    assert "2 of 2 lines malformed (100.0%), over traffic.max_malformed_fraction 0.05" in msg
    assert f"{both_bad}:1: invalid JSON" in msg and f"{both_bad}:2: field 'request.messages' missing or empty" in msg
    assert [n for n, _ in err.value.malformed] == [1, 2] and err.value.lines_read == 2

    one_good = _log(tmp_path / "one_good.jsonl", [BAD_ROLE, _good(0), NO_TIMESTAMP, BAD_JSON])
    with pytest.raises(MalformedSourceError, match=r"3 of 4 lines malformed \(75\.0%\)") as err:
        build_pool(_with(support, one_good), tok_dir, out)
    assert f"{one_good}:1: field 'request.messages[0].role'" in str(err.value)
    assert f"{one_good}:3: field 'timestamp' missing" in str(err.value)
    assert sorted(p.name for p in out.iterdir()) == []  # nothing written, no temporary file left

    # within a limit the endpoint states, the build goes on (and its pool of 1 then fails the check)
    b = build_pool(_with(support, one_good, max_malformed_fraction=0.8), tok_dir, out)
    assert [n for n, _ in b.malformed] == [1, 3, 4] and not b.accepted


def test_the_malformed_limit_is_validated_with_a_clear_error() -> None:
    assert TrafficSpec(kind="sample").max_malformed_fraction == 0.05
    assert TrafficSpec(kind="sample", max_malformed_fraction=0).max_malformed_fraction == 0.0
    assert TrafficSpec(kind="sample", max_malformed_fraction=1).max_malformed_fraction == 1.0
    for bad in (1.5, -0.1, "lots", float("nan"), True):
        with pytest.raises(
            ValidationError, match=r"traffic.max_malformed_fraction must be a fraction .* between 0 and 1"
        ):
            TrafficSpec(kind="sample", max_malformed_fraction=bad)


# --- a failed rebuild never replaces the last good pool ---------------------------------------------


def test_a_failed_rebuild_leaves_the_previous_pool_byte_identical(
    support: EndpointSpec, tok_dir: Path, tmp_path: Path
) -> None:
    spec = support.model_copy(update={"sweep": SweepSpec(min_requests=12)})
    out = tmp_path / "pools"
    target = out / "support_smollm-pool.parquet"
    good_log = _log(tmp_path / "good.jsonl", list(sample_logs.generate(150, seed=21)))
    good = build_pool(_with(spec, good_log), tok_dir, out)
    assert good.accepted and good.pool_path == target and good.fidelity.passed, good.table()
    before = {p.name: p.read_bytes() for p in pool_files(target)}
    assert len(before) == 4

    # 1. the build fails (malformed log): nothing renamed, no temporary file left
    bad_log = _log(tmp_path / "bad.jsonl", [_good(0), BAD_JSON, NO_MESSAGES, BAD_ROLE])
    with pytest.raises(MalformedSourceError):
        build_pool(_with(spec, bad_log), tok_dir, out)
    assert {p.name: p.read_bytes() for p in pool_files(target)} == before
    assert sorted(p.name for p in out.iterdir()) == sorted(before)

    # 2. the build succeeds but its pool fails the check (5 requests < 12): kept aside as rejected
    small = build_pool(_with(spec, _log(tmp_path / "small.jsonl", [_good(i) for i in range(5)])), tok_dir, out)
    assert not small.accepted and small.target_path == target and small.pool_path == rejected_path(target)
    assert {p.name: p.read_bytes() for p in pool_files(target)} == before
    assert "the last good pool there is kept unchanged" in small.table()
    assert all(p.exists() for p in pool_files(rejected_path(target)))
    assert not [p for p in out.iterdir() if ".building-" in p.name]

    # 3. a good rebuild replaces the pool and clears the stale reject
    again = build_pool(_with(spec, good_log), tok_dir, out)
    assert again.accepted and again.pool.height == 150
    assert not any(p.exists() for p in pool_files(rejected_path(target)))


def test_the_cli_exits_non_zero_on_a_failed_build_and_on_a_failed_check(tmp_path: Path) -> None:
    from specs.paths import models_dir
    from dagster_project.lib.migrate import write_declarations

    defs = tmp_path / "defs"
    bad = _log(tmp_path / "bad.jsonl", [BAD_JSON, NO_MESSAGES])
    small = _log(tmp_path / "small.jsonl", [_good(i) for i in range(3)])
    for name, log in (("bad_log", bad), ("small_log", small)):
        write_declarations(
            defs,
            f"""\
endpoint:
  name: {name}
  model: {{path: "builtin:smollm2-135m-instruct", served_name: smollm2-135m-instruct}}
  engine: {{kind: vllm, args: ["--max-num-seqs", "8"]}}
  sla: {{ttft_ms: 1000, itl_ms: 200}}
  traffic: {{kind: request_log, path: "{log}"}}
""",
        )
    env = {**os.environ, "AUTORESEARCH_HOME": str(tmp_path / "home"), "AUTORESEARCH_MODELS": str(models_dir())}
    cli = [sys.executable, "-m", "autoresearch.cli", "--definitions", str(defs), "replay", "build"]
    result = subprocess.run([*cli, "small_log"], capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 4, result.stderr
    assert "replay pool REJECTED" in result.stdout and "fidelity: FAIL (pool_requests" in result.stdout
    result = subprocess.run([*cli, "bad_log"], capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode != 0
    assert f"{bad}:1: invalid JSON" in result.stderr and "over traffic.max_malformed_fraction" in result.stderr
    pools = tmp_path / "home" / "pools"
    assert not (pools / "bad_log").exists() or list((pools / "bad_log").iterdir()) == []
    assert not (pools / "small_log" / "small_log-pool.parquet").exists()
