"""The Modal launcher: one experiment (engine + load generator) in one GPU container on Modal.

Built the way modal-labs/stopwatch runs vLLM and SGLang (an image holding the engine, a Volume
holding the weights, a GPU string), with one difference that matters for measurement: the load
generator runs in the SAME container as the engine, so the WAN never sits between client and
server. The container runs the same entry point as any host,
``autoresearch experiment run SPEC.json --out DIR``, and returns the files of DIR.

Everything here is built offline: :func:`plan` is plain data (what tests and docs read),
:func:`build` turns it into ``modal.App`` / ``modal.Image`` / ``modal.Volume`` / Function objects
without contacting Modal. Only :func:`run_remote` talks to Modal's cloud (never exercised here:
it is not reachable from the machines this project was built on).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from specs.config import EndpointSpec, LocalLauncher, ModalLauncher, modal_gpu
from specs.paths import REPO_ROOT
from launchers import LaunchRefused, modal_credentials, modal_credentials_from_env
from launchers.container import EXPERIMENT_ROOT, experiment_argv

# Where things live inside the container.
WEIGHTS_MOUNT = "/models"  # the weights Volume; AUTORESEARCH_MODELS points here (builtins are built here too)
PROJECT_DIR = "/opt/autoresearch"  # this project's source, pip-installed (the `autoresearch` command)
ENGINE_VENV = "/opt/engine"  # the engine's own environment, as on every host (docs/ENVIRONMENT)
PYTHON_VERSION = "3.12"  # as on the GPU machine this project measured on

# Source files only: no virtual environments, caches, results or local state travel into the image.
PROJECT_IGNORE = (
    ".git",
    ".venv*",
    ".autoresearch",
    "**/__pycache__",
    "**/*.pyc",
    "tests",
    "benchmarks",
    "data",
    "*.egg-info",
    "node_modules",
)


@dataclass(frozen=True)
class ModalPlan:
    """Everything the Modal objects are built from, as plain data."""

    app_name: str
    function_name: str
    gpu: str  # Modal's GPU string, e.g. "H200:1"
    timeout_s: int
    region: str | None
    volume_name: str
    weights_mount: str
    python_version: str
    build_commands: tuple[tuple[str, ...], ...]  # argument lists, run in order at image build time
    env: dict[str, str] = field(default_factory=dict)
    container_argv: tuple[str, ...] = ()

    def run_lines(self) -> list[str]:
        """The build commands as Modal's image layer wants them (Dockerfile RUN lines), quoted from lists."""
        return [shlex.join(argv) for argv in self.build_commands]


def _launcher(endpoint: EndpointSpec) -> ModalLauncher:
    if not isinstance(endpoint.launcher, ModalLauncher):
        raise LaunchRefused(f"endpoint {endpoint.name!r} has launcher.kind {endpoint.launcher.kind!r}, not modal")
    return endpoint.launcher


def container_model_path(path: str) -> str:
    """Where the endpoint's model lives in the container: builtins as they are (built under
    AUTORESEARCH_MODELS, i.e. in the Volume), a folder by its name at the Volume's root."""
    if path.startswith("builtin:"):
        return path
    return str(PurePosixPath(WEIGHTS_MOUNT) / PurePosixPath(path).name)


def container_endpoint(endpoint: EndpointSpec) -> EndpointSpec:
    """The endpoint as the experiment unit sees it inside the container: launched locally there,
    model in the Volume, the image's engine interpreter. Write experiment specs with this one."""
    model = endpoint.model.model_copy(update={"path": container_model_path(endpoint.model.path)})
    engine = endpoint.engine.model_copy(update={"python": None})
    return endpoint.model_copy(update={"launcher": LocalLauncher(), "model": model, "engine": engine})


def plan(endpoint: EndpointSpec) -> ModalPlan:
    """The Modal app, image, volume and function for ``endpoint``, as data (nothing imported or contacted)."""
    launcher = _launcher(endpoint)
    from engines.registry import adapter_class

    kind = endpoint.engine.kind
    packages = adapter_class(kind).remote_packages  # the engine's pinned packages (its adapter knows them)
    if not packages:
        raise LaunchRefused(f"endpoint {endpoint.name!r}: engine.kind {kind!r} cannot be launched on Modal")
    engine_pip = f"{ENGINE_VENV}/bin/pip"
    build = (
        ("python", "-m", "venv", ENGINE_VENV),
        (engine_pip, "install", "--no-cache-dir", *packages),
        ("python", "-m", "pip", "install", "--no-cache-dir", PROJECT_DIR),
    )
    env = {
        "AUTORESEARCH_MODELS": WEIGHTS_MOUNT,
        "AUTORESEARCH_ENGINE_PYTHON": f"{ENGINE_VENV}/bin/python",
        "AUTORESEARCH_HOME": f"{EXPERIMENT_ROOT}/home",
        "HF_HUB_OFFLINE": "1",  # weights come from the Volume, never from a hub at measurement time
        "PYTHONUNBUFFERED": "1",
    }
    return ModalPlan(
        app_name=launcher.app_name or f"autoresearch-{endpoint.name.replace('_', '-')}",
        function_name="run_experiment",
        gpu=modal_gpu(endpoint.hardware, launcher),
        timeout_s=launcher.timeout_s,
        region=launcher.region,
        volume_name=launcher.weights_volume,
        weights_mount=WEIGHTS_MOUNT,
        python_version=PYTHON_VERSION,
        build_commands=build,
        env=env,
        container_argv=tuple(experiment_argv()),
    )


def _modal():
    """Import the Modal SDK only when a Modal launch is asked for: it is a heavy client (gRPC,
    protobuf) that local runs and the Dagster code location never need."""
    try:
        import modal  # noqa: PLC0415 (lazy on purpose, see the docstring)
    except ImportError as exc:
        raise LaunchRefused(
            "the Modal SDK is not installed in this environment: pip install modal==1.6.4 "
            "(a dependency of this project; reinstall it with pip install -e .)"
        ) from exc
    return modal


@dataclass
class ModalBuild:
    """The built (not deployed) Modal objects for one endpoint, and the plan they came from."""

    plan: ModalPlan
    app: object
    image: object
    volume: object
    function: object


def build(endpoint: EndpointSpec, project_dir: Path = REPO_ROOT) -> ModalBuild:
    """modal.App, modal.Image, modal.Volume and the experiment Function for ``endpoint``; offline."""
    from launchers.container import run_experiment

    p = plan(endpoint)
    modal = _modal()
    image = (
        modal.Image.debian_slim(python_version=p.python_version)
        .add_local_dir(project_dir, PROJECT_DIR, copy=True, ignore=list(PROJECT_IGNORE))
        .run_commands(*p.run_lines())
        .env(p.env)
    )
    volume = modal.Volume.from_name(p.volume_name, create_if_missing=True)
    app = modal.App(p.app_name)
    # serialized=True: the app is built per endpoint at run time, not at import time of a module the
    # container could re-import; the body itself is launchers.container.run_experiment (in the image).
    function = app.function(
        image=image,
        gpu=p.gpu,
        timeout=p.timeout_s,
        region=p.region,
        volumes={p.weights_mount: volume},
        serialized=True,
        name=p.function_name,
    )(run_experiment)
    return ModalBuild(plan=p, app=app, image=image, volume=volume, function=function)


#: The one call into Modal's cloud: (built objects, spec JSON, container root, extra env) -> the
#: container's result (returncode, argv, files). A stand-in for Modal replaces exactly this.
RemoteCall = Callable[["ModalBuild", str, str, dict], dict]


def call_modal(built: ModalBuild, spec_json: str, root: str, env: dict) -> dict:
    """Run the experiment function on Modal with a client made from the environment's token.

    NOT EXERCISED: Modal's cloud is not reachable from where this was written; everything before
    this call (credentials, plan, build) is tested offline, this call is not."""
    token_id, token_secret = modal_credentials_from_env()
    modal = _modal()
    client = modal.Client.from_credentials(token_id, token_secret)  # never ~/.modal.toml
    with built.app.run(client=client):
        return built.function.remote(spec_json, root, env)


def run_remote(
    endpoint: EndpointSpec,
    spec_json: str,
    out_dir: Path,
    *,
    env: dict[str, str] | None = None,
    root: str = EXPERIMENT_ROOT,
    call: RemoteCall | None = None,
) -> dict:
    """Run one experiment on Modal; write the container's out dir into ``out_dir``; return the
    container's result (``returncode``, ``argv``, ``files``). Credentials: environment only."""
    modal_credentials(endpoint)  # fail closed before building anything
    built = build(endpoint)
    result = (call or call_modal)(built, spec_json, root, dict(env or {}))
    out_dir = Path(out_dir)
    for name, data in result["files"].items():
        target = (out_dir / name).resolve()
        if out_dir.resolve() not in target.parents:
            raise LaunchRefused(f"the container returned a file outside its out dir: {name!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return result
