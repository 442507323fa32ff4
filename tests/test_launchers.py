"""Launchers: the YAML union (file:line errors), the Modal app built offline, and failing closed.

Modal's cloud is not reachable here: nothing below calls a Modal network API. The Modal objects
are constructed (which the SDK does locally) and inspected; fake credentials are set only to show
that validation passes up to the SDK boundary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specs.config import LocalLauncher, ModalLauncher
from dagster_project.lib import load_definitions
from specs.config import DefinitionError
from engines import EngineError, start_engine
from launchers import LaunchRefused, modal_credentials, preflight
from launchers.container import collect_files, experiment_argv

REPO = Path(__file__).resolve().parents[1]

ENDPOINT = """\
type: dagster_project.lib.Endpoint
attributes:
  name: chat_modal
  model: {{path: /weights/qwen3-random-442m, served_name: qwen3-random}}
  engine:
    kind: {engine}
    args: ["--continuous-batching"]
  hardware:
    gpu_type: {gpu_type}
    gpu_count: {gpu_count}
  launcher:
{launcher}
  sla: {{ttft_ms: 1500}}
  traffic: {{kind: sample}}
"""
MODAL_BLOCK = (
    "    kind: modal\n    app_name: ar-chat\n    weights_volume: ar-weights\n    timeout_s: 1800\n    region: us-east\n"
)


def write_endpoint(
    folder: Path,
    launcher: str = MODAL_BLOCK,
    engine: str = "transformers",
    gpu_type: str = "H200",
    gpu_count: int = 1,
    campaign: bool = False,
) -> Path:
    file = folder / "endpoints" / "chat_modal" / "defs.yaml"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(
        ENDPOINT.format(launcher=launcher.rstrip("\n"), engine=engine, gpu_type=gpu_type, gpu_count=gpu_count)
    )
    if campaign:
        (folder / "campaigns" / "chat_modal_default").mkdir(parents=True, exist_ok=True)
        (folder / "campaigns" / "chat_modal_default" / "defs.yaml").write_text(
            "type: dagster_project.lib.Campaign\nattributes:\n  name: chat_modal_default\n  endpoint: chat_modal\n"
        )
    return file


def defs_of(file: Path):
    """Everything declared in the defs folder that holds ``file`` (endpoints/<name>/defs.yaml)."""
    return load_definitions(file.parents[2])


def issues_of(file: Path) -> list:
    with pytest.raises(DefinitionError) as caught:
        defs_of(file)
    return caught.value.issues


def needs_modal():
    return pytest.importorskip(
        "modal",
        reason="the Modal SDK (modal==1.6.4, a project dependency) is not installed "
        "in this environment: pip install -e . installs it",
    )


# --- YAML: the union and its file:line errors --------------------------------------------------


def test_launcher_kinds_load_and_default_is_local(tmp_path):
    modal = defs_of(write_endpoint(tmp_path / "a")).endpoint("chat_modal")
    assert isinstance(modal.launcher, ModalLauncher)
    assert (
        modal.launcher.app_name,
        modal.launcher.weights_volume,
        modal.launcher.timeout_s,
        modal.launcher.region,
    ) == ("ar-chat", "ar-weights", 1800, "us-east")
    shipped = load_definitions(REPO / "definitions")
    assert all(isinstance(e.launcher, LocalLauncher) for e in shipped.endpoints.values())


def test_unknown_launcher_kind_names_file_line_and_allowed_kinds(tmp_path):
    file = write_endpoint(tmp_path, launcher="    kind: kubernetes\n")
    (issue,) = issues_of(file)
    assert (issue.file, issue.line, issue.field) == (file, 12, "attributes.launcher.kind")
    assert "'kubernetes'" in issue.message and "'local', 'modal'" in issue.message


def test_misconfigured_modal_block_names_each_line(tmp_path):
    file = write_endpoint(tmp_path, launcher="    kind: modal\n    modal_gpu: H200\n    timeout_s: soon\n")
    issues = {i.field: i for i in issues_of(file)}
    assert issues["attributes.launcher.modal_gpu"].line == 13
    assert (
        "allowed here: app_name, gpu_count, gpu_type, kind, region, timeout_s, weights_volume"
        in issues["attributes.launcher.modal_gpu"].message
    )
    assert issues["attributes.launcher.timeout_s"].line == 14
    assert str(issues["attributes.launcher.timeout_s"]).startswith(f"{file}:14: attributes.launcher.timeout_s: ")


def test_local_launcher_takes_no_options(tmp_path):
    file = write_endpoint(tmp_path, launcher="    kind: local\n    region: us-east\n")
    (issue,) = issues_of(file)
    assert (issue.line, issue.field) == (13, "attributes.launcher.region")
    assert issue.message == "unknown field; allowed here: kind"


@pytest.mark.parametrize(
    "gpu_type,gpu_count,launcher,line,field,expected",
    [
        ("cpu", 0, "    kind: modal\n", 11, "attributes.launcher", "needs a GPU"),
        ("H200", 0, "    kind: modal\n", 11, "attributes.launcher", "needs a GPU"),
        (
            "H200",
            1,
            "    kind: modal\n    gpu_count: 2\n",
            11,
            "attributes.launcher",
            "differs from hardware.gpu_count",
        ),
        ("H200", 1, "    kind: modal\n    gpu_type: H100!\n", 11, "attributes.launcher", "is not hardware.gpu_type"),
        ("H200", 1, "    kind: modal\n    gpu_type: H300\n", 13, "attributes.launcher.gpu_type", "unknown Modal GPU"),
    ],
)
def test_modal_launcher_must_fit_the_hardware(tmp_path, gpu_type, gpu_count, launcher, line, field, expected):
    file = write_endpoint(tmp_path, launcher=launcher, gpu_type=gpu_type, gpu_count=gpu_count)
    (issue,) = issues_of(file)
    assert (issue.line, issue.field) == (line, field) and expected in issue.message


def test_external_engine_cannot_be_launched_on_modal(tmp_path):
    file = write_endpoint(tmp_path)
    file.write_text(file.read_text().replace("kind: transformers", "kind: external\n    url: http://127.0.0.1:9"))
    (issue,) = issues_of(file)
    assert issue.field == "attributes.launcher" and "already runs elsewhere" in issue.message


def test_validate_cli_exits_1_with_file_line_for_a_bad_launcher(tmp_path):
    file = write_endpoint(tmp_path, launcher="    kind: modall\n")
    result = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "validate", str(tmp_path)], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 1
    assert f"{file}:12: attributes.launcher.kind: unknown kind 'modall'" in result.stderr


# --- Modal: built offline ---------------------------------------------------------------------


def test_modal_plan_gpu_string_volume_and_container_command(tmp_path):
    from engines.transformers_serve import TransformersServeAdapter
    from launchers.modal_app import container_endpoint, plan

    endpoint = defs_of(write_endpoint(tmp_path)).endpoint("chat_modal")
    p = plan(endpoint)
    assert (p.app_name, p.gpu, p.timeout_s, p.region, p.volume_name) == (
        "ar-chat",
        "H200:1",
        1800,
        "us-east",
        "ar-weights",
    )
    assert p.container_argv == (
        "autoresearch",
        "experiment",
        "run",
        "/tmp/autoresearch-experiment/spec.json",
        "--out",
        "/tmp/autoresearch-experiment/out",
    )
    packages = TransformersServeAdapter.remote_packages
    assert p.build_commands[1][-len(packages) :] == packages and "transformers==5.17.0" in packages
    assert p.build_commands[2] == ("python", "-m", "pip", "install", "--no-cache-dir", "/opt/autoresearch")
    assert p.env["AUTORESEARCH_MODELS"] == p.weights_mount == "/models"
    assert p.env["AUTORESEARCH_ENGINE_PYTHON"] == "/opt/engine/bin/python"
    inside = container_endpoint(endpoint)
    assert inside.model.path == "/models/qwen3-random-442m" and isinstance(inside.launcher, LocalLauncher)
    assert inside.engine.args == endpoint.engine.args


@pytest.mark.parametrize("engine,package", [("vllm", "vllm==0.32.0"), ("sglang", "sglang==0.5.23")])
def test_modal_plan_installs_the_endpoints_engine(tmp_path, engine, package):
    from launchers.modal_app import plan

    endpoint = defs_of(write_endpoint(tmp_path, engine=engine)).endpoint("chat_modal")
    engine_install = plan(endpoint).build_commands[1]
    assert engine_install[:2] == ("/opt/engine/bin/pip", "install") and package in engine_install


def test_modal_gpu_defaults_from_hardware_and_takes_modal_spelling(tmp_path):
    from launchers.modal_app import plan

    two = defs_of(write_endpoint(tmp_path / "a", launcher="    kind: modal\n", gpu_type="h100", gpu_count=2)).endpoint(
        "chat_modal"
    )
    assert plan(two).gpu == "H100:2" and plan(two).app_name == "autoresearch-chat-modal"
    pinned = defs_of(
        write_endpoint(tmp_path / "b", launcher="    kind: modal\n    gpu_type: H100!\n", gpu_type="H100")
    ).endpoint("chat_modal")
    assert plan(pinned).gpu == "H100!:1" and plan(pinned).region is None


def test_modal_objects_built_offline_carry_the_plan(tmp_path):
    modal = needs_modal()
    from launchers.modal_app import build

    endpoint = defs_of(write_endpoint(tmp_path)).endpoint("chat_modal")
    built = build(endpoint)
    assert isinstance(built.app, modal.App) and built.app.name == "ar-chat"
    assert isinstance(built.image, modal.Image) and isinstance(built.volume, modal.Volume)
    info = built.function.info()  # the SDK's local description of the function: no network
    assert info.gpus == [("H200", 1)]
    assert info.timeout == 1800 and info.regions == ["us-east"]
    assert info.volumes["/models"].name == "ar-weights"
    assert built.function.info().image_info.image_id is None  # never built or deployed
    run_lines = built.plan.run_lines()
    assert run_lines[0] == "python -m venv /opt/engine"
    assert run_lines[1].startswith("/opt/engine/bin/pip install --no-cache-dir torch==2.11.0 transformers==5.17.0")
    assert run_lines[2] == "python -m pip install --no-cache-dir /opt/autoresearch"


def test_container_body_runs_the_experiment_entry_point_and_returns_its_out_dir(tmp_path):
    assert experiment_argv("/x") == ["autoresearch", "experiment", "run", "/x/spec.json", "--out", "/x/out"]
    out = tmp_path / "out"
    (out / "sweeps").mkdir(parents=True)
    (out / "result.json").write_text('{"verdict": "valid"}')
    (out / "sweeps" / "0.json").write_bytes(b"{}")
    assert collect_files(out) == {"result.json": b'{"verdict": "valid"}', "sweeps/0.json": b"{}"}
    assert collect_files(tmp_path / "missing") == {}


# --- failing closed ---------------------------------------------------------------------------


def _env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    env.update(AUTORESEARCH_HOME=str(tmp_path / "home"), HOME=str(tmp_path / "user"), **extra)
    return env


def _cli(tmp_path: Path, definitions: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "--definitions", str(definitions), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(tmp_path, **env),
        timeout=120,
    )


@pytest.mark.parametrize(
    "command", [("engine", "up", "chat_modal"), ("campaign", "run", "chat_modal"), ("sweep", "chat_modal")]
)
def test_modal_without_credentials_fails_before_any_work(tmp_path, command):
    definitions = tmp_path / "defs"
    write_endpoint(definitions, campaign=True)
    # A token in ~/.modal.toml must not count: credentials come from the environment only.
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / ".modal.toml").write_text('[default]\ntoken_id = "ak-file"\ntoken_secret = "as-file"\n')
    result = _cli(tmp_path, definitions, *command, MODAL_TOKEN_ID="ak-only-the-id")
    assert result.returncode == 2, result.stderr
    assert "MODAL_TOKEN_SECRET is not set" in result.stderr
    assert "Export both MODAL_TOKEN_ID and MODAL_TOKEN_SECRET" in result.stderr
    assert not (tmp_path / "home").exists()  # no state, pool, campaign folder or engine log


def test_modal_with_credentials_builds_up_to_the_sdk_and_still_launches_nothing(tmp_path):
    needs_modal()
    definitions = tmp_path / "defs"
    write_endpoint(definitions, campaign=True)
    fake = {"MODAL_TOKEN_ID": "ak-fake-for-tests", "MODAL_TOKEN_SECRET": "as-fake-for-tests"}
    up = _cli(tmp_path, definitions, "engine", "up", "chat_modal", **fake)
    assert up.returncode == 2 and "not exercised" in up.stderr and "built offline" in up.stderr
    campaign = _cli(tmp_path, definitions, "campaign", "run", "chat_modal", **fake)
    assert campaign.returncode == 2 and "nothing was started or written" in campaign.stderr
    assert not (tmp_path / "home").exists()
    assert "as-fake-for-tests" not in up.stderr + up.stdout + campaign.stderr + campaign.stdout


def test_credentials_come_from_the_environment(tmp_path, monkeypatch):
    endpoint = defs_of(write_endpoint(tmp_path)).endpoint("chat_modal")
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    with pytest.raises(LaunchRefused, match="MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are not set"):
        preflight(endpoint)
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-x")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", " as-y ")
    assert modal_credentials(endpoint) == ("ak-x", "as-y")


def test_local_launcher_refuses_a_modal_endpoint(tmp_path):
    endpoint = defs_of(write_endpoint(tmp_path)).endpoint("chat_modal")
    with pytest.raises(EngineError, match="launcher.kind 'modal'.*Nothing was started"):
        start_engine(endpoint, workdir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert preflight(load_definitions(REPO / "definitions").endpoint("support_smollm")) is None


def test_container_endpoint_round_trips_as_json(tmp_path):
    from specs.config import EndpointSpec
    from launchers.modal_app import container_endpoint

    endpoint = defs_of(write_endpoint(tmp_path)).endpoint("chat_modal")
    inside = EndpointSpec.model_validate(json.loads(container_endpoint(endpoint).model_dump_json()))
    assert inside.launcher.kind == "local" and inside.hardware == endpoint.hardware


# --- the Pipes client, with a stand-in for Modal at the SDK boundary ---------------------------

CONTAINER_SCRIPT = """
import sys
from pathlib import Path
from dagster_pipes import open_dagster_pipes
with open_dagster_pipes() as pipes:
    pipes.log.info("experiment started in the stand-in container")
    pipes.report_asset_materialization(metadata={"capacity_rps": 2.5, "verdict": "better"})
(Path(sys.argv[1]) / "result.json").write_text('{"verdict": "better"}')
"""


class ModalContainerStandIn:
    """A STAND-IN FOR MODAL: replaces only launchers.modal_app.call_modal (the one SDK call into
    Modal's cloud). It plays the container as a separate process: dagster_pipes with the bootstrap
    environment it was handed, a result.json, and the out dir returned as the real function body does."""

    def __init__(self, returncode: int = 0):
        self.returncode = returncode
        self.calls: list[tuple] = []

    def __call__(self, built, spec_json: str, root: str, env: dict) -> dict:
        self.calls.append((built.plan.gpu, spec_json, root, sorted(env)))
        out = Path(root) / "out"
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-c", CONTAINER_SCRIPT, str(out)], env={**os.environ, **env}, check=True, timeout=120
        )
        return {"returncode": self.returncode, "argv": experiment_argv(root), "files": collect_files(out)}


def test_pipes_client_passes_bootstrap_env_and_reports_the_containers_messages(tmp_path, monkeypatch):
    import dagster as dg

    from dagster_project.modal_pipes import PipesModalClient

    needs_modal()
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-fake-for-tests")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-fake-for-tests")
    endpoint = defs_of(write_endpoint(tmp_path / "defs")).endpoint("chat_modal")
    stand_in = ModalContainerStandIn()
    client = PipesModalClient(root=str(tmp_path / "container"), call=stand_in)

    @dg.asset
    def experiment(context):
        return client.run(
            context=context, endpoint=endpoint, spec_json='{"args": []}', out_dir=tmp_path / "out"
        ).get_materialize_result()

    result = dg.materialize([experiment])
    assert result.success
    (materialization,) = result.asset_materializations_for_node("experiment")
    assert materialization.metadata["capacity_rps"].value == 2.5
    assert json.loads((tmp_path / "out" / "result.json").read_text()) == {"verdict": "better"}
    ((gpu, spec_json, _, env_keys),) = stand_in.calls
    assert gpu == "H200:1" and spec_json == '{"args": []}'
    assert env_keys == ["DAGSTER_PIPES_CONTEXT", "DAGSTER_PIPES_MESSAGES"]


def test_pipes_client_fails_the_step_when_the_experiment_fails(tmp_path, monkeypatch):
    import dagster as dg

    from dagster_project.modal_pipes import PipesModalClient

    needs_modal()
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-fake-for-tests")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-fake-for-tests")
    endpoint = defs_of(write_endpoint(tmp_path / "defs")).endpoint("chat_modal")
    client = PipesModalClient(root=str(tmp_path / "container"), call=ModalContainerStandIn(returncode=3))

    @dg.asset
    def experiment(context):
        return client.run(context=context, endpoint=endpoint, spec_json="{}", out_dir=tmp_path / "out")

    result = dg.materialize([experiment], raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "experiment on Modal for chat_modal exited 3" in failure.step_failure_data.error.message


def test_remote_run_without_credentials_calls_nothing(tmp_path, monkeypatch):
    from launchers.modal_app import run_remote

    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-x")
    stand_in = ModalContainerStandIn()
    endpoint = defs_of(write_endpoint(tmp_path / "defs")).endpoint("chat_modal")
    with pytest.raises(LaunchRefused, match="MODAL_TOKEN_SECRET is not set"):
        run_remote(endpoint, "{}", tmp_path / "out", root=str(tmp_path / "c"), call=stand_in)
    assert stand_in.calls == [] and not (tmp_path / "out").exists()
