"""One open-loop sender: its schedule loop, connection pool, timeouts and aborts, in one event loop.

The scheduler sleeps on the event-loop timer until ``spin_s`` before the next deadline, then spins
through event-loop iterations (still serving I/O) until the deadline; the send lag is dispatch -
scheduled time, where dispatch is when the request takes an idle connection or starts opening one.
Spare connections are kept open ahead of need and idle ones older than ``idle_close_s`` are closed.
:func:`_run_sender` runs one sender to completion (in the caller's process or in a sender process,
:mod:`loadgen.sender_process`) with garbage collection frozen and paused, and returns compact rows
(:func:`loadgen.outcome._compact`).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from loadgen.connection import _Conn, _ConnectionClient, _new_loop, _raise_nofile, _Req
from loadgen.outcome import _compact

_now = time.monotonic


class _Client(_ConnectionClient):
    """One sender: schedule loop, connection pool, timeouts, abort checks. Runs inside one event loop."""

    def __init__(
        self,
        loop,
        host: str,
        port: int,
        payloads: list[bytes],
        indices: np.ndarray,
        offsets: np.ndarray,
        t0: float,
        timeout_s: float,
        spin_s: float,
        spare: int,
        idle_close_s: float,
        stop_check: Callable[[], str | None] | None,
    ):
        self.loop = loop
        self.host, self.port = host, port
        self.payloads = payloads
        self.indices = indices
        self.offsets = offsets
        self.t0 = t0
        self.timeout_s = timeout_s
        self.spin_s = spin_s
        self.spare = spare
        self.idle_close_s = idle_close_s
        self.stop_check = stop_check
        self.idle: list[_Conn] = []
        self.busy: set[_Conn] = set()
        self.reqs: list[_Req] = []
        self.next = 0
        self.opening = 0
        self.pending_sends = 0
        self.connections_opened = 0
        self.client_errors = 0
        self.aborted: str | None = None
        self.finished = loop.create_future()
        self._timer = None

    # -- connections ---------------------------------------------------------------------
    async def _open_spare(self):
        self.opening += 1
        try:
            conn = await self._open()
        except OSError:
            return  # a spare is a convenience; a due request opens its own and reports failure
        finally:
            self.opening -= 1
        if not conn.closed:
            conn.last_used = _now()
            self.idle.append(conn)

    def _take_idle(self) -> _Conn | None:
        idle = self.idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    def _refill(self):
        missing = self.spare - len(self.idle) - self.opening
        for _ in range(min(missing, 64)):
            self.loop.create_task(self._open_spare())

    def done(self, conn: _Conn, req: _Req, keep: bool):
        self.busy.discard(conn)
        if keep and not conn.closed and self.aborted is None:
            self.idle.append(conn)
        elif not conn.closed:
            conn.closed = True
            conn.transport.close()
        if self.next >= len(self.indices) and not self.busy and not self.pending_sends:
            self._complete()

    def lost(self, conn: _Conn):
        self.busy.discard(conn)

    # -- sending -------------------------------------------------------------------------
    def _send(self, k: int):
        i = int(self.indices[k])
        req = _Req(i, float(self.offsets[k]))
        self.reqs.append(req)
        payload = self.payloads[i % len(self.payloads)]
        req.sent = _now()  # dispatch: from here on, waiting (for a new connection too) is the server's time
        conn = self._take_idle()
        if conn is not None:
            self._write(conn, req, payload)
        else:
            self.pending_sends += 1
            self.loop.create_task(self._open_and_send(req, payload))
        if len(self.idle) < self.spare // 2:
            self._refill()

    def _maybe_complete(self):
        if self.next >= len(self.indices) and not self.busy and not self.pending_sends:
            self._complete()

    def _complete(self):
        if not self.finished.done():
            self.finished.set_result(None)

    def tick(self):
        offsets, t0, n = self.offsets, self.t0, len(self.indices)
        k = self.next
        now = _now()
        burst = 0
        while k < n and t0 + offsets[k] <= now:
            self.next = k + 1  # before _send: a failure inside must not resend
            self._send(k)
            k += 1
            burst += 1
            if burst >= 16:  # behind schedule: let responses in (they free connections) before sending more
                self.loop.call_soon(self.tick)
                return
            now = _now()
        if k >= n or self.aborted is not None:
            self._maybe_complete()
            return
        wait = t0 + offsets[k] - now
        if wait > self.spin_s:
            self._timer = self.loop.call_later(wait - self.spin_s, self.tick)
        else:
            self.loop.call_soon(self.tick)

    # -- housekeeping --------------------------------------------------------------------
    def housekeeping(self):
        """Every 100 ms: request timeouts, stale idle connections, spare refill, abort requests."""
        if self.finished.done():
            return
        now = _now()
        reason = self.stop_check() if self.stop_check else None
        if reason and self.aborted is None:
            self.abort(reason)
            return
        self._fail_overdue(now)
        if self.idle:
            fresh = []
            for conn in self.idle:
                if conn.closed:
                    continue
                if now - conn.last_used > self.idle_close_s:
                    conn.closed = True
                    conn.transport.close()
                else:
                    fresh.append(conn)
            self.idle = fresh
        if self.next < len(self.indices):
            self._refill()
        self.loop.call_later(0.1, self.housekeeping)

    def abort(self, reason: str):
        self.aborted = reason
        if self._timer is not None:
            self._timer.cancel()
        now = _now()
        for k in range(self.next, len(self.indices)):
            req = _Req(int(self.indices[k]), float(self.offsets[k]))
            req.error = f"not sent: run aborted ({reason})"
            self.reqs.append(req)
        self.next = len(self.indices)
        for conn in list(self.busy):
            conn._fail(now, f"aborted: {reason}")
        for conn in self.idle:
            conn.closed = True
            conn.transport.close()
        self.idle = []
        self._maybe_complete()


@dataclass
class _SenderConfig:
    host: str
    port: int
    payloads: list[bytes]
    indices: np.ndarray
    offsets: np.ndarray
    timeout_s: float
    spin_s: float
    spare: int
    warm: int
    idle_close_s: float
    nice: int | None = None


def _run_sender(
    cfg: _SenderConfig,
    t0_getter: Callable[[], float],
    ready: Callable[[], None] | None,
    stop_check: Callable[[], str | None] | None,
) -> dict:
    """Run one sender to completion in a fresh event loop; return compact results."""
    _raise_nofile()
    if cfg.nice is not None:
        try:  # only in sender processes: a higher priority makes the client wake on time on a busy host
            os.setpriority(os.PRIO_PROCESS, 0, cfg.nice)
        except OSError:
            pass
    loop = _new_loop()
    asyncio.set_event_loop(loop)
    try:
        client = _Client(
            loop,
            cfg.host,
            cfg.port,
            cfg.payloads,
            cfg.indices,
            cfg.offsets,
            0.0,
            cfg.timeout_s,
            cfg.spin_s,
            cfg.spare,
            cfg.idle_close_s,
            stop_check,
        )
        loop.run_until_complete(client.warm(cfg.warm))
        if ready:
            ready()
        gc.collect()
        gc.freeze()  # everything alive now is never scanned again during the run
        gc_was = gc.isenabled()
        gc.disable()
        t0 = client.t0 = t0_getter()
        cpu0, wall0 = time.process_time(), _now()
        try:
            delay = max(0.0, t0 - _now() - cfg.spin_s)
            loop.call_later(delay, client.tick)
            loop.call_later(0.1, client.housekeeping)
            loop.run_until_complete(client.finished)
        finally:
            cpu, wall = time.process_time() - cpu0, _now() - wall0
            gc.unfreeze()
            if gc_was:
                gc.enable()
        for conn in client.idle + list(client.busy):
            if conn.transport is not None:
                conn.transport.close()
        loop.run_until_complete(asyncio.sleep(0))
        rows = [_compact(r, t0) for r in client.reqs]
        return {
            "rows": rows,
            "connections_opened": client.connections_opened,
            "client_errors": client.client_errors,
            "cpu_util": cpu / wall if wall > 0 else None,
            "aborted": client.aborted,
        }
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        asyncio.set_event_loop(None)
