"""Adding an engine is one adapter module: a toy adapter, declared here only and registered for this
test, is started, swept, diagnosed and given proposals by the product's own code, with no other file
changed (docs/architecture.md, "Adding an engine").

The toy engine is the simulated engine (loadgen.simengine) behind a command line of the toy's own:
``--max-batch N`` is its one setting, which the adapter translates into the service model. Its flags,
the values they take, its metric names and its vocabulary live in the class below and nowhere else.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from specs import paths
from specs.config import SLASpec
from specs.engine_args import parse_args
from engines import value_checks as vc
from engines.base import EngineAdapter, Knob, MetricsSnapshot, Vocabulary
from engines.metrics import snapshot_from_text
from loadgen import simengine


class ToyAdapter(EngineAdapter):
    """The simulated engine as an engine kind of its own."""

    kind = "toy"
    known_flags = frozenset({"--max-batch"})
    value_checks = {"--max-batch": vc.integer(1, 512)}
    vocabulary = Vocabulary(batch_limit=Knob("--max-batch", default_gpu=2))
    evidence = frozenset({"metrics"})
    stop_grace_s = 2.0

    def launch_command(self, model_dir: Path) -> list[str]:
        batch = int(parse_args(list(self.spec.engine.args)).get("--max-batch") or 2)
        model = simengine.ServiceModel(run_jitter_cv=0.01, max_batch=batch)
        return [
            self.engine_python(),
            "-m",
            "loadgen.simengine",
            "--port",
            str(self.port),
            "--model-json",
            json.dumps(asdict(model)),
        ]

    def launch_env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(paths.REPO_ROOT)}

    def served_model_name(self, model_dir: Path) -> str:
        return simengine.SIM_MODEL

    def parse_metrics(self, text: str, timestamp: float) -> MetricsSnapshot:
        return snapshot_from_text(
            text,
            timestamp,
            {"requests_running": "sim:num_requests_running", "requests_waiting": "sim:num_requests_waiting"},
            "sim:",
        )


@pytest.fixture
def toy(monkeypatch, tmp_path, definitions):
    from engines.registry import ADAPTERS

    monkeypatch.setitem(ADAPTERS, "toy", ToyAdapter)
    base = definitions.endpoint("tiny_random")
    (tmp_path / "weights").mkdir()
    return base.model_copy(
        update={
            "name": "toy_endpoint",
            "engine": base.engine.model_copy(
                update={"kind": "toy", "args": ["--max-batch", "2"], "python": sys.executable, "env": {}}
            ),
            "model": base.model.model_copy(update={"path": str(tmp_path / "weights")}),
            "sla": SLASpec(ttft_ms=300, itl_ms=50, max_error_rate=0.01),
            "sweep": base.sweep.model_copy(
                update=dict(
                    rates=[2.0, 4.0, 8.0, 16.0, 32.0],
                    step_duration_s=3,
                    warmup_requests=2,
                    max_steps=6,
                    warm_prefix_groups=0,
                    min_requests=6,
                )
            ),
        }
    )


def test_a_toy_adapter_is_swept_diagnosed_and_given_proposals_with_no_other_file_changed(toy, tmp_path, definitions):
    from autoresearch.workflows import load_pool
    from engines import start_engine
    from loadgen.sweep import run_sweep
    from research.interventions import validate_intervention
    from research.loop import diagnose_step, propose_step
    from research.proposals import Intervention

    pool = load_pool(definitions.endpoint("tiny_random"))  # a replay pool as the product builds it
    with start_engine(toy, workdir=tmp_path / "run") as engine:
        assert engine.identity.engine == "toy"
        sweep = run_sweep(engine, pool, toy)
    assert sweep.validity == "valid", sweep.invalid_reason
    assert sweep.capacity_rps and sweep.capacity_rps > 0
    # the metrics came through the toy's own names: the batch was full at the top of the load curve
    assert max(s.engine_metrics.get("requests_running_max", 0) for s in sweep.steps) == 2

    diagnosis = diagnose_step(toy, pool, [sweep], workdir=tmp_path / "diag", progress=lambda _m: None)
    assert diagnosis.engine_kind == "toy" and diagnosis.bottleneck("batch_limit") is not None
    batch = propose_step(
        toy,
        diagnosis,
        n=2,
        mode="rules",
        campaign_id="toy",
        experiment_id="round-1",
        baseline={"capacity_rps": sweep.capacity_rps},
    )
    changes = [p.intervention.engine_arg_diff for p in batch.proposals]
    assert any("--max-batch" in diff and int(diff["--max-batch"]) > 2 for diff in changes), changes

    # the toy's value checks and flag list are what validation uses
    bad = validate_intervention(
        Intervention(technique="t", engine_arg_diff={"--max-batch": "0"}), ["--max-batch", "2"], "toy", gpu_count=0
    )
    unknown = validate_intervention(
        Intervention(technique="t", engine_arg_diff={"--max-num-seqs": "8"}), ["--max-batch", "2"], "toy", gpu_count=0
    )
    assert not bad.ok and any("--max-batch must be >= 1" in r for r in bad.reasons), bad.reasons
    assert not unknown.ok


def test_an_engine_kind_without_an_adapter_is_a_definition_error_naming_the_file_and_line(tmp_path):
    import shutil

    from specs.config import DefinitionError
    from dagster_project.lib import load_definitions

    folder = tmp_path / "defs"
    shutil.copytree(paths.REPO_ROOT / "definitions" / "endpoints" / "tiny_random", folder / "tiny_random")
    file = folder / "tiny_random" / "defs.yaml"
    text = file.read_text()
    assert "kind: vllm" in text
    file.write_text(text.replace("kind: vllm", "kind: toy", 1))
    with pytest.raises(DefinitionError) as caught:
        load_definitions(folder)
    line = next(i for i, row in enumerate(file.read_text().splitlines(), 1) if "kind: toy" in row)
    issue = next(i for i in caught.value.issues if i.field == "attributes.engine.kind")
    assert issue.line == line and "unknown engine kind 'toy'" in issue.message and "vllm" in issue.message
