"""The GPU cap in Dagster: pool limits derived from the YAML, applied to a real instance by
``autoresearch pools apply``, and enforced by the multiprocess executor (the default executor of the
code location's jobs).

Four stand-in experiments (assets that sleep and record their start and end) take the pool a GPU
endpoint's engine-starting assets take; the endpoint's campaign allows two GPUs at once, one per
engine: at most two ran at once, and two did."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import dagster as dg
import pytest

from autoresearch.cli import main as cli
from dagster_project.lib import load_definitions
from dagster_project.lib.migrate import write_declarations

ENDPOINT = """\
endpoint:
  name: pooled
  model: {path: "builtin:tiny-random"}
  engine: {kind: vllm, args: ["--max-num-seqs", "4"]}
  hardware: {gpu_type: H200, gpu_count: 1}
  sla: {ttft_ms: 1000}
  traffic: {kind: sample}
campaign:
  name: pooled_campaign
  endpoint: pooled
  max_concurrent_gpus: 2
"""
ENGINE_ASSETS = ["baseline_runs", "production_replay", "diagnosis", "candidate_runs", "campaign"]
EXPERIMENTS = 4
HOLD_S = 8.0  # long enough that step processes started seconds apart (Dagster imports on 2 cores) overlap


def experiments_job() -> dg.JobDefinition:
    """Four experiments in the endpoint's pool, run by a multiprocess executor that alone would
    allow all four at once (module level: the executor's step processes rebuild it by reference)."""
    from assets.pools import pool_for

    endpoint = load_definitions(Path(os.environ["POOLS_TEST_DEFINITIONS"])).endpoint("pooled")
    record = Path(os.environ["POOLS_TEST_RECORD"])

    def experiment(i: int) -> dg.AssetsDefinition:
        @dg.asset(key=["pooled", f"experiment_{i}"], pool=pool_for(endpoint))
        def run() -> None:
            start = time.time()
            time.sleep(HOLD_S)
            with open(record, "a") as out:
                out.write(json.dumps({"i": i, "start": start, "end": time.time()}) + "\n")

        return run

    return dg.Definitions(
        assets=[experiment(i) for i in range(EXPERIMENTS)],
        jobs=[
            dg.define_asset_job(
                "experiments", executor_def=dg.multiprocess_executor.configured({"max_concurrent": EXPERIMENTS})
            )
        ],
    ).resolve_job_def("experiments")


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _run(instance: dg.DagsterInstance, record: Path) -> list[tuple[float, float]]:
    record.unlink(missing_ok=True)
    job = dg.build_reconstructable_job(  # tests/ is no package: the step processes import it from here
        __name__, experiments_job.__name__, reconstructor_working_directory=str(Path(__file__).parent)
    )
    result = dg.execute_job(job, instance=instance)
    assert result.success
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert sorted(r["i"] for r in rows) == list(range(EXPERIMENTS))
    return [(r["start"], r["end"]) for r in rows]


@pytest.fixture
def pooled(tmp_path: Path, monkeypatch) -> Path:
    definitions = tmp_path / "definitions"
    definitions.mkdir()
    write_declarations(definitions, ENDPOINT)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("POOLS_TEST_DEFINITIONS", str(definitions))
    monkeypatch.setenv("POOLS_TEST_RECORD", str(tmp_path / "record.jsonl"))
    return definitions


def test_pool_limits_follow_the_yaml_and_every_engine_asset_takes_its_endpoints_pool(pooled: Path):
    from dagster_project.definitions import build_definitions
    from assets.pools import pool_limits

    # the shipped definitions: the CPU endpoints share one engine at a time; a GPU endpoint whose
    # campaign allows one GPU runs one engine
    from specs.paths import definitions_dir

    shipped = pool_limits(load_definitions(definitions_dir()))
    assert shipped["cpu"] == 1 and shipped["gpu_chat_azure_h200"] == 1
    assert pool_limits(load_definitions(pooled)) == {"gpu_pooled": 2}
    defs = build_definitions(pooled)
    for stage in ENGINE_ASSETS:
        assert defs.get_assets_def(dg.AssetKey(["pooled", stage])).op.pool == "gpu_pooled", stage


def test_dagster_runs_at_most_the_cap_of_gpu_experiments_at_once(pooled: Path, capsys):
    assert cli(["--definitions", str(pooled), "pools", "show"]) == 1  # not applied yet
    assert cli(["--definitions", str(pooled), "pools", "apply"]) == 0
    assert cli(["--definitions", str(pooled), "pools", "show"]) == 0
    assert "gpu_pooled" in capsys.readouterr().out
    record = Path(os.environ["POOLS_TEST_RECORD"])
    with dg.DagsterInstance.get() as instance:
        assert instance.event_log_storage.get_concurrency_info("gpu_pooled").slot_count == 2
        capped = _run(instance, record)
        assert _most_at_once(capped) == 2  # never more than the cap, and the cap was used
        # control: the same job with room for all four runs more than two at once
        instance.event_log_storage.set_concurrency_slots("gpu_pooled", EXPERIMENTS)
        assert _most_at_once(_run(instance, record)) > 2
