"""The research memory's store: schema versions, round trips, idempotent writes, spool safety, readers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest

from loadgen.results import LatencySummary, StepResult, SweepResult
from helpers_memory import CONDITIONS, duckdb_cli
from helpers_memory import experiment as base_experiment
from memory_db import (
    CampaignRecord,
    EndpointRecord,
    ExperimentRecord,
    FindingRecord,
    MemoryStore,
    OpenQuestion,
    RecipeResult,
    RunRecord,
    query,
)
from memory_db.formatting import format_csv, format_json, format_table, render
from memory_db.migrate import apply_migrations, latest_version, migrations

# `store` (tests/conftest.py): an empty memory in the test's tmp_path


def experiment(**overrides) -> ExperimentRecord:
    """The shared experiment, with the Dagster run and asset that recorded it."""
    return base_experiment(**{"dagster_run_ids": ["run-1"], "asset_keys": ["chat/verdicts"], **overrides})


def test_fresh_store_applies_every_migration_once_in_order(store: MemoryStore):
    versions = store.query("SELECT version, name FROM schema_version ORDER BY version")
    assert versions["version"].to_list() == [m.version for m in migrations()]
    assert versions["version"].to_list() == sorted(versions["version"].to_list())
    assert store.ensure_schema() == []  # nothing left to apply
    assert MemoryStore(store.path).query("SELECT count(*) AS n FROM schema_version")["n"][0] == latest_version()


def test_database_newer_than_the_code_is_refused(store: MemoryStore):
    con = duckdb.connect(str(store.path))
    con.execute("INSERT INTO schema_version VALUES (999, 'from_the_future', now()::TIMESTAMP)")
    with pytest.raises(RuntimeError, match="newer than this code"):
        apply_migrations(con)
    con.close()


def test_default_path_comes_from_autoresearch_paths(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_MEMORY_DB", str(tmp_path / "elsewhere" / "m.duckdb"))
    store = MemoryStore()
    assert store.path == (tmp_path / "elsewhere" / "m.duckdb").resolve()
    assert store.path.exists()


def test_every_record_type_round_trips(store: MemoryStore):
    exp = experiment(
        decode_share=0.7, prompt_tokens_p50=512.0, prefix_reuse=0.4, correctness={"exact_match": 1.0, "kl": 0.0}
    )
    store.record(exp)
    assert store.experiments("chat") == [exp]

    question = OpenQuestion(
        endpoint="chat",
        campaign_id="chat-c1",
        question="Does chunked prefill cut TTFT p99?",
        bottleneck="prefill_interference",
    )
    store.record(question)
    assert store.open_questions("chat") == [question]

    finding = FindingRecord(
        endpoint="chat",
        campaign_id="chat-c1",
        bottleneck="queueing",
        technique="max_num_seqs",
        text="More sequences per batch raised capacity until KV ran out",
        conditions=CONDITIONS,
        experiment_ids=[exp.experiment_id],
        confidence="high",
    )
    store.record(finding)
    assert store.findings_for_bottleneck("queueing") == [finding]

    step = StepResult(
        target_rate=2.0,
        achieved_rate=2.0,
        throughput_rps=1.9,
        duration_s=15,
        requests=30,
        errors=0,
        error_rate=0.0,
        ttft_ms=LatencySummary(p95=120.0),
        itl_ms=LatencySummary(),
        e2e_ms=LatencySummary(),
        send_lag_ms=LatencySummary(),
        within_sla=True,
    )
    sweep = SweepResult(
        endpoint="chat",
        engine_args=["--max-num-seqs", "64"],
        launch_config_hash="abc123",
        started_at=time.time(),
        steps=[step],
        capacity_rps=2.0,
        capacity_per_gpu=2.0,
    )
    run = RunRecord.from_sweep(
        sweep,
        run_id="sweep-1",
        kind="baseline",
        campaign_id="chat-c1",
        dagster_run_id="dg-1",
        asset_key="chat/baseline_runs",
    )
    store.record(run)
    row = store.query("SELECT * FROM runs").to_dicts()[0]
    assert RunRecord.from_row(row) == run
    assert StepResult.model_validate(json.loads(row["steps"])[0]) == step  # the sweep can be rebuilt

    recipe = RecipeResult(
        endpoint="chat",
        recipe="prompt_length_scan",
        step="long",
        vary="prompt_tokens",
        value=2048,
        metrics={"ttft_p95_ms": 900.0},
    )
    store.record(recipe)
    assert RecipeResult.from_row(store.query("SELECT * FROM recipe_results").to_dicts()[0]) == recipe

    campaign = CampaignRecord(campaign_id="chat-c1", campaign="tune_chat", endpoint="chat", baseline_capacity=2.0)
    store.record(campaign)
    assert CampaignRecord.from_row(store.query("SELECT * FROM campaigns").to_dicts()[0]) == campaign


def test_endpoint_record_from_yaml_spec(store: MemoryStore):
    from specs.config import EndpointSpec

    spec = EndpointSpec.model_validate(
        {
            "name": "chat",
            "model": {"path": "builtin:tiny-random", "served_name": "tiny"},
            "engine": {"kind": "vllm", "args": ["--max-num-seqs", "8"]},
            "sla": {"ttft_ms": 500},
            "traffic": {"kind": "sample"},
        }
    )
    store.record(EndpointRecord.from_spec(spec, engine_version="0.32.0"))
    row = store.query("SELECT model, engine, engine_version, engine_args FROM endpoints").to_dicts()[0]
    assert row == {
        "model": "tiny",
        "engine": "vllm",
        "engine_version": "0.32.0",
        "engine_args": ["--max-num-seqs", "8"],
    }


def test_rerun_writes_the_same_id_and_never_duplicates(store: MemoryStore):
    first = experiment(verdict="same", capacity_ratio=1.01)
    again = experiment(verdict="same", capacity_ratio=1.01)
    assert first.experiment_id == again.experiment_id  # derived from campaign, endpoint, change, base config
    store.record(first)
    store.record(again)
    store.record(experiment(verdict="worse", capacity_ratio=0.9))  # a re-run that measured differently
    rows = store.query("SELECT experiment_id, verdict FROM experiments")
    assert rows.height == 1
    assert rows["verdict"][0] == "worse"  # the newer write wins
    other_base = experiment(base_config_hash="cfg-after-round-1")
    assert other_base.experiment_id != first.experiment_id


def test_reingesting_an_old_spool_file_changes_nothing(store: MemoryStore):
    store.record(experiment(verdict="same"), ingest=False)
    spooled = sorted(store.spool_dir.glob("*.json"))
    assert len(spooled) == 1
    stale_copy = store.spool_dir.parent / "stale.json"
    shutil.copy(spooled[0], stale_copy)
    store.ingest()
    store.record(experiment(verdict="worse"))
    # a crash between commit and unlink leaves an already-ingested file behind: ingest it again
    shutil.copy(stale_copy, store.spool_dir / ("0" * 20 + "-stale.json"))
    assert store.ingest() == 1
    rows = store.query("SELECT verdict FROM experiments")
    assert rows["verdict"].to_list() == ["worse"]  # the older write did not override the newer


def test_corrupt_spool_file_is_quarantined_and_the_rest_ingested(store: MemoryStore):
    (store.spool_dir / "00000000000000000001-bad.json").write_text("{not json")
    store.record(experiment())
    assert store.query("SELECT count(*) AS n FROM experiments")["n"][0] == 1
    assert [p.name for p in (store.spool_dir / "rejected").iterdir()] == ["00000000000000000001-bad.json"]
    assert store.pending() == 0


_HOLD_RW = """
import duckdb, sys, time
con = duckdb.connect(sys.argv[1])  # like `duckdb memory.duckdb` without -readonly
print("held", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def test_write_never_fails_while_another_process_holds_the_file(store: MemoryStore):
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_RW, str(store.path), "3"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        busy = MemoryStore.__new__(MemoryStore)  # same files, short timeout, no schema check
        busy.__dict__.update(store.__dict__, timeout_s=0.5)
        record_id = busy.record(experiment())  # must not raise
        assert busy.pending() == 1  # kept durably in the spool
    finally:
        holder.wait(timeout=30)
    assert store.query("SELECT experiment_id FROM experiments")["experiment_id"].to_list() == [record_id]
    assert store.pending() == 0


def test_plain_duckdb_and_polars_read_the_file(store: MemoryStore):
    store.record(experiment())
    store.record(experiment(change={"--max-num-seqs": "128"}, verdict="worse", capacity_ratio=0.8))
    con = duckdb.connect(str(store.path), read_only=True)
    try:
        via_duckdb = con.sql("SELECT verdict, count(*) AS n FROM experiments GROUP BY verdict ORDER BY verdict").pl()
        via_polars = pl.read_database("SELECT verdict FROM v_experiments ORDER BY verdict", connection=con)
    finally:
        con.close()
    assert via_duckdb.to_dicts() == [{"verdict": "better", "n": 1}, {"verdict": "worse", "n": 1}]
    assert via_polars["verdict"].to_list() == ["better", "worse"]
    assert query("SELECT count(*) AS n FROM experiments", path=store.path)["n"][0] == 2


@pytest.mark.skipif(duckdb_cli() is None, reason="the duckdb CLI is not installed (pip install duckdb-cli)")
def test_plain_duckdb_cli_reads_the_file_and_writers_still_succeed(store: MemoryStore):
    store.record(experiment())
    done = subprocess.run(
        [
            duckdb_cli(),
            "-readonly",
            "-csv",
            str(store.path),
            "-c",
            "SELECT technique, verdict FROM v_experiments; SELECT count(*) AS n FROM v_disagreements;",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["technique,verdict", "max_num_seqs,better", "n", "0"]
    store.record(experiment(change={"--max-num-seqs": "8"}))  # the CLI closed: writing goes on
    assert store.pending() == 0


def test_analyst_query_cannot_modify_the_memory(store: MemoryStore):
    store.record(experiment())
    with pytest.raises(duckdb.Error, match="read-only"):
        store.query("DELETE FROM experiments")
    assert store.query("SELECT count(*) AS n FROM experiments")["n"][0] == 1


def test_output_formats(store: MemoryStore):
    store.record(experiment())
    df = store.query("SELECT experiment_id, verdict, capacity_ratio, dagster_run_ids, created_at FROM experiments")
    as_json = json.loads(format_json(df))
    assert as_json[0]["verdict"] == "better" and as_json[0]["dagster_run_ids"] == ["run-1"]
    assert isinstance(as_json[0]["created_at"], str)
    csv_lines = format_csv(df).splitlines()
    assert csv_lines[0] == "experiment_id,verdict,capacity_ratio,dagster_run_ids,created_at"
    assert '"[""run-1""]"' in csv_lines[1]
    table = format_table(df)
    assert "better" in table and "1.2" in table
    assert render(df, "csv") == format_csv(df)
    from memory_db.queries import format_frame  # the name the CLI uses

    assert format_frame(df, "json") == format_json(df)
    with pytest.raises(ValueError, match="unknown output format"):
        render(df, "xml")  # type: ignore[arg-type]


def test_lock_and_spool_live_next_to_the_database(store: MemoryStore):
    assert store.lock_path == store.path.with_name("memory.duckdb.lock")
    assert store.spool_dir == store.path.with_name("memory.duckdb.spool")
    store.record(experiment())
    assert os.listdir(store.spool_dir / ".tmp") == []  # no half-written files left behind
