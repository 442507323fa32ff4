"""Sender processes: ``senders=N`` (or ``isolate=True``) runs each sender in a process of its own.

A subprocess (``python -m loadgen.runner``) rather than multiprocessing, so callers need no
``__main__`` guard; config, start time, stop reason and results travel as pickled frames over its
stdin/stdout. Several senders share one absolute start time (``time.monotonic`` is system-wide on
Linux); a lone sender picks its own start when told to go.
"""

from __future__ import annotations

import gc
import os
import pickle
import struct
import subprocess
import sys
import threading
import time

from loadgen.sender import _run_sender, _SenderConfig

_now = time.monotonic


def _write_frame(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read_frame(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("sender pipe closed")
    (size,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(size))


def sender_main() -> None:
    """Entry point of a sender process (``python -m loadgen.runner``): frames on stdin/stdout.

    In: config, then t0, then optionally a stop reason. Out: "ready", then the results.
    A subprocess rather than multiprocessing: callers need no ``__main__`` guard.
    """
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, never into the frame stream
    inp = sys.stdin.buffer
    stop: dict = {}
    try:
        cfg = _read_frame(inp)

        def t0_getter() -> float:
            go = _read_frame(inp)
            # A lone sender picks its own start, so a parent that stalls between "ready" and "go"
            # (a garbage collection of a large heap, a busy thread of the caller) delays the whole
            # run instead of making its first requests late. Several senders share the parent's t0.
            t0 = _now() + go["delay"] if go.get("t0") is None else go["t0"]
            stop["late_start_s"] = max(0.0, _now() - t0)
            stop["wall_t0"] = time.time() + (t0 - _now())

            def watch_stdin():
                try:
                    stop["reason"] = _read_frame(inp)
                except (EOFError, OSError, pickle.UnpicklingError):
                    pass

            threading.Thread(target=watch_stdin, daemon=True).start()
            return t0

        result = _run_sender(cfg, t0_getter, lambda: _write_frame(out, "ready"), lambda: stop.get("reason"))
        result.update(late_start_s=stop.get("late_start_s", 0.0), wall_t0=stop.get("wall_t0"))
        _write_frame(out, result)
    except BrokenPipeError:  # the parent is gone (killed): nobody is left to tell
        os._exit(0)
    except BaseException as exc:  # report, never leave the parent waiting
        try:
            _write_frame(out, {"error": f"{type(exc).__name__}: {exc}"})
        except BrokenPipeError:
            os._exit(0)
    try:
        out.close()
    except BrokenPipeError:
        pass
    os._exit(0)  # the stdin watcher thread may still be blocked in a read


def _run_multi(configs: list[_SenderConfig], stop_check, start_delay_s: float) -> tuple[list[dict], float]:
    """Run one sender process per config on a common absolute start time."""
    procs: list[subprocess.Popen] = []
    try:
        for cfg in configs:
            proc = subprocess.Popen(
                [sys.executable, "-m", "loadgen.runner"],
                stdin=subprocess.PIPE,  # noqa: S603
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONHASHSEED": "0"},
            )
            _write_frame(proc.stdin, cfg)
            procs.append(proc)
        for proc in procs:
            msg = _read_frame(proc.stdout)
            if msg != "ready":
                raise RuntimeError(f"sender process failed to start: {msg}")
        if len(procs) == 1:
            _write_frame(procs[0].stdin, {"t0": None, "delay": start_delay_s})
            wall = None  # the sender reports its own start
        else:
            collecting = gc.isenabled()
            gc.disable()  # no collection of the caller's heap between choosing t0 and handing it out
            try:
                t0 = _now() + max(start_delay_s, 0.3)  # a sender process on a busy host may take a while to wake
                wall = time.time() + (t0 - _now())
                for proc in procs:
                    _write_frame(proc.stdin, {"t0": t0, "delay": start_delay_s})
            finally:
                if collecting:
                    gc.enable()
        watcher_done = threading.Event()
        stopped: dict = {}

        def watch():
            while not watcher_done.wait(0.1):
                reason = stop_check() if stop_check else None
                if reason:
                    stopped["reason"] = reason
                    for proc in procs:
                        try:
                            _write_frame(proc.stdin, reason)
                        except OSError:
                            pass
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        results = []
        try:
            for proc in procs:
                msg = _read_frame(proc.stdout)
                if "error" in msg:
                    raise RuntimeError(f"sender process failed: {msg['error']}")
                results.append(msg)
        finally:
            watcher_done.set()
            watcher.join()
        if wall is None:
            wall = results[0].get("wall_t0") or time.time()
        return results, wall
    finally:
        for proc in procs:
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
