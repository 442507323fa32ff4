"""The one way the product runs an engine: ``with run_engine(spec, workdir=..., purpose=...) as engine``.

Every call site that measures, profiles, captures or serves through an engine it starts goes through
:func:`run_engine`, so the rules of measurement hold for all of them alike:

- launch and health wait (``engines.start_engine``), and the stop when the block ends, however it ends;
- the orphan guard: with ``active_file`` the engine's pid and command line are recorded there while it
  runs, and an engine an earlier, killed run left recorded in that file is stopped first
  (:func:`stop_orphan`), never a recycled pid;
- the crash-is-invalid rule: an engine that fails to start, or dies (or stops answering) while the
  block uses it, surfaces as :class:`EngineRunInvalid` with a one-line ``reason`` and the log tail,
  never as a stray ``httpx``/``OSError`` or a silent measurement. What it was measuring is invalid, and
  each call site records that as its own ``invalid`` result.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from engines.base import EngineCrashed, EngineError
from specs.config import EndpointSpec

log = logging.getLogger(__name__)

__all__ = ["EngineRunInvalid", "run_engine", "stop_orphan", "write_active_file"]

#: call sites, as named in logs and errors
PURPOSES = ("candidate", "baseline", "sweep", "reference", "replay", "profile", "drafter", "unit", "serve")


class EngineRunInvalid(EngineError):
    """The engine failed to start or died while in use: whatever it was measuring is invalid.

    ``reason`` is one line (``"engine died mid-sweep (exit -9)"``, ``"launch failed: ..."``);
    ``log_tail`` the engine log's last lines (None when there is no log); ``purpose`` the call site;
    ``launch_failed`` whether it never became healthy (else it died while in use); ``returncode`` the
    engine's exit code when it ended. ``str()`` is the reason, then the log tail (as EngineCrashed's)."""

    def __init__(
        self,
        reason: str,
        log_tail: str | None = None,
        *,
        purpose: str = "",
        launch_failed: bool = False,
        returncode: int | None = None,
    ) -> None:
        self.reason = (reason.strip().splitlines() or ["engine run invalid"])[0]
        self.log_tail = log_tail or None
        self.purpose = purpose
        self.launch_failed = launch_failed
        self.returncode = returncode
        super().__init__(f"{self.reason}\n--- engine log (tail) ---\n{self.log_tail}" if self.log_tail else self.reason)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def write_active_file(active_file: Path, pid: int, argv: list[str] | None = None) -> None:
    """Record the running engine (pid and command line) in ``active_file`` for :func:`stop_orphan`.
    ``argv``: the command it was launched with (known at spawn, before /proc shows it: the process may
    still be in the exec shim that restores default signals); else what /proc says now."""
    active_file.parent.mkdir(parents=True, exist_ok=True)
    active_file.write_text(json.dumps({"pid": pid, "argv": list(argv) if argv else _cmdline(pid) or []}))


def stop_orphan(active_file: Path, progress: Callable[[str], None] = print, wait_s: float = 20.0) -> bool:
    """Stop an engine a killed run left running (recorded in ``active_file``); True if one was stopped.

    The process is only signalled when its command line is still the recorded one (no pid reuse).
    """
    from engines.process import group_alive

    active_file = Path(active_file)
    if not active_file.exists():
        return False
    try:
        info = json.loads(active_file.read_text())
        pid, argv = int(info["pid"]), list(info["argv"])
    except (OSError, ValueError, KeyError, TypeError):
        active_file.unlink(missing_ok=True)
        return False
    stopped = False
    running = _cmdline(pid) or []
    if argv and running[-len(argv) :] == argv:  # the launch command (behind the signal shim, if it still runs)
        progress(f"stopping engine pid {pid} left running by an interrupted run")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while group_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not group_alive(pid):
                break
        stopped = True
    active_file.unlink(missing_ok=True)
    return stopped


#: how long a block that ended normally waits for a dying engine's exit code (a SIGKILLed process is reaped
#: within milliseconds; a healthy engine costs this once per run)
NORMAL_END_WAIT_S = 0.5


def _exit_code(engine, wait_s: float = 0.0) -> int | None:
    """The engine's exit code when its process has ended, waiting up to ``wait_s`` for it (None: still
    running, or not ours to watch). A killed process closes its sockets before it can be reaped, so a
    client can see the connection drop a moment before the exit code is there."""
    process = getattr(engine, "process", None)
    if process is None:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            code = process.poll()
        except Exception:  # noqa: BLE001 - a process we cannot ask about is not known dead
            return None
        if code is not None or time.monotonic() >= deadline:
            return code
        time.sleep(0.05)


def _tail(engine) -> str | None:
    try:
        return engine.log_tail() or None
    except Exception:  # noqa: BLE001 - best effort
        return None


@contextmanager
def run_engine(
    spec: EndpointSpec,
    *,
    workdir: Path | None,
    purpose: str,
    args_override: list[str] | None = None,
    profile: bool = False,
    active_file: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Iterator:
    """Start ``spec``'s engine in ``workdir``, yield the healthy ``RunningEngine``, stop it at the end.

    ``purpose`` names the call site ("candidate", "baseline", "sweep", "reference", "replay", "profile",
    "drafter", "unit", "serve"); ``args_override`` replaces engine.args; ``profile`` enables the torch
    profiler; ``active_file``: where the engine's pid is recorded while it runs (an orphan recorded there
    by a killed predecessor is stopped first). Raises :class:`EngineRunInvalid` when the launch fails
    (``"launch failed: ..."``), and when the block raises while the engine is dead or not answering
    (``"engine died mid-<purpose> (exit -9)"``), or ends normally with the engine dead: what the block
    measured on a dead engine is not a measurement. Other exceptions of the block pass through
    unchanged (a bug is not an engine crash). ``engine.detach()`` inside the block leaves the engine
    running after it (``autoresearch engine up``).
    """
    from engines import start_engine

    say = progress or (lambda _line: None)
    if active_file is not None:
        stop_orphan(Path(active_file), say)
    # recorded as soon as it exists: a run killed while its engine starts leaves a known orphan
    record = (lambda pid, argv: write_active_file(Path(active_file), pid, argv)) if active_file is not None else None
    try:
        engine = start_engine(spec, workdir=workdir, args_override=args_override, profile=profile, on_spawn=record)
    except Exception as exc:
        if active_file is not None:  # the failed start stopped its process: nothing is left to record
            Path(active_file).unlink(missing_ok=True)
        if isinstance(exc, EngineError):
            raise EngineRunInvalid(
                f"launch failed: {_first_line(exc)}",
                getattr(exc, "log_tail", None) or None,  # a refused launch (bad flags) has no log: the reason says it
                purpose=purpose,
                launch_failed=True,
                returncode=getattr(exc, "returncode", None),
            ) from exc
        # an unexpected launch error is still a failed launch, never a traceback
        raise EngineRunInvalid(
            f"launch failed: {exc!r}", traceback.format_exc()[-4000:], purpose=purpose, launch_failed=True
        ) from exc
    if active_file is not None and engine.pid is not None and not Path(active_file).exists():
        write_active_file(Path(active_file), engine.pid)  # an engine started without a spawn hook (external)
    try:
        try:
            yield engine
        except EngineRunInvalid:
            raise
        except Exception as exc:
            died = _death(engine, purpose, exc)
            if died is not None:
                raise died from exc
            raise
        if not getattr(engine, "detached", False) and not getattr(engine, "died_as_measured", False):
            died = _death(engine, purpose)  # ended normally: on an engine still alive and answering?
            if died is not None:
                raise died
    finally:
        if not getattr(engine, "detached", False):
            _stop(engine, purpose, active_file, say)


def _stop(engine, purpose: str, active_file: Path | None, say: Callable[[str], None]) -> None:
    """Stop the engine. A stop that fails is a warning, never the result (what was measured stands), and
    keeps ``active_file``, so the next run with it stops what is left (:func:`stop_orphan`)."""
    try:
        engine.stop()
    except Exception as exc:  # noqa: BLE001 - the result matters more than a stop hiccup
        message = f"warning: stopping the {purpose} engine failed: {exc!r}"
        log.warning(message)
        say(f"  {message}")
        return
    if active_file is not None:
        Path(active_file).unlink(missing_ok=True)


def _death(engine, purpose: str, exc: BaseException | None = None) -> EngineRunInvalid | None:
    """An EngineRunInvalid when the engine died or stopped answering while the block used it, else None.

    ``exc``: what the block raised (None: it ended normally). The process's exit code decides; when the
    process still looks alive, its health URL is asked (``check_alive``): a silent engine is one going
    down (its exit code is then awaited briefly) or a hung one. An engine this project does not run
    (kind external) is only asked when the block failed."""
    process = getattr(engine, "process", None)
    crash = exc if isinstance(exc, EngineCrashed) else None
    # a block that ended normally may have swallowed the dropped connection of an engine killed a moment
    # ago (reference outputs note a failed request and go on): its exit code is awaited briefly
    code = _exit_code(engine, wait_s=0.0 if exc is not None else NORMAL_END_WAIT_S)
    if exc is None and code is None:
        # ended normally on a process that has not exited: what it measured stands (its own steps judged
        # their validity); a /health that is merely slow on a loaded host must not void a finished run
        return None
    if code is None and crash is None:
        try:
            engine.check_alive()
        except EngineCrashed as found:
            crash = found
        except Exception:  # noqa: BLE001 - the block's own error (if any) is the one to report
            return None
    if code is None and crash is not None:
        code = _exit_code(engine, wait_s=5.0)
        if code is None and process is None:
            code = crash.returncode
    if code is not None:
        # a crash the block raised itself says why (the profiler's memory guard stopped the engine)
        why = f": {_first_line(exc)}" if isinstance(exc, EngineCrashed) and str(exc).strip() else ""
        return EngineRunInvalid(
            f"engine died mid-{purpose} (exit {code}){why}", _tail(engine), purpose=purpose, returncode=code
        )
    if crash is not None:  # alive, but not answering: hung
        return EngineRunInvalid(
            f"engine failed mid-{purpose}: {_first_line(crash)}",
            crash.log_tail or _tail(engine),
            purpose=purpose,
            returncode=crash.returncode,
        )
    return None
