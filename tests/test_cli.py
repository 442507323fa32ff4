"""The CLI's own behaviour: exit codes, error text and --set parsing (engines are tested elsewhere)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch.cli import UsageError, _apply_sets, main
from autoresearch.config import load_definitions

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoresearch.cli", *args], capture_output=True, text=True, cwd=REPO)


def test_validate_shipped_definitions_exits_zero():
    result = run_cli("validate", "definitions/")
    assert result.returncode == 0, result.stderr
    assert "support_smollm" in result.stdout and "all valid" in result.stdout


def test_validate_bad_file_names_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "endpoint:\n"
        "  name: broken\n"
        "  model: {path: /models/x}\n"
        "  engine:\n"
        "    kind: vllm\n"
        "    args: [\"--max-num-seqs\", 2]\n"
        "  traffic: {kind: sample}\n"
    )
    result = run_cli("validate", str(bad))
    assert result.returncode == 1
    assert f"{bad}:6: endpoint.engine.args.1" in result.stderr
    assert "endpoint.sla: required field is missing" in result.stderr


def test_unknown_endpoint_is_a_usage_error_listing_known_ones(capsys):
    assert main(["engine", "status", "no_such_endpoint"]) == 2
    err = capsys.readouterr().err
    assert "no endpoint named 'no_such_endpoint'" in err and "support_smollm" in err


def test_set_overrides_engine_arguments():
    spec = load_definitions(REPO / "definitions").endpoint("support_smollm")
    changed = _apply_sets(spec, ["engine.max-num-seqs=16", "engine.enable-prefix-caching="])
    args = changed.engine.args
    assert args[args.index("--max-num-seqs") + 1] == "16"
    assert "--enable-prefix-caching" in args
    assert changed.launch_config_hash() != spec.launch_config_hash()
    with pytest.raises(UsageError, match="engine.ARG=VALUE"):
        _apply_sets(spec, ["max-num-seqs=16"])
