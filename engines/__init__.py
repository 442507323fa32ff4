"""Inference engine adapters: launch, health, metrics, cache reset, profiling, stop (no Dagster imports).

Public API::

    with run_engine(spec, workdir=..., purpose="sweep", args_override=[...]) as engine:
        engine.base_url, engine.served_model, engine.identity     # every engine start goes through it:
        engine.metrics(); engine.reset_prefix_cache(); engine.check_alive()   # launch, health, stop,
    # orphan guard (active_file), and a crash or failed launch -> EngineRunInvalid (reason, log_tail)
    start_engine(spec)                      # the bare launch run_engine uses (engines.session only)
    engine_identity(spec)                   # what would be measured, without starting anything
    adapter_for(spec, port, workdir)        # the engine-specific adapter (commands, metric names)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from specs.config import EndpointSpec
from engines.base import EngineAdapter, EngineCrashed, EngineError, EngineIdentity, MetricsSnapshot
from engines import overlays
from engines.gpu_lease import acquire
from engines.process import ManagedProcess, free_port, port_is_free
from engines.session import EngineRunInvalid, run_engine, stop_orphan

__all__ = [
    "EngineAdapter",
    "EngineCrashed",
    "EngineError",
    "EngineIdentity",
    "EngineRunInvalid",
    "MetricsSnapshot",
    "RunningEngine",
    "adapter_for",
    "attach_external",
    "engine_identity",
    "resolve_model_dir",
    "run_engine",
    "start_engine",
    "stop_orphan",
]

_MODEL_PLACEHOLDER_PORT = "{port}"


def adapter_for(spec: EndpointSpec, port: int, workdir: Path) -> EngineAdapter:
    """The adapter for ``spec.engine.kind`` (from engines.registry)."""
    from engines.registry import adapter_class

    return adapter_class(spec.engine.kind)(spec, port, Path(workdir))


def resolve_model_dir(spec: EndpointSpec) -> Path:
    """The local model directory (builtin models are built once and cached)."""
    from specs.models import ModelUnavailable, ensure_model

    try:
        return ensure_model(spec.model.path)
    except ModelUnavailable as exc:
        raise EngineError(f"endpoint {spec.name!r}: {exc}") from exc


def _identity(adapter: EngineAdapter, argv: list[str], model_dir: Path | str) -> EngineIdentity:
    """Identity with the launch command normalised (port and model folder as in the YAML), so an
    identity computed without starting equals the one of the started engine."""
    spec = adapter.spec
    command = []
    for i, token in enumerate(argv):
        if i == 0 and token == adapter.engine_python():
            command.append(Path(token).name)  # the interpreter's location is the host's, not the config's
        elif i > 0 and argv[i - 1] == "--port" and token == str(adapter.port):
            command.append(_MODEL_PLACEHOLDER_PORT)
        elif token == str(model_dir):
            command.append(spec.model.path)
        else:
            command.append(token)
    version = adapter.engine_version()
    return EngineIdentity(
        engine=adapter.kind,
        engine_version=version,
        model=spec.model.served_name or spec.model.path,
        model_revision=spec.model.revision,
        launch_config_hash=spec.launch_config_hash(),
        launch_command=tuple(command),
        overlays=overlays.hashes(_overlays_of(spec)),
    )


def _overlays_of(spec: EndpointSpec) -> list:
    """The runtime overlays engine.args asks for (engines.overlays), then the adapter's own evidence
    overlay (its internals, where it exports no metrics); EngineError when one cannot be honoured."""
    try:
        asked = overlays.split(list(spec.engine.args))[1]
    except overlays.OverlayError as exc:
        raise EngineError(f"endpoint {spec.name!r}: {exc}") from None
    from engines.registry import ADAPTERS

    probe = ADAPTERS[spec.engine.kind].evidence_overlay if spec.engine.kind in ADAPTERS else None
    if probe and all(r.overlay.name != probe for r in asked):
        asked.append(overlays.Requested(overlays.REGISTRY[probe], None))
    return asked


def engine_identity(spec: EndpointSpec) -> EngineIdentity:
    """What ``start_engine(spec)`` would measure: engine and version, model, revision, config hash.
    Starts nothing and builds no model (the engine version is asked of the engine venv once)."""
    adapter = adapter_for(spec, 0, Path("."))
    if not adapter.manages_process:
        return EngineIdentity(
            engine="external",
            engine_version="unknown",
            model=adapter.served_model_name(Path(".")),
            model_revision=spec.model.revision,
            launch_config_hash=spec.launch_config_hash(),
            launch_command=(adapter.base_url,),
        )
    argv = adapter.launch_command(Path(spec.model.path))
    return _identity(adapter, argv, spec.model.path)


class RunningEngine:
    """A started (or, for kind external, attached) engine. Use as a context manager, or call stop()."""

    def __init__(
        self,
        adapter: EngineAdapter,
        process: ManagedProcess | None,
        served_model: str,
        identity: EngineIdentity,
        command: list[str],
        profile_dir: Path | None,
    ):
        self.adapter = adapter
        self.process = process
        self.served_model = served_model
        self.identity = identity
        self.command = command  # the exact argument list that was run (identity.launch_command is normalised)
        self.profile_dir = profile_dir
        self._profile_started: float | None = None
        self._stopped = False
        self.detached = False  # left running on purpose (detach()): run_engine does not stop it
        # its death was what the block measured (a soak that found an OOM): run_engine does not call the
        # measurement invalid for it
        self.died_as_measured = False
        self.startup_s: float | None = None  # launch to healthy, measured by start_engine
        self.gpu_lease = None  # engines.gpu_lease.GpuLease held while the engine runs (None: no GPU pinning)
        self.gpu_wait_s = 0.0  # time start_engine waited for free GPUs (not engine time: not charged)

    # -- facts ---------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.adapter.base_url

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def spec(self) -> EndpointSpec:
        return self.adapter.spec

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def log_path(self) -> Path | None:
        return self.process.log_path if self.process else None

    @property
    def workdir(self) -> Path:
        return self.adapter.workdir

    def log_tail(self, n: int = 60) -> str:
        return self.process.log_tail(n) if self.process else ""

    # -- health --------------------------------------------------------------------------
    def check_alive(self, hang_timeout_s: float = 10.0) -> None:
        """Raise EngineCrashed if the engine exited or its health URL does not answer in time."""
        if self.process is None:
            try:
                status = httpx.get(self.base_url + self.adapter.health_path, timeout=hang_timeout_s).status_code
            except httpx.HTTPError as exc:
                raise EngineCrashed(f"external engine at {self.base_url} not answering: {type(exc).__name__}") from exc
            if status != 200:
                raise EngineCrashed(f"external engine at {self.base_url} answered {status}")
            return
        self.process.check_alive(self.base_url + self.adapter.health_path, hang_timeout_s)

    # -- metrics -------------------------------------------------------------------------
    def metrics(self, timeout_s: float = 10.0) -> MetricsSnapshot:
        """One scrape of /metrics mapped onto MetricsSnapshot (empty for engines without metrics)."""
        now = time.time()
        if not self.adapter.metrics_path:
            return self.adapter.parse_metrics("", now)
        try:
            response = httpx.get(self.base_url + self.adapter.metrics_path, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise self._failure(f"metrics scrape failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 404 and not self.adapter.manages_process:
            return self.adapter.parse_metrics("", now)  # an external server without /metrics
        if response.status_code != 200:
            raise EngineError(f"{self.base_url}{self.adapter.metrics_path} answered {response.status_code}")
        return self.adapter.parse_metrics(response.text, now)

    # -- control -------------------------------------------------------------------------
    def _require(self, path: str | None, what: str) -> str:
        if not self.adapter.manages_process:
            raise EngineError(
                f"endpoint {self.spec.name!r} is external: {what} is not allowed on a server this project does not own"
            )
        if not path:
            raise EngineError(f"the {self.adapter.kind} engine has no {what} endpoint")
        return self.base_url + path

    def _post(self, url: str, timeout_s: float, what: str) -> httpx.Response:
        try:
            response = httpx.post(url, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise self._failure(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise EngineError(f"{what}: {url} answered {response.status_code}: {response.text[:500]}")
        return response

    def _failure(self, message: str) -> EngineError:
        if self.process is not None and self.process.poll() is not None:
            return self.process.crashed(f"engine exited with code {self.process.poll()} ({message})")
        return EngineError(message)

    def reset_prefix_cache(self, timeout_s: float = 30.0) -> None:
        """Drop every cached prefix block (the engine must be idle for vLLM to accept it)."""
        self._post(
            self._require(self.adapter.reset_prefix_cache_path, "prefix-cache reset"), timeout_s, "prefix-cache reset"
        )

    @property
    def profile_started(self) -> float | None:
        """When the running profile started (epoch seconds); None when none runs."""
        return self._profile_started

    def start_profile(self, timeout_s: float = 60.0) -> None:
        """Start the torch profiler (the engine must have been started with profile=True)."""
        url = self._require(self.adapter.start_profile_path, "profiler")
        if self.profile_dir is None:
            raise EngineError("profiling needs the engine started with start_engine(..., profile=True)")
        self._profile_started = time.time()
        self._post(url, timeout_s, "start_profile")

    def stop_profile(self, timeout_s: float = 180.0, wait_file_s: float = 120.0) -> Path:
        """Stop the profiler; return the newest Chrome trace (``*.json.gz``) written since start."""
        url = self._require(self.adapter.stop_profile_path, "profiler")
        if self._profile_started is None or self.profile_dir is None:
            raise EngineError("stop_profile without start_profile")
        with self._rss_guard() as guard:
            try:
                self._post(url, timeout_s, "stop_profile")
            except EngineError:
                if not guard.tripped:
                    raise
            if guard.tripped:
                self._profile_started = None
                raise self.process.crashed(
                    f"stopped the engine: its memory grew to {guard.peak_bytes / 2**30:.1f} GiB (limit "
                    f"{guard.limit_bytes / 2**30:.1f} GiB) while the torch profiler wrote its trace; profile a "
                    "shorter window (campaign profile_seconds) or set profile_seconds: 0"
                )
        started, self._profile_started = self._profile_started, None
        deadline = time.monotonic() + wait_file_s
        while True:
            traces = [
                p
                for p in self.profile_dir.rglob("*.json*")
                if p.is_file() and p.stat().st_mtime >= started - 1 and not p.name.endswith(".tmp")
            ]
            if traces:
                return max(traces, key=lambda p: p.stat().st_mtime)
            if time.monotonic() > deadline:
                raise EngineError(f"no trace file appeared under {self.profile_dir} after stop_profile")
            time.sleep(0.5)

    def _rss_guard(self):
        """An RssGuard on this engine's process group: its memory now plus half of what the host has
        free (a trace export needs some; the vLLM CPU profiler once grew a worker to 21 GiB)."""
        from engines.process import RssGuard, available_memory_bytes, group_rss_bytes

        free = available_memory_bytes() or 8 * 2**30
        return RssGuard(self.pid, group_rss_bytes(self.pid) + free // 2)

    def detach(self) -> None:
        """Leave the engine running after its ``run_engine`` block and this interpreter (``autoresearch
        engine up``); ``autoresearch engine down`` stops it."""
        self.detached = True
        if self.process is not None:
            self.process.detach()

    def stop(self) -> int | None:
        """Stop the whole process tree (SIGTERM, then SIGKILL; leftovers killed by PID); no-op for
        external engines. Idempotent. ``stop_report`` then says what was killed and whether NVML saw
        the GPU memory released (``stop_report.leak``, ``stop_report.warnings``); it is also written
        to ``workdir/stop_report.json``."""
        if self._stopped or self.process is None:
            self._stopped = True
            return None
        self._stopped = True
        try:
            code = self.process.stop(term_timeout_s=self.adapter.stop_grace_s)
        finally:
            if self.gpu_lease is not None:
                self.gpu_lease.release()
        report = self.process.stop_report
        if report is not None:
            try:
                (self.workdir / "stop_report.json").write_text(json.dumps(report.as_dict(), indent=2))
            except OSError:
                pass
        return code

    @property
    def stop_report(self):
        """The engines.process.StopReport of the last stop (None before, and for external engines)."""
        return self.process.stop_report if self.process is not None else None

    def __enter__(self) -> "RunningEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RunningEngine({self.adapter.kind} {self.served_model!r} at {self.base_url}, pid={self.pid})"


def _default_workdir(spec: EndpointSpec, port: int) -> Path:
    from specs.paths import runs_dir

    return runs_dir() / "engines" / f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}-{port}"


def attach_external(spec: EndpointSpec, workdir: Path | None = None, health_timeout_s: float = 30.0) -> RunningEngine:
    """Measure an already-running server (kind external): nothing is started or stopped."""
    adapter = adapter_for(spec, 0, workdir or Path("."))
    engine = RunningEngine(adapter, None, adapter.served_model_name(Path(".")), engine_identity(spec), [], None)
    engine.check_alive(hang_timeout_s=health_timeout_s)
    return engine


def start_engine(
    spec: EndpointSpec,
    *,
    port: int | None = None,
    workdir: Path | None = None,
    args_override: list[str] | None = None,
    profile: bool = False,
    validate: bool = True,
    gpu_wait_s: float | None = None,
    on_spawn: Callable[[int, list[str]], None] | None = None,
) -> RunningEngine:
    """Resolve the model, launch the engine, wait until healthy; return a RunningEngine.

    ``on_spawn(pid, argv)`` is called as soon as the process exists, before the (long) wait for health: a
    caller killed during the start has then already recorded the engine it leaves behind.

    ``args_override`` replaces engine.args (the launch config hash follows it); ``profile``
    enables the torch profiler (trace files under ``workdir/profiles``); ``validate`` rejects
    unknown flags before anything starts. Raises EngineCrashed (with the log tail) if the engine
    exits or is not healthy within engine.startup_timeout_s; the process is then stopped.

    GPUs: an engine of ``hardware.gpu_count`` > 0 first leases that many free GPUs of this host
    (engines.gpu_lease; waiting up to ``gpu_wait_s``, None = until free) and runs with
    ``CUDA_VISIBLE_DEVICES`` set to them, so two engines never share a GPU. Not when the YAML's
    engine.env pins CUDA_VISIBLE_DEVICES itself, nor on a host without GPUs.
    """
    if args_override is not None:
        if not isinstance(args_override, list) or not all(isinstance(a, str) for a in args_override):
            raise EngineError(f"args_override must be a list of strings, got {args_override!r}")
        spec = spec.with_engine_args(args_override)
    if spec.launcher.kind != "local":  # never run a remote endpoint here by accident
        raise EngineError(
            f"endpoint {spec.name!r} declares launcher.kind {spec.launcher.kind!r}: the local launcher "
            "does not start it on this host (a Modal experiment runs in its own container, see "
            "docs/launchers.md). Nothing was started."
        )
    if spec.engine.kind == "external":
        return attach_external(spec, workdir)
    port = port or spec.engine.port or free_port()
    if not port_is_free(port):
        raise EngineError(f"port {port} on 127.0.0.1 is already in use")
    workdir = Path(workdir) if workdir else _default_workdir(spec, port)
    workdir.mkdir(parents=True, exist_ok=True)
    adapter = adapter_for(spec, port, workdir)
    if validate:
        problems = adapter.validate_flags(list(spec.engine.args))
        if problems:
            raise EngineError(f"endpoint {spec.name!r}: engine.args would not launch: " + "; ".join(problems))
    model_dir = resolve_model_dir(spec)
    argv = adapter.launch_command(model_dir)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", **adapter.launch_env(), **spec.engine.env}
    env.update(overlays.launch_env(_overlays_of(spec), env))  # in this engine process only
    lease = None
    if "CUDA_VISIBLE_DEVICES" not in spec.engine.env:
        asked = time.monotonic()
        lease = acquire(spec.hardware.gpu_count, wait_s=gpu_wait_s)
        waited = time.monotonic() - asked
        if lease is not None:
            env.update(lease.env)
    try:
        engine = _launch(spec, adapter, model_dir, argv, env, workdir, port, profile, lease, on_spawn)
        engine.gpu_wait_s = waited if lease is not None else 0.0
        return engine
    except BaseException:
        if lease is not None:
            lease.release()
        raise


def _launch(
    spec: EndpointSpec,
    adapter: EngineAdapter,
    model_dir: Path,
    argv: list[str],
    env: dict[str, str],
    workdir: Path,
    port: int,
    profile: bool,
    lease,
    on_spawn: Callable[[int, list[str]], None] | None = None,
) -> RunningEngine:
    identity = _identity(adapter, argv, model_dir)  # profiling does not change what is measured
    profile_dir = None
    if profile:
        profile_dir = workdir / "profiles"
        profile_dir.mkdir(parents=True, exist_ok=True)
        argv = argv + adapter.profile_args(profile_dir)
        env.update(adapter.profile_env(profile_dir))
    # Record what runs (argument list and the names, never values, of extra environment).
    (workdir / "launch.json").write_text(
        json.dumps(
            {
                "argv": argv,
                "env_keys": sorted({**adapter.launch_env(), **spec.engine.env}),
                "port": port,
                "gpus": list(lease.devices) if lease is not None else None,
            },
            indent=2,
        )
    )
    launched = time.monotonic()
    # The engine inherits the lease's lock descriptors: its GPUs stay leased while it lives.
    process = ManagedProcess(
        argv, workdir / "engine.log", env=env, cwd=workdir, pass_fds=lease.fds if lease is not None else ()
    ).start()
    try:
        if on_spawn is not None:
            on_spawn(process.pid, list(argv))
        process.wait_healthy(adapter.base_url + adapter.health_path, spec.engine.startup_timeout_s)
    except BaseException:
        process.stop()
        raise
    engine = RunningEngine(adapter, process, adapter.served_model_name(model_dir), identity, argv, profile_dir)
    engine.startup_s = time.monotonic() - launched
    engine.gpu_lease = lease
    return engine
