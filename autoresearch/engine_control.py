"""``autoresearch engine up|down|status``: an engine that outlives the command that started it.

The state (pid, process group, URL, log) is a small JSON file per endpoint under
``$AUTORESEARCH_HOME/engines``; ``down`` only signals a process group whose leader still runs
the recorded command, so a recycled PID is never killed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx

from specs import paths
from specs.config import EndpointSpec


def _state_file(spec: EndpointSpec) -> Path:
    folder = paths.home() / "engines"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{spec.name}.json"


def _read_state(spec: EndpointSpec) -> dict | None:
    file = _state_file(spec)
    return json.loads(file.read_text()) if file.exists() else None


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _alive(state: dict) -> bool:
    """The recorded process still runs the recorded command (not a recycled PID)."""
    return bool(state) and _cmdline(state["pid"])[:3] == state["argv"][:3]


def up(spec: EndpointSpec) -> dict:
    """Start the endpoint's engine and leave it running; return its state. Idempotent.

    The start goes through ``engines.run_engine`` (purpose "serve"), detached once healthy and recorded:
    an engine that fails to start, or dies before it is recorded, raises ``EngineRunInvalid`` (reason and
    log tail; the CLI exits 2) and nothing is left running or recorded."""
    from engines import run_engine
    from launchers import LaunchRefused, preflight

    if preflight(spec) is not None:  # a Modal endpoint: credentials checked, app built offline
        raise LaunchRefused(
            f"endpoint {spec.name!r} runs on Modal: `engine up` keeps an engine running on this host, and a Modal "
            "endpoint's engine lives only inside one experiment's container (`autoresearch experiment run` through "
            "the Modal launcher, docs/launchers.md). The Modal app, image and volume were built offline; nothing "
            "was launched (the remote launch itself is not exercised by this command)."
        )
    state = _read_state(spec)
    if state and _alive(state):
        return state
    with run_engine(spec, workdir=None, purpose="serve") as engine:
        engine.check_alive()  # still healthy: what is recorded is a live engine
        state = {
            "endpoint": spec.name,
            "pid": engine.pid,
            "pgid": os.getpgid(engine.pid),
            "argv": engine.command,
            "base_url": engine.base_url,
            "served_model": engine.served_model,
            "log_path": str(engine.log_path),
            "engine_version": engine.identity.engine_version,
            "started_at": time.time(),
        }
        _state_file(spec).write_text(json.dumps(state, indent=2))
        engine.detach()  # `engine down` stops it, not this block's end nor this command's exit
    return state


def down(spec: EndpointSpec, timeout_s: float = 30.0) -> bool:
    """Stop a engine started by :func:`up`; False when none was running."""
    state = _read_state(spec)
    if not state or not _alive(state):
        _state_file(spec).unlink(missing_ok=True)
        return False
    os.killpg(state["pgid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(state) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(state):
        os.killpg(state["pgid"], signal.SIGKILL)
    _state_file(spec).unlink(missing_ok=True)
    return True


def status(spec: EndpointSpec) -> dict:
    """Health and a few live metrics of a running engine."""
    state = _read_state(spec)
    if not state or not _alive(state):
        return {"endpoint": spec.name, "healthy": False, "state": "down"}
    out = {**{k: state[k] for k in ("endpoint", "pid", "base_url", "served_model", "engine_version", "log_path")}}
    try:
        out["healthy"] = httpx.get(state["base_url"] + "/health", timeout=5).status_code == 200
    except httpx.HTTPError as exc:
        out.update(healthy=False, state=f"not answering ({type(exc).__name__})")
        return out
    try:
        from engines import adapter_for

        adapter = adapter_for(spec, 0, Path("."))
        snapshot = adapter.parse_metrics(
            httpx.get(state["base_url"] + adapter.metrics_path, timeout=5).text, time.time()
        )
        out.update(
            requests_running=snapshot.requests_running,
            requests_waiting=snapshot.requests_waiting,
            kv_cache_usage=snapshot.kv_cache_usage,
        )
    except Exception:  # metrics are a nicety in a status line, never a reason to fail it
        pass
    return out
