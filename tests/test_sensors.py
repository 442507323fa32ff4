"""Drift sensors, evaluated for real against a Dagster instance: one change starts exactly one campaign."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from specs import paths
from dagster_project.definitions import build_definitions
from dagster_project.lib import load_definitions
from dagster_project.lib.migrate import write_declarations

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample" / "support_logs.jsonl"

ENDPOINT_YAML = """\
endpoint:
  name: drifty
  model: {{path: "builtin:tiny-random", served_name: tiny-random, revision: {revision}}}
  engine: {{kind: vllm, args: ["--max-num-seqs", "8"]}}
  sla: {{ttft_ms: {ttft}, itl_ms: 200}}
  traffic: {{kind: request_log, path: "{logs}"}}
"""


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A definitions folder with one endpoint over a request log, and a private state root."""
    monkeypatch.setenv("AUTORESEARCH_MODELS", str(paths.models_dir()))  # reuse the built models
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path / "home"))
    logs = tmp_path / "logs.jsonl"
    logs.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:300]))
    definitions = tmp_path / "definitions"
    definitions.mkdir()
    write_endpoint(definitions, logs)
    return definitions, logs


def write_endpoint(definitions: Path, logs: Path, revision: str = "r1", ttft: int = 1000) -> None:
    write_declarations(definitions, ENDPOINT_YAML.format(revision=revision, ttft=ttft, logs=logs))


def tick(defs: dg.Definitions, name: str, instance, cursor: str | None):
    sensor = next(s for s in defs.sensors if s.name == name)
    context = dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=cursor, definitions=defs)
    return sensor.evaluate_tick(context)


def lengthen_user_turns(logs: Path) -> None:
    """Production drift: every user turn three times as long."""
    out = []
    for line in logs.read_text().splitlines():
        record = json.loads(line)
        for message in record["request"]["messages"]:
            if message["role"] == "user" and isinstance(message.get("content"), str):
                message["content"] = " ".join([message["content"]] * 3)
        out.append(json.dumps(record))
    logs.write_text("\n".join(out) + "\n")


def test_traffic_drift_starts_exactly_one_campaign(workspace):
    from dagster_project.lib import load_definitions
    from autoresearch.workflows import build_replay_pool

    definitions, logs = workspace
    build = build_replay_pool(load_definitions(definitions).endpoint("drifty"))
    assert build.fidelity.passed
    defs = build_definitions(definitions)
    with dg.instance_for_test() as instance:
        unchanged = tick(defs, "drifty__traffic_drift", instance, None)
        assert not unchanged.run_requests
        assert "within thresholds" in unchanged.skip_message and "prompt_tokens_ks=0.000" in unchanged.skip_message

        lengthen_user_turns(logs)
        cursor, started = None, []
        for _ in range(3):
            result = tick(defs, "drifty__traffic_drift", instance, cursor)
            cursor = result.cursor or cursor
            started += result.run_requests or []
            for request in result.dynamic_partitions_requests or []:
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        assert len(started) == 1
        assert started[0].partition_key.startswith("traffic-drift-")
        assert started[0].tags["autoresearch/trigger"] == "traffic_drift"
        distances = json.loads(started[0].tags["autoresearch/distances"])
        assert distances["prompt_tokens_ks"] > 0.1  # above the default threshold: what started it
        assert "prompt_tokens_ks" in started[0].tags["autoresearch/exceeded"]
        assert instance.get_dynamic_partitions("drifty__campaigns") == [started[0].partition_key]


def test_model_revision_change_starts_one_campaign(workspace):
    definitions, logs = workspace
    with dg.instance_for_test() as instance:
        defs = build_definitions(definitions)
        first = tick(defs, "drifty__model_drift", instance, None)
        assert not first.run_requests and "recorded" in first.skip_message
        same = tick(defs, "drifty__model_drift", instance, first.cursor)
        assert not same.run_requests and "unchanged" in same.skip_message

        write_endpoint(definitions, logs, revision="r2")  # the sensor re-reads YAML: no reload needed
        changed = tick(defs, "drifty__model_drift", instance, first.cursor)
        assert len(changed.run_requests) == 1
        assert changed.run_requests[0].tags["autoresearch/trigger"] == "model_drift"
        again = tick(defs, "drifty__model_drift", instance, changed.cursor)
        assert not again.run_requests


def test_sla_change_starts_one_campaign(workspace):
    definitions, logs = workspace
    with dg.instance_for_test() as instance:
        defs = build_definitions(definitions)
        first = tick(defs, "drifty__sla_change", instance, None)
        write_endpoint(definitions, logs, ttft=500)
        changed = tick(defs, "drifty__sla_change", instance, first.cursor)
        assert len(changed.run_requests) == 1 and changed.run_requests[0].partition_key.startswith("sla-change-")
        assert not tick(defs, "drifty__sla_change", instance, changed.cursor).run_requests


def test_model_drift_marks_the_endpoints_drafters_stale(workspace, tmp_path, monkeypatch):
    from memory_db import DrafterRecord, MemoryStore
    from research.drift import model_fingerprint

    monkeypatch.setenv("AUTORESEARCH_MEMORY_DB", str(tmp_path / "memory.duckdb"))
    definitions, logs = workspace
    with dg.instance_for_test() as instance:
        defs = build_definitions(definitions)
        spec = load_definitions(definitions)
        store = MemoryStore(paths.memory_db_path())
        store.ensure_schema()
        rec = DrafterRecord(
            endpoint="drifty",
            model_signature=model_fingerprint(spec.endpoint("drifty")),
            data_signature="d",
            path="/d",
            num_speculative_tokens=3,
            layers=2,
            steps=4,
            train_examples=4,
            train_tokens=40,
            train_s=1.0,
        )
        store.record_drafter(rec)
        first = tick(defs, "drifty__model_drift", instance, None)
        write_endpoint(definitions, logs, revision="r2")
        tick(defs, "drifty__model_drift", instance, first.cursor)
        (got,) = store.drafters("drifty")
        assert got.status == "stale" and got.stale_reason.startswith("model changed")
