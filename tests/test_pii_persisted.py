"""No planted personal data survives anywhere the product persists it: the pool and its side files,
the research memory (DuckDB), the Dagster event log, metadata, stored outputs and captured logs.

Two corpora: the project's own fixtures (``replay.pii_fixtures``) and the held-out corpus of
``benchmarks/pii_heldout_corpus.py``, written independently of the recognisers (names and street
addresses of many countries). Persisted files are decoded before they are searched: Parquet rows,
DuckDB and sqlite tables, gzip."""

from __future__ import annotations

import gzip
import re
import sqlite3
import sys
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl

from specs import paths
from dagster_project.lib import load_definitions
from dagster_project.lib.migrate import write_declarations
from dagster_project.definitions import build_definitions
from replay.sample_logs import planted_pii_logs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import pii_heldout_corpus  # noqa: E402

ENDPOINT = """\
endpoint:
  name: pii_probe
  model: {{path: "builtin:tiny-random", served_name: tiny-random}}
  engine: {{kind: vllm, args: ["--max-num-seqs", "8"]}}
  sla: {{ttft_ms: 1000}}
  traffic: {{kind: request_log, path: "{logs}"}}
"""


def readable_text(path: Path) -> str:
    """What a person (or a leak scanner) could read from a persisted file, decoded."""
    if path.suffix == ".parquet":
        frame = pl.read_parquet(path)
        return "\n".join(str(v) for column in frame.columns for v in frame[column].to_list())
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    text = data.decode("utf-8", errors="ignore")
    if data.startswith(b"SQLite format 3"):
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = [t for (t,) in con.execute("select name from sqlite_master where type='table'")]
        text += "\n".join(str(v) for t in tables for row in con.execute(f'select * from "{t}"') for v in row)
        con.close()
    elif path.suffix == ".duckdb":
        con = duckdb.connect(str(path), read_only=True)
        tables = con.execute("select table_schema, table_name from information_schema.tables").fetchall()
        text += "\n".join(
            str(v) for s, t in tables for row in con.execute(f'select * from "{s}"."{t}"').fetchall() for v in row
        )
        con.close()
    return text


def _build_and_scan(tmp_path, monkeypatch, lines: list[str]) -> tuple[dict[Path, str], dict[int, str]]:
    """Materialise the pool of a request log through Dagster, run the drift sensor, record the
    endpoint in memory; return every persisted file decoded and the pool's bodies by log line."""
    monkeypatch.setenv("AUTORESEARCH_MODELS", str(paths.models_dir()))
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path / "home"))
    logs = tmp_path / "production" / "logs.jsonl"
    logs.parent.mkdir()
    logs.write_text("\n".join(lines) + "\n")
    definitions = tmp_path / "definitions"
    definitions.mkdir()
    write_declarations(definitions, ENDPOINT.format(logs=logs))
    defs = build_definitions(definitions)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        pool_key = dg.AssetKey(["pii_probe", "replay_pool"])
        result = dg.materialize([defs.get_assets_def(pool_key)], instance=instance, selection=[pool_key])
        assert result.success
        # The drift sensor reads the raw logs too: its skip message and cursor are persisted.
        sensor = next(s for s in defs.sensors if s.name == "pii_probe__traffic_drift")
        tick = sensor.evaluate_tick(dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs))
        assert "within thresholds" in tick.skip_message

    from memory_db.records import EndpointRecord
    from memory_db.store import MemoryStore

    spec = load_definitions(definitions).endpoint("pii_probe")
    MemoryStore(paths.memory_db_path()).record_endpoint(EndpointRecord.from_spec(spec, "test"))

    persisted = [
        p
        for root in (tmp_path / "home", dagster_home)
        for p in root.rglob("*")
        if p.is_file() and "models" not in p.relative_to(root).parts
    ]
    assert any(p.suffix == ".parquet" for p in persisted) and any(p.suffix == ".duckdb" for p in persisted)
    assert any(p.suffix == ".db" for p in persisted), "the Dagster event log (sqlite) must be scanned too"
    pool = pl.read_parquet(next(p for p in persisted if p.name.endswith("-pool.parquet")))
    rows = {int(rid.rsplit(":", 1)[1]): body for rid, body in zip(pool["request_id"], pool["body"])}
    return {p: readable_text(p) for p in persisted}, rows


def test_planted_pii_is_in_no_persisted_file(tmp_path, monkeypatch):
    lines, planted = planted_pii_logs(400, seed=11)
    assert {p.category for p in planted} >= {
        "EMAIL",
        "PHONE",
        "CREDIT_CARD",
        "IBAN",
        "US_SSN",
        "IP_ADDRESS",
        "STREET_ADDRESS",
        "PERSON",
    }
    corpus, _ = _build_and_scan(tmp_path, monkeypatch, lines)
    leaks = [
        (p.name, planted_value.category)
        for planted_value in planted
        for p, text in corpus.items()
        if planted_value.leaked_in(text)
    ]
    assert not leaks, f"{len(leaks)} planted values persisted, e.g. {leaks[:5]}"


def test_held_out_pii_is_in_no_persisted_file(tmp_path, monkeypatch):
    """The independent corpus: no whole value in any file, no identifier (a name's words, a
    street's name, a number's digits) in its own request's pool row."""
    lines, planted = pii_heldout_corpus.generate(400, seed=13)
    assert {p.kind for p in planted} == set(pii_heldout_corpus.KINDS) and len(planted) >= 1200
    corpus, rows = _build_and_scan(tmp_path, monkeypatch, lines)
    anywhere = [
        (p.name, v.kind, v.value)
        for v in planted
        for p, text in corpus.items()
        if v.value in text and re.search(rf"(?<!\w){re.escape(v.value)}(?!\w)", text)
    ]  # "Ama" is in "Amazon"
    assert not anywhere, f"{len(anywhere)} planted values persisted, e.g. {anywhere[:5]}"
    in_row = [(v.kind, v.value) for v in planted if pii_heldout_corpus.leaked(v, rows[v.line])]
    assert not in_row, f"{len(in_row)} planted values left in their pool rows, e.g. {in_row[:5]}"
