"""The experiment unit: its files travel (spec + pool, relative paths), its CLI exits non-zero on an
invalid verdict, and Dagster launches it through Pipes and gets its metadata and engine log back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from research.experiment import ExperimentResult, ExperimentSpec

REPO = Path(__file__).resolve().parents[1]


def unit_env(tmp_path: Path, sweep: dict | None = None) -> dict[str, str]:
    """A definitions folder holding tiny_random (its sweep changed by ``sweep``) and a state root of
    its own (the models stay shared): the environment that points the CLI and Dagster at them."""
    from specs.paths import models_dir

    spec = yaml.safe_load((REPO / "definitions" / "endpoints" / "tiny_random" / "defs.yaml").read_text())
    spec["attributes"]["sweep"].update(sweep or {})
    (tmp_path / "defs" / "endpoints" / "tiny_random").mkdir(parents=True)
    (tmp_path / "defs" / "endpoints" / "tiny_random" / "defs.yaml").write_text(yaml.safe_dump(spec))
    return {
        "AUTORESEARCH_HOME": str(tmp_path / "home"),
        "AUTORESEARCH_DEFINITIONS": str(tmp_path / "defs"),
        "AUTORESEARCH_MODELS": str(models_dir()),
    }


def cli(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autoresearch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
        timeout=600,
    )


def test_spec_and_pool_travel_together_and_read_back_from_another_folder(tmp_path, monkeypatch):
    env = unit_env(tmp_path)
    written = cli(
        env,
        "experiment",
        "spec",
        "tiny_random",
        "--set",
        "engine.max-num-seqs=4",
        "--repeats",
        "2",
        "--label",
        "seqs4",
        "--cuda-visible-devices",
        "1",
        "--out",
        str(tmp_path / "unit"),
    )
    assert written.returncode == 0, written.stderr
    original = pl.read_parquet(tmp_path / "unit" / "pool.parquet")
    assert original.height > 0

    # Another machine: only the folder arrives, somewhere else, and the reader runs from elsewhere.
    shutil.copytree(tmp_path / "unit", tmp_path / "elsewhere" / "unit")
    shutil.rmtree(tmp_path / "unit")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    spec = ExperimentSpec.read(Path("..") / "elsewhere" / "unit" / "spec.json")
    pool = spec.load_pool()
    assert Path(spec.pool) == (tmp_path / "elsewhere" / "unit" / "pool.parquet").resolve()
    assert pool.equals(original.select(pool.columns))
    assert spec.label == "seqs4" and spec.repeats == 2 and spec.cuda_visible_devices == "1"
    assert spec.engine_args[spec.engine_args.index("--max-num-seqs") + 1] == "4"
    assert spec.endpoint.name == "tiny_random" and spec.endpoint.engine.args == spec.engine_args
    raw = (tmp_path / "elsewhere" / "unit" / "spec.json").read_text()
    assert '"pool": "pool.parquet"' in raw  # relative on disk: the folder is what travels


def test_a_file_that_is_not_a_spec_is_a_usage_error(tmp_path, capsys):
    from autoresearch.cli import main

    (tmp_path / "spec.json").write_text('{"label": "x", "engine_args": []}')
    assert main(["experiment", "run", str(tmp_path / "spec.json")]) == 2
    err = capsys.readouterr().err
    assert "not an experiment spec" in err and "endpoint" in err
    assert not (tmp_path / "result.json").exists()  # nothing ran


def test_unit_whose_engine_refuses_to_start_is_invalid_and_exits_non_zero(tmp_path):
    env = unit_env(tmp_path)
    written = cli(
        env, "experiment", "spec", "tiny_random", "--set", "engine.dtype=not-a-dtype", "--out", str(tmp_path / "unit")
    )
    assert written.returncode == 0, written.stderr
    ran = cli(env, "experiment", "run", str(tmp_path / "unit" / "spec.json"), "--out", str(tmp_path / "out"))
    assert ran.returncode == 5, (ran.stdout, ran.stderr)
    assert "on tiny_random invalid: launch failed" in ran.stderr or "invalid: engine failed" in ran.stderr
    result = ExperimentResult.read(tmp_path / "out")
    assert result.verdict == "invalid" and result.invalid_reason in ran.stderr
    assert result.capacities == [] and result.candidate.log_tail  # the reason comes with the engine's words
    assert result.engine_log == "engine.log" and "not-a-dtype" in (tmp_path / "out" / "engine.log").read_text()


def materialise_unit(tmp_path: Path, sweep: dict, config) -> tuple:
    """Materialise tiny_random/experiment_unit in-process (a temp instance and state root): its
    materialization, its metadata values and the run's log messages."""
    import dagster as dg

    env = unit_env(tmp_path, sweep)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        from dagster_project.definitions import build_definitions

        defs = build_definitions(Path(env["AUTORESEARCH_DEFINITIONS"]))
        asset_key = dg.AssetKey(["tiny_random", "experiment_unit"])
        with dg.DagsterInstance.ephemeral() as instance:
            result = dg.materialize(
                [defs.get_assets_def(asset_key)],
                instance=instance,
                resources=defs.resources,
                run_config=dg.RunConfig({"tiny_random__experiment_unit": config}),
            )
            assert result.success
            (materialization,) = result.asset_materializations_for_node("tiny_random__experiment_unit")
            messages = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message]
    return materialization, {k: v.value for k, v in materialization.metadata.items()}, messages


def test_dagster_materialises_an_invalid_unit_with_its_reason(tmp_path):
    from assets.experiment import ExperimentUnitConfig

    _, meta, messages = materialise_unit(tmp_path, {}, ExperimentUnitConfig(set=["engine.dtype=not-a-dtype"]))
    assert meta["verdict"] == "invalid" and meta["invalid_reason"].startswith("launch failed")
    assert meta["verdict_inputs"]["invalid_reason"] == meta["invalid_reason"] and meta["capacities_rps"] == []
    assert "not-a-dtype" in meta["engine_log_tail"]
    assert any(m.startswith("[engine] ") and "not-a-dtype" in m for m in messages), messages[-20:]


@pytest.mark.engine
def test_dagster_materialises_the_unit_through_pipes_with_its_metadata_and_engine_log(tmp_path, engine_slot):
    from assets.experiment import ExperimentUnitConfig

    engine_slot.release()  # the unit starts its own engine: one server at a time on this host
    materialization, meta, messages = materialise_unit(
        tmp_path,
        {"rates": [1.0, 2.0], "step_duration_s": 4, "min_requests": 6, "warmup_requests": 2},
        ExperimentUnitConfig(repeats=2, label="two"),
    )  # gentle rates: the client shares 2 cores with the engine

    # The unit's own record (result.json) is what the metadata must show.
    unit = ExperimentResult.read(Path(meta["result_path"]).parent)
    assert meta["verdict"] == unit.verdict == "same", (meta["verdict"], meta["invalid_reason"])  # no noise floor
    assert meta["capacities_rps"] == unit.capacities and len(unit.capacities) == 2
    per_repeat = materialization.metadata["capacity_per_repeat"].value
    assert [r.data["capacity_rps"] for r in per_repeat.records] == unit.capacities
    assert {c.name for c in per_repeat.schema.columns} >= {"repeat", "capacity_rps", "knee_rps", "validity"}
    steps = materialization.metadata["steps"].value
    assert {1.0, 2.0} <= {r.data["rate"] for r in steps.records} and {r.data["repeat"] for r in steps.records} == {1, 2}
    assert meta["verdict_inputs"]["capacities"] == unit.capacities and meta["verdict_inputs"]["invalid_reason"] is None
    assert "rate/s" in meta["load_curve"] and meta["engine_args"] == " ".join(unit.candidate.engine_args)
    assert meta["startup_s"] > 0 and "Application startup complete" in meta["engine_log_tail"]
    # Progress and the engine's own log lines reached Dagster's event log through Pipes.
    assert any("sweep 2/2: capacity" in m for m in messages), messages[-20:]
    engine_lines = [m for m in messages if m.startswith("[engine] ")]
    assert any("Application startup complete" in m for m in engine_lines), engine_lines[-20:]
    assert not any('HTTP/1.1" 200' in m for m in engine_lines)  # per-request access lines stay in the file
