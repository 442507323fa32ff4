"""No planted personal data survives anywhere the product persists it: the pool and its side files,
the research memory (DuckDB), the Dagster event log, metadata, stored outputs and captured logs."""

from __future__ import annotations

import gzip
from pathlib import Path

import dagster as dg
import polars as pl

from autoresearch import paths
from autoresearch.config import load_definitions
from dagster_project.factory import build_definitions
from replay.pii_fixtures import planted_pii_logs

ENDPOINT = """\
endpoint:
  name: pii_probe
  model: {{path: "builtin:tiny-random", served_name: tiny-random}}
  engine: {{kind: vllm, args: ["--max-num-seqs", "8"]}}
  sla: {{ttft_ms: 1000}}
  traffic: {{kind: request_log, path: "{logs}"}}
"""


def readable_text(path: Path) -> str:
    """What a person (or a leak scanner) could read from a persisted file."""
    if path.suffix == ".parquet":
        frame = pl.read_parquet(path)
        return "\n".join(str(v) for column in frame.columns for v in frame[column].to_list())
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="ignore")


def test_planted_pii_is_in_no_persisted_file(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_MODELS", str(paths.models_dir()))
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path / "home"))
    lines, planted = planted_pii_logs(400, seed=11)
    assert {p.category for p in planted} >= {"EMAIL", "PHONE", "CREDIT_CARD", "IBAN", "US_SSN", "IP_ADDRESS",
                                             "STREET_ADDRESS", "PERSON"}
    logs = tmp_path / "production" / "logs.jsonl"
    logs.parent.mkdir()
    logs.write_text("\n".join(lines) + "\n")
    definitions = tmp_path / "definitions"
    definitions.mkdir()
    (definitions / "pii_probe.yaml").write_text(ENDPOINT.format(logs=logs))
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

    persisted = [p for root in (tmp_path / "home", dagster_home) for p in root.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in persisted) and any(p.suffix == ".duckdb" for p in persisted)
    assert any(p.suffix == ".db" for p in persisted), "the Dagster event log (sqlite) must be scanned too"
    corpus = {p: readable_text(p) for p in persisted}
    leaks = [(p.name, planted_value.category) for planted_value in planted for p, text in corpus.items()
             if planted_value.leaked_in(text)]
    assert not leaks, f"{len(leaks)} planted values persisted, e.g. {leaks[:5]}"
