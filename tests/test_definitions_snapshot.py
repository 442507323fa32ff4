"""A fast snapshot of the Dagster definitions built from the shipped YAML (no engine, seconds).

It pins what users and sensors depend on: asset keys and groups, asset checks, partitions, jobs,
sensors and the concurrency pools. CI runs it first (tests/conftest.py), so a refactor that drops
or renames a definition fails in seconds, not after the engine tests. After an intended change:
``UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/test_definitions_snapshot.py`` and review the diff.
"""

import json
import os
from pathlib import Path

import dagster as dg

from specs import paths

SNAPSHOT = Path(__file__).parent / "snapshots" / "definitions.json"


def _partitions(partitions) -> str | list[str] | None:
    if partitions is None:
        return None
    name = getattr(partitions, "name", None)  # dynamic partitions: their name; static ones: their keys
    return f"dynamic:{name}" if name else sorted(partitions.get_partition_keys())


def describe(defs: dg.Definitions) -> dict:
    """Everything the snapshot pins, as plain sorted data."""
    graph = defs.resolve_asset_graph()
    pools = {key: a.op.pool for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition) for key in a.keys}
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "partitions": _partitions(node.partitions_def),
            "pool": pools.get(key),
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "materializable": node.is_materializable,
        }
    checks = sorted(f"{c.asset_key.to_user_string()}:{c.name}" for c in graph.asset_check_keys)
    jobs = sorted(job.name for job in defs.resolve_all_job_defs() if not job.name.startswith("__"))
    sensors = {s.name: {"job": s.job_name, "default_status": s.default_status.value} for s in defs.sensors or []}
    return {
        "assets": assets,
        "checks": checks,
        "jobs": jobs,
        "sensors": dict(sorted(sensors.items())),
        "resources": sorted(defs.resources or {}),
    }


def test_definitions_match_the_snapshot(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))  # building must not need or write project state
    from dagster_project.definitions import build_definitions

    snapshot = describe(build_definitions(paths.definitions_dir()))
    if os.environ.get("UPDATE_SNAPSHOTS") or not SNAPSHOT.exists():
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(SNAPSHOT.read_text())
    assert snapshot == recorded, (
        f"the definitions changed; if intended, rerun with UPDATE_SNAPSHOTS=1 and review the diff of {SNAPSHOT}"
    )
    # what the snapshot must always hold, whatever else changes
    endpoints = {a["group"] for a in snapshot["assets"].values()}
    assert {"support_smollm", "chat_azure_h200"} <= endpoints
    for group in endpoints:
        assert f"{group}/replay_pool" in snapshot["assets"] and f"{group}/campaign" in snapshot["assets"]
        assert f"{group}__traffic_drift" in snapshot["sensors"]
    assert any(c.endswith(":pool_fidelity") or "fidelity" in c for c in snapshot["checks"])
