"""The CLI's own behaviour: exit codes, error text and --set parsing (engines are tested elsewhere)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autoresearch.cli import UsageError, _apply_sets, main
from dagster_project.lib import load_definitions

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoresearch.cli", *args], capture_output=True, text=True, cwd=REPO)


def test_validate_shipped_definitions_exits_zero():
    result = run_cli("validate", "definitions/")
    assert result.returncode == 0, result.stderr
    assert "support_smollm" in result.stdout and "all valid" in result.stdout


def test_validate_bad_file_names_file_line_and_field(tmp_path):
    bad = tmp_path / "endpoints" / "broken" / "defs.yaml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "type: dagster_project.lib.Endpoint\n"
        "attributes:\n"
        "  name: broken\n"
        "  model: {path: /models/x}\n"
        "  engine:\n"
        "    kind: vllm\n"
        '    args: ["--max-num-seqs", 2]\n'
        "  traffic: {kind: sample}\n"
    )
    result = run_cli("validate", str(tmp_path))
    assert result.returncode == 1
    assert f"{bad}:7: attributes.engine.args.1" in result.stderr
    assert "attributes.sla: required field is missing" in result.stderr


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


# --- campaign exit codes (real engine, real CLI process) ------------------------------------------
def _campaign_home(tmp_path: Path, extra_args: list[str], deadline_minutes: float) -> dict:
    """A definitions folder with tiny_random (plus ``extra_args``) and one campaign on it; the
    environment that points the CLI at it, with its own state root and the shared models."""
    import os

    import yaml

    spec = yaml.safe_load((REPO / "definitions" / "endpoints" / "tiny_random" / "defs.yaml").read_text())
    spec["attributes"]["engine"]["args"] += extra_args
    spec["attributes"]["sweep"].update({"rates": [2.0, 4.0], "step_duration_s": 4, "repeats": 2})
    (tmp_path / "defs" / "endpoints" / "tiny_random").mkdir(parents=True)
    (tmp_path / "defs" / "campaigns" / "c").mkdir(parents=True)
    (tmp_path / "defs" / "endpoints" / "tiny_random" / "defs.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "defs" / "campaigns" / "c" / "defs.yaml").write_text(
        yaml.safe_dump(
            {
                "type": "dagster_project.lib.Campaign",
                "attributes": {
                    "name": "c",
                    "endpoint": "tiny_random",
                    "deadline_minutes": deadline_minutes,
                    "max_rounds": 1,
                    "profile_seconds": 0,
                },
            }
        )
    )
    from specs.paths import models_dir

    return {
        **os.environ,
        "AUTORESEARCH_HOME": str(tmp_path / "home"),
        "AUTORESEARCH_DEFINITIONS": str(tmp_path / "defs"),
        "AUTORESEARCH_MODELS": str(models_dir()),
    }


def test_campaign_with_an_invalid_baseline_exits_non_zero_with_the_reason(tmp_path):
    env = _campaign_home(tmp_path, ["--dtype", "not-a-dtype"], deadline_minutes=30)
    result = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "campaign", "run", "c"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    assert result.returncode == 4, (result.stdout, result.stderr)
    assert "FAILED" in result.stdout and "finished" not in result.stdout.splitlines()[-1]
    assert "campaign c failed: no valid baseline: baseline invalid" in result.stderr
    assert "launch failed" in result.stderr or "engine failed" in result.stderr
    assert list((tmp_path / "home").rglob("engine.log"))  # it was tried for real


def test_campaign_whose_deadline_cannot_fit_its_baseline_refuses_before_starting(tmp_path):
    env = _campaign_home(tmp_path, [], deadline_minutes=0.5)
    result = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "campaign", "run", "c"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    assert result.returncode == 4, (result.stdout, result.stderr)
    assert "deadline: the next experiment (about" in result.stderr and "min deadline" in result.stderr
    assert not list((tmp_path / "home").rglob("engine.log"))  # no engine was started


def test_drafter_list_shows_recorded_drafters_and_their_status(tmp_path, capsys):
    from memory_db import DrafterRecord, MemoryStore

    db = tmp_path / "memory.duckdb"
    assert main(["drafter", "list", "support_smollm", "--db", str(db)]) == 0
    assert "no drafter recorded for support_smollm" in capsys.readouterr().out
    store = MemoryStore(db)
    store.record_drafter(
        DrafterRecord(
            endpoint="support_smollm",
            model_signature="m",
            data_signature="d",
            path="/drafts/x",
            num_speculative_tokens=3,
            layers=4,
            steps=200,
            train_examples=100,
            train_tokens=3200,
            train_s=90.0,
            acceptance_offline={"acceptance_length": 1.62},
        )
    )
    store.mark_drafters_stale("support_smollm", "m2")
    assert main(["drafter", "list", "support_smollm", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "stale" in out and "offline accept len 1.62" in out and "model changed: m -> m2" in out


def test_drafter_advise_says_why_no_drafter_pays_on_a_cpu_bound_decode(tmp_path, capsys):
    from research.proposals import Bottleneck, Diagnosis

    diagnosis = Diagnosis(
        endpoint="support_smollm",
        engine_kind="vllm",
        bottlenecks=[Bottleneck(name="decode_bound", severity=0.7, evidence=["decode is 90%"])],
        engine_stats={"roofline_ratio": 20.0, "at_cap_requests_running_mean": 1.0},
        request_stats={"structured_output_fraction": 1.0},
    )
    path = tmp_path / "diagnosis.json"
    path.write_text(diagnosis.model_dump_json())
    assert main(["drafter", "advise", "support_smollm", "--diagnosis", str(path)]) == 0
    assert "no drafter proposed for support_smollm: break-even acceptance length" in capsys.readouterr().out
    assert main(["drafter", "advise", "support_smollm"]) == 2


def test_campaign_summary_states_capacities_to_three_figures_and_an_unmeasured_one_as_such():
    from autoresearch.cli import format_outcome
    from research.campaign.outcome import CampaignOutcome

    outcome = CampaignOutcome(
        campaign="c",
        campaign_id="c-1",
        endpoint="e",
        finished=True,
        end_reason="deadline",
        reference_args=["--max-num-seqs", "2"],
        reference_capacity=2.0460000000000003,
        state_path="state.json",
    )
    text = format_outcome(outcome)
    assert "reference capacity  2.05 req/s with --max-num-seqs 2" in text
    assert "best capacity       unmeasured" in text and "2.046000" not in text
