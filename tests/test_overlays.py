"""Runtime overlays (engines/overlays.py): asked for in engine.args, applied through the environment of
the engine process only, content-hashed into the engine's identity. The loader and the overlays run in
a real interpreter here (the engine environment's Python, with its transformers); no engine starts."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from specs.paths import engine_python
from engines import engine_identity, overlays
from engines.overlays import FLAG, Overlay, OverlayError, split
from engines.registry import adapter_class

CB_PROBE = (
    "from transformers.generation.configuration_utils import ContinuousBatchingConfig as C; "
    "print('kv', C().kv_padding_interval_size)"
)


def test_overlay_arguments_are_taken_out_of_the_command_line_in_both_spellings():
    own, asked = split(
        [
            "--continuous-batching",
            FLAG,
            'transformers_cb_config={"kv_padding_interval_size": 4096}',
            "--cb-use-cuda-graph",
            f"{FLAG}=planted_slowdown=0.2",
        ]
    )
    assert own == ["--continuous-batching", "--cb-use-cuda-graph"]
    assert [(r.overlay.name, r.settings) for r in asked] == [
        ("transformers_cb_config", '{"kv_padding_interval_size": 4096}'),
        ("planted_slowdown", "0.2"),
    ]


@pytest.mark.parametrize(
    "args, says",
    [
        ([FLAG, "no_such_overlay"], "is not a known overlay"),
        ([FLAG], "needs a value"),
        ([FLAG, "vllm_issue_55005=1"], "takes no settings"),
        ([FLAG, "transformers_cb_config=[1, 2]"], "must be a JSON object"),
        ([FLAG, "transformers_cb_config={not json"], "must be a JSON object"),
        ([FLAG, "vllm_issue_55005", FLAG, "vllm_issue_55005"], "twice"),
    ],
)
def test_an_overlay_that_cannot_be_honoured_is_refused_with_the_reason(args, says):
    with pytest.raises(OverlayError, match=says):
        split(args)


def test_each_adapter_accepts_only_overlays_made_for_its_engine(definitions):
    spec = definitions.endpoint("tiny_random")
    vllm = adapter_class("vllm")(spec, 0, Path("."))
    assert vllm.validate_flags(["--max-num-seqs", "4", FLAG, "vllm_issue_55005"]) == []
    refused = vllm.validate_flags([FLAG, 'transformers_cb_config={"scheduler_type": "fifo"}'])
    assert refused and "made for transformers, not vllm" in refused[0]
    transformers = adapter_class("transformers")(spec, 0, Path("."))
    assert transformers.validate_flags(["--continuous-batching", FLAG, "planted_slowdown=0.1"]) == []


def test_the_overlay_is_hashed_into_the_identity_and_never_reaches_the_command_line(definitions):
    base = definitions.endpoint("tiny_random")
    with_patch = base.with_engine_args(list(base.engine.args) + [FLAG, "vllm_issue_55005"])
    plain, patched = engine_identity(base), engine_identity(with_patch)
    assert plain.overlays == () and dict(patched.overlays) == {
        "vllm_issue_55005": overlays.REGISTRY["vllm_issue_55005"].sha256()
    }
    assert FLAG not in patched.launch_command and patched.launch_command == plain.launch_command
    assert patched.launch_config_hash != plain.launch_config_hash  # a different configuration


def test_a_changed_overlay_file_is_a_different_hash(tmp_path):
    shutil.copytree(overlays.PATCHES / "vllm_issue_55005", tmp_path / "copy")
    copy = Overlay("copy", frozenset({"vllm"}), "patch", "a copy", root=tmp_path)
    before = copy.sha256()
    assert before == Overlay("vllm_issue_55005", frozenset({"vllm"}), "patch", "").sha256()
    with open(tmp_path / "copy" / "sitecustomize.py", "a") as handle:
        handle.write("\n# one more line\n")
    assert copy.sha256() != before


def _run_with(args: list[str], code: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    _, asked = split(args)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | (extra_env or {})
    env.update(overlays.launch_env(asked, env))
    return subprocess.run([str(engine_python()), "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_a_settings_overlay_changes_the_engine_interpreter_and_only_it():
    """The engine's Python sees the overlay's field; the same interpreter without it keeps the default."""
    applied = _run_with([FLAG, 'transformers_cb_config={"kv_padding_interval_size": 4096}'], CB_PROBE)
    assert applied.returncode == 0, applied.stderr[-2000:]
    assert "kv 4096" in applied.stdout
    plain = _run_with([], CB_PROBE)
    assert plain.returncode == 0 and "kv 4096" not in plain.stdout


def test_an_overlay_that_cannot_apply_stops_the_interpreter_with_its_reason():
    """A field the installed transformers lacks: the process exits at once naming it (an engine started
    so never answers /health, and the harness calls the candidate invalid with this log line)."""
    failed = _run_with([FLAG, 'transformers_cb_config={"no_such_field": 1}'], CB_PROBE)
    assert failed.returncode != 0
    assert "no_such_field" in failed.stderr and "kv" not in failed.stdout


def test_two_overlays_compose_and_an_environment_sitecustomize_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['ENV_SITECUSTOMIZE_RAN'] = '1'\n")
    done = _run_with(
        [FLAG, 'transformers_cb_config={"kv_padding_interval_size": 2048}', FLAG, "planted_slowdown=0"],
        CB_PROBE + "; import os; print('env', os.environ.get('ENV_SITECUSTOMIZE_RAN'))",
        extra_env={"PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kv 2048" in done.stdout and "env 1" in done.stdout
