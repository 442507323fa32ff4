"""Shared process management for engine servers.

An engine is a tree of processes (vLLM's API server spawns an engine-core process, and
more). We start it in its own session so the whole tree is one process group: stopping
signals the group, first SIGTERM, then SIGKILL, and waits until no member is left: members
still alive a short grace after the leader ended are killed one by one, by PID, and named in
the stop report. On a GPU host the report also says, through NVML, whether the GPU memory the
engine held was given back (``ManagedProcess.stop_report``). Output goes to a log file whose
tail explains crashes. Health is a plain ``GET`` that must answer
200; a process that exits while we wait, or a server that stops answering, raises
:class:`~engines.base.EngineCrashed` with the log tail.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engines import gpu
from engines.base import EngineCrashed, EngineError

log = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def read_tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a (possibly large) log file; empty if it does not exist."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max(256 * 1024, lines * 512)))  # ~512 bytes a line at most
            data = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(deque(data.splitlines(), maxlen=lines))


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, read from /proc.

    Zombies are dead already; they are skipped because an orphan's zombie is reaped by
    whatever runs as PID 1, which in containers may be slow or never. A process whose main
    thread has ended shows as a zombie while its other threads still run: it is live."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry / "stat")
        if len(fields) > 2 and int(fields[2]) == pgid and (fields[0] != "Z" or _threads_alive(entry)):
            members.append(int(entry.name))
    return members


def _stat_fields(path: Path) -> list[str]:
    """The fields of a /proc stat file after the parenthesised command name: state ppid pgrp ..."""
    try:
        stat = path.read_text()
    except OSError:
        return []
    return stat[stat.rfind(")") + 2 :].split()


def _threads_alive(proc_dir: Path) -> bool:
    """Whether any thread of the process at ``proc_dir`` is not a zombie."""
    try:
        tasks = list((proc_dir / "task").iterdir())
    except OSError:
        return False
    return any((fields := _stat_fields(task / "stat")) and fields[0] != "Z" for task in tasks)


def group_alive(pgid: int) -> bool:
    """Whether any live process is left in process group ``pgid``."""
    if Path("/proc/self/stat").exists():
        return bool(group_members(pgid))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member exists that we may not signal
        return True
    return True


def group_rss_bytes(pgid: int) -> int:
    """Resident memory of every live process in group ``pgid`` together (0 when /proc is absent)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in group_members(pgid):
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def group_cpu_seconds(pgid: int) -> float | None:
    """CPU seconds (user + system) spent so far by the live processes of group ``pgid``; None without /proc.
    A process that ended between two readings drops out of the sum: compare readings of a running engine."""
    if not Path("/proc/self/stat").exists():
        return None
    ticks = 0
    for pid in group_members(pgid):
        fields = _stat_fields(Path(f"/proc/{pid}/stat"))
        if len(fields) > 12:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def host_cpu_ticks() -> tuple[int, int] | None:
    """(stolen, total) CPU ticks of the whole host since boot (/proc/stat: the hypervisor's "steal" is time a
    virtual CPU was ready to run and another guest ran instead); None where there is no /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    values = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    return (values[7] if len(values) > 7 else 0), sum(values)


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


class RssGuard:
    """Kill process group ``pgid`` if its resident memory passes ``limit_bytes`` (checked every
    ``interval_s`` on a daemon thread) so that a runaway engine (a torch profile that never stops
    growing) ends as a recorded failure instead of taking the host down with the OOM killer."""

    def __init__(self, pgid: int, limit_bytes: int, interval_s: float = 0.5):
        import threading

        self.pgid, self.limit_bytes, self.interval_s = pgid, limit_bytes, interval_s
        self.peak_bytes, self.tripped = 0, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"rss-guard-{pgid}", daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            rss = group_rss_bytes(self.pgid)
            self.peak_bytes = max(self.peak_bytes, rss)
            if rss > self.limit_bytes:
                self.tripped = True
                try:
                    os.killpg(self.pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "RssGuard":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _pgid_of(pid: int) -> int | None:
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return int(fields[2]) if len(fields) > 2 else None


# Run before the engine's own program when this process ignores SIGTERM or SIGINT: an ignored signal
# survives exec, so the engine would ignore our stop. Dagster maps SIGTERM to SIGINT's handler after
# an in-process run, and SIGINT is ignored under a non-interactive shell's `&`: then SIGTERM is too.
_EXEC_WITH_DEFAULT_SIGNALS = (
    "import os, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_DFL); "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"
)


def _with_default_signals(argv: list[str]) -> list[str]:
    """``argv``, behind an exec shim that restores SIGTERM/SIGINT when this process ignores either
    (the shim execs in place: same pid, same process group). Thread-safe, unlike ``preexec_fn``."""
    ignored = any(signal.getsignal(sig) == signal.SIG_IGN for sig in (signal.SIGTERM, signal.SIGINT))
    return [sys.executable, "-c", _EXEC_WITH_DEFAULT_SIGNALS, *argv] if ignored else list(argv)


def _sigterm_state(pid: int) -> str:
    """Why a process may outlive SIGTERM, from /proc: its state, and whether SIGTERM is ignored,
    blocked or caught (a handler that does not exit)."""
    try:
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
    except OSError:
        return "no /proc status"
    bit = 1 << (signal.SIGTERM - 1)
    marks = [
        name
        for name, key in (("ignored", "SigIgn"), ("blocked", "SigBlk"), ("caught", "SigCgt"), ("pending", "ShdPnd"))
        if int(status.get(key, "0").strip() or "0", 16) & bit
    ]
    return f"state {status.get('State', '?').strip()}, SIGTERM {' and '.join(marks) or 'default'}"


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()[:300] or "?"


@dataclass
class StopReport:
    """What stopping an engine found: leftovers killed, and whether its GPU memory came back.

    ``warnings`` is what a caller should record (and what was logged); ``leak`` is True when NVML
    showed the GPU memory still held after the processes ended."""

    returncode: int | None = None
    seconds: float = 0.0
    group_killed: bool = False  # the leader ignored SIGTERM: SIGKILL to the whole group
    leftover_pids: list[int] = field(default_factory=list)  # alive after the leader ended, killed by PID
    leftover_commands: list[str] = field(default_factory=list)
    gpu: gpu.GpuReleaseCheck | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def leak(self) -> bool:
        return self.gpu is not None and self.gpu.leak

    def as_dict(self) -> dict[str, Any]:
        return {
            "returncode": self.returncode,
            "seconds": round(self.seconds, 3),
            "group_killed": self.group_killed,
            "leftover_pids": self.leftover_pids,
            "leftover_commands": self.leftover_commands,
            "gpu": self.gpu.as_dict() if self.gpu else None,
            "leak": self.leak,
            "warnings": self.warnings,
        }


_LIVE: set["ManagedProcess"] = set()


@atexit.register
def _stop_leftovers() -> None:
    """An interpreter that exits normally takes its engines with it (no orphaned servers)."""
    for proc in list(_LIVE):
        proc.kill()


class ManagedProcess:
    """One engine server process tree, started in its own session, output captured to a log."""

    def __init__(
        self,
        argv: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        pass_fds: tuple[int, ...] = (),
    ):
        if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
            raise EngineError(f"launch command must be a non-empty list of strings, got {argv!r}")
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.env = env
        self.cwd = cwd
        self.pass_fds = tuple(pass_fds)  # descriptors the engine keeps open (GPU lease locks)
        self._popen: subprocess.Popen | None = None
        self.gpu_at_start: dict[int, int] | None = None  # NVML memory used per GPU just before the start
        self.gpu_note: str | None = None  # why there is no GPU reading (no NVML on this host, ...)
        self.stop_report: StopReport | None = None

    @property
    def visible_gpus(self) -> str | None:
        """CUDA_VISIBLE_DEVICES the engine runs with (None: unset, every GPU)."""
        return gpu.visible_devices(self.env)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> "ManagedProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.gpu_at_start, self.gpu_note = gpu.memory_used(self.visible_gpus)
        with open(self.log_path, "ab") as log:
            try:
                self._popen = subprocess.Popen(  # noqa: S603 - argument list, never a shell
                    _with_default_signals(self.argv),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=self.pass_fds,
                )
            except OSError as exc:
                raise EngineError(f"could not start {self.argv[0]}: {exc}") from exc
        _LIVE.add(self)
        return self

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise EngineError("process not started")
        return self._popen.pid

    @property
    def pgid(self) -> int:
        return self.pid  # start_new_session=True: the leader's pid is the group id

    def poll(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def log_tail(self, lines: int = 60) -> str:
        return read_tail(self.log_path, lines)

    def crashed(self, message: str) -> EngineCrashed:
        return EngineCrashed(message, log_tail=self.log_tail(), returncode=self.poll())

    # -- health --------------------------------------------------------------------------
    def wait_healthy(self, url: str, timeout_s: float, poll_s: float = 0.5) -> float:
        """Poll ``url`` until it answers 200; return seconds waited. Raise EngineCrashed if the
        process exits or ``timeout_s`` passes (the process is left running; the caller stops it)."""
        start = time.monotonic()
        with httpx.Client(timeout=min(5.0, max(timeout_s, 0.5))) as client:
            while True:
                code = self.poll()
                if code is not None:
                    raise self.crashed(f"engine exited with code {code} before becoming healthy ({self.argv[0]} ...)")
                try:
                    if client.get(url).status_code == 200:
                        return time.monotonic() - start
                except httpx.HTTPError:
                    pass
                if time.monotonic() - start > timeout_s:
                    raise self.crashed(f"engine not healthy at {url} after {timeout_s:.0f}s")
                time.sleep(poll_s)

    def check_alive(self, health_url: str | None, hang_timeout_s: float = 10.0) -> None:
        """Raise EngineCrashed if the process exited, or if ``health_url`` does not answer 200
        within ``hang_timeout_s`` (a hung server)."""
        code = self.poll()
        if code is not None:
            raise self.crashed(f"engine process {self.pid} exited with code {code}")
        if health_url is None:
            return
        try:
            status = httpx.get(health_url, timeout=hang_timeout_s).status_code
        except httpx.HTTPError as exc:
            code = self.poll()
            if code is not None:
                raise self.crashed(f"engine process {self.pid} exited with code {code}") from exc
            raise self.crashed(
                f"engine hung: {health_url} did not answer within {hang_timeout_s:.0f}s ({type(exc).__name__})"
            ) from exc
        if status != 200:
            raise self.crashed(f"engine unhealthy: {health_url} answered {status}")

    # -- stop ----------------------------------------------------------------------------
    def stop(
        self,
        term_timeout_s: float = 20.0,
        kill_timeout_s: float = 10.0,
        leftover_grace_s: float = 5.0,
        gpu_release_timeout_s: float = 5.0,
    ) -> int | None:
        """SIGTERM the process group and wait for its leader; SIGKILL the group if the leader ignores it.
        Members still alive ``leftover_grace_s`` after the leader ended are killed by PID (only processes
        whose group is the one we started). Returns the leader's exit code only when no member of the
        group is left (or raises EngineError). Then, on a GPU host, waits up to ``gpu_release_timeout_s``
        for NVML to show the GPU memory back at its pre-start level. ``self.stop_report`` says what
        happened; leftovers and a leak are logged as warnings."""
        if self._popen is None:
            return None
        t0 = time.monotonic()
        pgid = self.pgid
        report = StopReport()
        before_stop = gpu.memory_used(self.visible_gpus)[0] if self.gpu_at_start is not None else None
        if self._popen.poll() is not None:
            # The leader already died (a crash): orphaned workers have nobody to shut down
            # for, and the one vLLM leaves behind ignores SIGTERM for ~20 s. Do not wait long.
            term_timeout_s = min(term_timeout_s, 2.0)
        self._signal_group(pgid, signal.SIGTERM)
        deadline = t0 + term_timeout_s
        self._wait(lambda: self._popen.poll() is not None or not group_alive(pgid), deadline)
        if self._popen.poll() is None:
            report.group_killed = True
            report.warnings.append(
                f"engine process {pgid} ignored SIGTERM for {term_timeout_s:.0f}s "
                f"({_sigterm_state(pgid)}): SIGKILL to its process group"
            )
            self._signal_group(pgid, signal.SIGKILL)
        elif not self._wait_group(pgid, min(leftover_grace_s, max(0.0, deadline - time.monotonic()))):
            self._kill_leftovers(pgid, report)
        if not self._wait_group(pgid, kill_timeout_s):
            raise EngineError(f"process group {pgid} still has members after SIGKILL")
        # /proc shows the leader as a zombie as soon as its main thread ends, while its other threads may
        # still be exiting and the kernel will not report it to waitpid yet: reap it before returning.
        if not self._wait(lambda: self._popen.poll() is not None, time.monotonic() + kill_timeout_s):
            raise EngineError(f"engine process {self._popen.pid} ended but could not be reaped")
        _LIVE.discard(self)
        report.returncode = self._popen.poll()
        report.gpu = self._check_gpu_released(before_stop, gpu_release_timeout_s)
        if report.gpu.leak:
            report.warnings.append(f"GPU memory leak after stopping the engine: {report.gpu.note}")
        report.seconds = time.monotonic() - t0
        for warning in report.warnings:
            log.warning("%s (%s)", warning, self.argv[0])
        self.stop_report = report
        return report.returncode

    def _kill_leftovers(self, pgid: int, report: StopReport) -> None:
        """SIGKILL, one by one, the live members of group ``pgid`` (the leader has ended)."""
        if not Path("/proc/self/stat").exists():  # no /proc to list them: the group as a whole
            self._signal_group(pgid, signal.SIGKILL)
            report.warnings.append(f"process group {pgid} outlived its leader: SIGKILL to the group")
            return
        for pid in group_members(pgid):
            command = _cmdline(pid)
            if _pgid_of(pid) != pgid:  # ended, and its PID reused, since it was listed
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            report.leftover_pids.append(pid)
            report.leftover_commands.append(command)
        if report.leftover_pids:
            report.warnings.append(
                f"killed {len(report.leftover_pids)} leftover process(es) of group {pgid} still alive after the "
                f"engine's main process ended: "
                + "; ".join(f"{p} {c[:120]}" for p, c in zip(report.leftover_pids, report.leftover_commands))
            )

    def _check_gpu_released(self, before_stop: dict[int, int] | None, timeout_s: float) -> gpu.GpuReleaseCheck:
        if self.gpu_at_start is None:
            return gpu.GpuReleaseCheck("no-nvml", self.gpu_note or "no GPU memory reading at the engine's start")
        visible = self.visible_gpus
        return gpu.wait_memory_released(
            self.gpu_at_start, lambda: gpu.memory_used(visible)[0], before_stop=before_stop, timeout_s=timeout_s
        )

    def detach(self) -> None:
        """Leave the server running after this interpreter exits (``autoresearch engine up``): the
        exit hook that stops leftover engines no longer takes it."""
        _LIVE.discard(self)

    def kill(self) -> None:
        """SIGKILL the whole group now (used by crash tests and as a last resort)."""
        if self._popen is not None:
            self._signal_group(self.pgid, signal.SIGKILL)

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    def _wait(self, done, deadline: float) -> bool:
        while True:
            self._popen.poll()  # reap the leader so it does not linger as a zombie
            if done():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def _wait_group(self, pgid: int, timeout_s: float) -> bool:
        return self._wait(lambda: not group_alive(pgid), time.monotonic() + timeout_s)
