"""Endpoints, campaigns and recipes as Dagster components, through the real ``dg`` CLI (no engine).

``dg check defs`` passes on the shipped defs folder and fails with file and line on a wrong field;
``dg list defs`` lists every endpoint's assets; ``dg scaffold defs`` adds an endpoint that the code
location and the ``autoresearch`` CLI both see. Edits happen in a copy of the project (its own
code on PYTHONPATH), never in the checkout.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specs.paths import definitions_dir
from dagster_project.lib import load_definitions

REPO = Path(__file__).resolve().parents[1]
DG = Path(sys.executable).parent / "dg"
PACKAGES = [
    "definitions",
    "specs",
    "autoresearch",
    "engines",
    "replay",
    "loadgen",
    "research",
    "memory_db",
    "dagster_project",
    "assets",
    "sensors",
    "launchers",
]


def dg(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(project), "AUTORESEARCH_HOME": str(project / ".autoresearch")}
    env.pop("AUTORESEARCH_DEFINITIONS", None)
    return subprocess.run([str(DG), *args], cwd=project, env=env, capture_output=True, text=True, timeout=300)


def _names(result: subprocess.CompletedProcess, file: Path, after: str, before: str = "") -> bool:
    """Whether dg's output names ``file`` (as written under definitions/, or through the
    dagster_project/defs link that dg loads it by) with ``before`` and ``after`` around it."""
    text = result.stdout + result.stderr
    for shown in re.findall(re.escape(before) + r"(/\S+?defs\.yaml)" + re.escape(after), text):
        if Path(shown).resolve() == file.resolve():
            return True
    return False


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's code and defs folder, run with this checkout's virtual environment."""
    copy = tmp_path / "project"
    copy.mkdir()
    shutil.copy(REPO / "pyproject.toml", copy)
    for package in PACKAGES:
        shutil.copytree(REPO / package, copy / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / ".venv").symlink_to(REPO / ".venv")
    return copy


def test_dg_check_defs_passes_on_the_shipped_defs():
    result = dg(REPO, "check", "defs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All definitions loaded successfully" in result.stdout + result.stderr


def test_dg_list_defs_lists_every_endpoints_assets():
    result = dg(REPO, "list", "defs", "--json")
    assert result.returncode == 0, result.stderr
    keys = {asset["asset_key"] for asset in json.loads(result.stdout)["assets"]}
    endpoints = load_definitions(definitions_dir()).endpoints
    assert len(endpoints) >= 5
    for name in endpoints:
        for stage in ("replay_pool", "baseline_runs", "load_curve", "proposals", "verdicts", "campaign"):
            assert f"{name}/{stage}" in keys, (name, stage)


def test_dg_check_defs_names_file_and_line_of_a_wrong_field(project: Path):
    file = project / "definitions" / "endpoints" / "tiny_random" / "defs.yaml"
    lines = file.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.strip() == "kind: vllm")
    lines.insert(at + 1, "    max_num_seqs: 4\n")  # a flag written as a field: not honoured, so an error
    file.write_text("".join(lines))
    result = dg(project, "check", "defs")
    assert result.returncode == 1
    assert _names(result, file, f":{at + 2}", "attributes.engine.max_num_seqs at ")


def test_dg_check_defs_names_a_campaign_on_an_undeclared_endpoint(project: Path):
    file = project / "definitions" / "campaigns" / "support_smollm_default" / "defs.yaml"
    text = file.read_text()
    file.write_text(text.replace("endpoint: support_smollm\n", "endpoint: support_smol\n"))
    line = text[: text.index("endpoint: support_smollm\n")].count("\n") + 1
    result = dg(project, "check", "defs")
    assert result.returncode == 1
    assert _names(result, file, f":{line}: attributes.endpoint: unknown endpoint 'support_smol'")


def test_scaffolded_endpoint_appears_in_dg_and_the_cli(project: Path):
    result = dg(project, "scaffold", "defs", "dagster_project.lib.Endpoint", "endpoints/my_endpoint")
    assert result.returncode == 0, result.stdout + result.stderr
    file = project / "definitions" / "endpoints" / "my_endpoint" / "defs.yaml"
    file.write_text(file.read_text().replace("ttft_ms: 1000", "ttft_ms: 750"))  # the edit a user makes
    listed = dg(project, "list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr
    keys = {asset["asset_key"] for asset in json.loads(listed.stdout)["assets"]}
    assert {"my_endpoint/replay_pool", "my_endpoint/load_curve", "my_endpoint/campaign"} <= keys
    cli = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "--definitions", str(file.parents[2]), "validate"],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(project)},
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 0, cli.stderr
    assert "endpoint my_endpoint" in cli.stdout
    assert load_definitions(file.parents[2]).endpoint("my_endpoint").sla.ttft_ms == 750
