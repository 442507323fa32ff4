"""The open-loop runner: every request goes out at its scheduled time, whatever the server does.

Why it is built this way (each point is something a slow client would otherwise hide):

* One absolute clock (``time.monotonic``, system-wide on Linux, so sender processes agree).
  The scheduler sleeps on the event-loop timer until ``spin_s`` before the next deadline, then
  spins through event-loop iterations (still serving I/O) until the deadline: uvloop's timer has
  millisecond resolution, the spin makes sends land within microseconds.
* A lean HTTP/1.1 keep-alive client on asyncio Protocols over uvloop: requests are pre-encoded
  bytes, responses are framed (Content-Length or chunked) and stored as timed pieces; SSE/JSON
  parsing happens after the run (see :mod:`loadgen.sse`). Garbage collection is paused during
  the run so no collector pause lands on a send.
* The connection pool grows without limit: a due request takes an idle connection, or opens a
  new one at once. Spare connections are kept open ahead of need; idle ones older than
  ``idle_close_s`` are closed before servers time them out (uvicorn's keep-alive is 5 s).
  RLIMIT_NOFILE is raised to its hard limit. A request the client itself could not send (no
  file descriptor, no local port) is a client error and invalidates the run.
* The runner measures its own send lag (dispatch - scheduled time; dispatch is when it takes an
  idle connection or starts opening one, so a server slow to accept connections counts against
  the server's latency, not the client's lag; ``connect_s`` records that wait) and achieved rate; when
  the p99 lag or the achieved/target rate is outside :class:`LagBounds`, the run is invalid with
  the reason: a slow client must never look like a slow server.
* Rates beyond one core: ``senders=N`` runs N processes, each owning every N-th request of the
  schedule, all on the same absolute start time.
* Request fields an engine rejects (its adapter's ``rejected_request_fields``, e.g. ``stream_options``
  on ``transformers serve``) are left out of every body, the runner's own additions included:
  pass them as ``omit_fields`` (the sweep passes the engine adapter's ``rejected_request_fields``).
  Output tokens are then counted from the usage the engine sends anyway, else one per content event.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import os
import pickle
import resource
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Collection, Sequence
from urllib.parse import urlsplit

import numpy as np

from loadgen.results import LatencySummary, RequestRecord
from loadgen.sse import http_request, parse_stream, prepare_body

_now = time.monotonic
CLIENT_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS, errno.ENOMEM}
CLIENT_ERROR_PREFIX = "client:"


@dataclass(frozen=True)
class LagBounds:
    """When a run counts as client-bound (invalid). Defaults suit measurement of real engines;
    calibration uses the strict benchmark bounds (p99 < 1 ms, rate within 2%)."""

    p99_ms: float = 10.0  # p99 of (actual - scheduled) send time
    min_rate_ratio: float = 0.98  # achieved send rate / scheduled rate
    max_client_errors: int = 0  # requests the client itself failed to send


@dataclass
class RunOutcome:
    records: list[RequestRecord]
    validity: str  # "valid" | "invalid"
    reason: str | None
    target_rate: float  # scheduled requests / duration_s
    achieved_rate: float  # sent requests / max(duration_s, last actual send)
    duration_s: float
    send_lag_ms: LatencySummary
    send_lag_max_ms: float | None
    senders: int
    connections_opened: int
    client_errors: int
    client_cpu_util: float | None  # client CPU seconds / wall seconds (per sender, max)
    started_at: float  # wall clock (time.time) of schedule offset 0
    aborted: str | None = None  # why the run was stopped early, when it was
    notes: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.validity == "valid"


class _Req:
    __slots__ = ("i", "sched", "sent", "status", "pieces", "t_end", "error", "connect")

    def __init__(self, i: int, sched: float):
        self.i = i
        self.sched = sched
        self.sent = None
        self.status = None
        self.pieces = []
        self.t_end = None
        self.error = None
        self.connect = None


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; frames responses, stores body pieces with arrival times."""

    __slots__ = ("client", "transport", "req", "state", "buf", "remaining", "chunk_left", "keep", "closed", "last_used")

    def __init__(self, client: "_Client"):
        self.client = client
        self.transport = None
        self.req = None
        self.state = 0
        self.buf = b""
        self.remaining = 0
        self.chunk_left = 0
        self.keep = True
        self.closed = False
        self.last_used = _now()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes):
        now = _now()
        req = self.req
        if req is None:  # bytes nobody asked for: the connection is unusable
            self.closed = True
            self.transport.close()
            return
        state = self.state
        if state == 0:
            if self.buf:
                data = self.buf + data
                self.buf = b""
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self.buf = data
                return
            head = data[:end].lower()
            data = data[end + 4 :]
            try:
                req.status = int(head[9:12])
            except ValueError:
                self._fail(now, f"malformed HTTP status line {head[:40]!r}")
                return
            if 100 <= req.status < 200:  # interim response: the real one follows
                req.status = None
                if data:
                    self.data_received(data)
                return
            self.keep = b"\r\nconnection: close" not in head
            if b"\r\ntransfer-encoding: chunked" in head:
                state = self.state = 2
                self.chunk_left = 0
            else:
                at = head.find(b"\r\ncontent-length:")
                if at >= 0:
                    stop = head.find(b"\r\n", at + 2)
                    self.remaining = int(head[at + 17 : stop if stop > 0 else None])
                    state = self.state = 1
                    if self.remaining == 0:
                        self._finish(now)
                        return
                else:
                    state = self.state = 3  # read until the server closes
            if not data:
                return
        if state == 1:
            req.pieces.append((now, data))
            self.remaining -= len(data)
            if self.remaining <= 0:
                self._finish(now)
        elif state == 2:
            self._chunked(now, data)
        elif state == 3:
            req.pieces.append((now, data))
        else:  # 4: after the last chunk, waiting for the end of trailers
            self._trailers(now, data)

    def _chunked(self, now: float, data: bytes):
        if self.buf:
            data = self.buf + data
            self.buf = b""
        pos, n = 0, len(data)
        pieces = self.req.pieces
        while pos < n:
            left = self.chunk_left
            if left > 0:
                take = left if left < n - pos else n - pos
                payload = left - 2  # chunk_left counts the data and its trailing CRLF
                if payload > 0:
                    pieces.append((now, data[pos : pos + (payload if payload < take else take)]))
                pos += take
                self.chunk_left = left - take
                continue
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                self.buf = data[pos:]
                return
            try:
                size = int(data[pos:eol].split(b";", 1)[0], 16)
            except ValueError:
                self._fail(now, f"malformed chunk size {data[pos:eol][:20]!r}")
                return
            pos = eol + 2
            if size == 0:
                self.state = 4
                self._trailers(now, data[pos:])
                return
            self.chunk_left = size + 2

    def _trailers(self, now: float, data: bytes):
        buf = self.buf + data
        if buf.startswith(b"\r\n") or b"\r\n\r\n" in buf:
            self.buf = b""
            self._finish(now)
        else:
            self.buf = buf

    def _finish(self, now: float):
        req = self.req
        req.t_end = now
        self.req = None
        self.state = 0
        self.last_used = now
        self.client.done(self, req, self.keep)

    def _fail(self, now: float, message: str):
        req = self.req
        if req is not None:
            req.error = message
            req.t_end = now
            self.req = None
            self.client.done(self, req, False)
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc):
        self.closed = True
        req = self.req
        if req is not None:
            now = _now()
            if self.state == 3 and exc is None:
                self._finish(now)
            else:
                got = sum(len(p[1]) for p in req.pieces)
                why = f"{type(exc).__name__}: {exc}" if exc else "closed by server"
                self._fail(now, f"connection lost after {got} body bytes ({why})")
        self.client.lost(self)


class _ConnectionClient:
    """Connection handling every client shares: open, warm, write, connect-then-send, timeouts.

    A subclass sets loop, host, port, idle, busy, pending_sends, connections_opened, client_errors,
    aborted and timeout_s, and says what follows a request that could not be sent (``_unsent``)."""

    def _factory(self):
        return _Conn(self)

    async def _open(self) -> _Conn:
        _, conn = await self.loop.create_connection(self._factory, self.host, self.port)
        self.connections_opened += 1
        return conn

    async def warm(self, count: int):
        """Open ``count`` connections before the run starts."""
        results = await asyncio.gather(*(self._open() for _ in range(count)), return_exceptions=True)
        for conn in results:
            if isinstance(conn, _Conn) and not conn.closed:
                self.idle.append(conn)

    def _write(self, conn: _Conn, req: _Req, payload: bytes):
        conn.req = req
        conn.state = 0
        conn.buf = b""
        self.busy.add(conn)
        conn.transport.write(payload)

    async def _open_and_send(self, req: _Req, payload: bytes):
        began = _now()
        try:
            conn = await self._open()
            req.connect = _now() - began
        except OSError as exc:
            self.pending_sends -= 1
            if exc.errno in CLIENT_ERRNOS:
                self.client_errors += 1
                req.error = f"{CLIENT_ERROR_PREFIX} could not open a connection ({exc}); raise the open-files limit"
            else:
                req.error = f"connect failed: {exc}"
            req.t_end = _now()
            self._unsent(req)
            return
        self.pending_sends -= 1
        if self.aborted is not None:
            req.error = f"not sent: run aborted ({self.aborted})"
            req.sent = None
            conn.transport.close()
            self._maybe_complete()
            return
        self._write(conn, req, payload)

    def _unsent(self, req: _Req):
        """A request whose connection could not be opened has ended (with its error)."""
        self._maybe_complete()

    def _fail_overdue(self, now: float):
        """Fail requests with no complete response after ``timeout_s``."""
        for conn in list(self.busy):
            req = conn.req
            if req is not None and req.sent is not None and now - req.sent > self.timeout_s:
                conn._fail(now, f"timeout: no complete response after {self.timeout_s:g}s")


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


def _raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def _new_loop():
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio still works, slower
        return asyncio.new_event_loop()


def _compact(req: _Req, t0: float) -> tuple:
    """A picklable summary of one request, relative to t0, with the stream parsed."""
    parsed = parse_stream(req.pieces) if req.pieces else None
    error = req.error
    if error is None and req.status is not None and req.status != 200:
        body = b"".join(p[1] for p in req.pieces)[:500].decode("utf-8", "replace")
        error = f"HTTP {req.status}: {body}"
    if error is None and parsed is not None and parsed.error:
        error = parsed.error
    return (
        req.i,
        req.sched,
        None if req.sent is None else req.sent - t0,
        req.status,
        None if req.t_end is None else req.t_end - t0,
        [t - t0 for t in parsed.token_times] if parsed else [],
        parsed.output_tokens if parsed else 0,
        parsed.prompt_tokens if parsed else None,
        parsed.cached_tokens if parsed else None,
        error,
        req.connect,
    )


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
    except BaseException as exc:  # report, never leave the parent waiting
        _write_frame(out, {"error": f"{type(exc).__name__}: {exc}"})
    out.close()
    os._exit(0)  # the stdin watcher thread may still be blocked in a read


def _summary_ms(values: np.ndarray) -> LatencySummary:
    if values.size == 0:
        return LatencySummary()
    p = np.percentile(values, [50, 90, 95, 99]) * 1000.0
    return LatencySummary(
        p50=float(p[0]), p90=float(p[1]), p95=float(p[2]), p99=float(p[3]), mean=float(values.mean() * 1000.0)
    )


def _without(data: bytes, omit: frozenset[str]) -> bytes:
    """A prepared JSON body without the top-level fields in ``omit``."""
    body = json.loads(data)
    if not omit.intersection(body):
        return data
    return json.dumps({k: v for k, v in body.items() if k not in omit}, separators=(",", ":")).encode()


def run_open_loop(
    base_url: str,
    model: str | None,
    requests: Sequence[bytes | str | dict],
    schedule: np.ndarray,
    *,
    timeout_s: float = 120.0,
    senders: int = 1,
    lag_bounds: LagBounds = LagBounds(),
    duration_s: float | None = None,
    request_ids: Sequence[str] | None = None,
    headers: dict[str, str] | None = None,
    stop_check: Callable[[], str | None] | None = None,
    spin_s: float = 0.0015,
    spare_connections: int | None = None,
    warm_connections: int | None = None,
    idle_close_s: float = 2.0,
    start_delay_s: float = 0.1,
    isolate: bool = False,
    nice: int | None = None,
    omit_fields: Collection[str] | None = None,
) -> RunOutcome:
    """Send ``requests`` (cycled) at ``schedule`` offsets (seconds from start), open loop.

    ``requests`` are OpenAI request bodies (dict, JSON str or bytes); model/stream/usage options
    are overridden (see :func:`loadgen.sse.prepare_body`). ``duration_s`` is the window the
    schedule covers (default: last offset plus one mean gap); ``stop_check`` is polled every
    100 ms and aborts the run when it returns a reason (the run is then invalid with it).
    ``isolate`` runs even a single sender in its own process, away from the caller's threads
    and garbage (sweeps do; the caller's process may be busy with other work). ``nice`` sets the
    priority of sender processes (not of the caller; ignored without the privilege).
    ``omit_fields``: request fields the engine rejects (its adapter's ``rejected_request_fields``),
    left out of every body.
    """
    schedule = np.asarray(schedule, dtype=np.float64)
    if schedule.ndim != 1 or (schedule.size and (np.any(np.diff(schedule) < 0) or schedule[0] < 0)):
        raise ValueError("schedule must be a 1-D array of non-negative, non-decreasing offsets (seconds)")
    if not requests:
        raise ValueError("no requests to send")
    if senders < 1:
        raise ValueError(f"senders must be >= 1, got {senders}")
    parts = urlsplit(base_url if "://" in base_url else "http://" + base_url)
    if parts.scheme != "http":
        raise ValueError(f"only plain http:// endpoints are supported, got {base_url!r}")
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    omit = frozenset(omit_fields or ())
    payloads = []
    for body in requests:
        path, data = prepare_body(body, model)
        if omit:
            data = _without(data, omit)
        payloads.append(http_request(host, port, prefix + path, data, headers))
    n = schedule.size
    if duration_s is None:
        duration_s = (
            float(schedule[-1] * n / (n - 1)) if n > 1 and schedule[-1] > 0 else float(schedule[-1] if n else 0) + 1.0
        )
    rate = n / duration_s if duration_s > 0 else 0.0
    per_sender_rate = rate / senders
    spare = spare_connections if spare_connections is not None else int(min(256, max(4, per_sender_rate * 0.005)))
    warm = warm_connections if warm_connections is not None else int(min(512, max(spare, per_sender_rate * 0.01)))
    all_idx = np.arange(n)
    in_process = senders == 1 and not isolate
    configs = [
        _SenderConfig(
            host,
            port,
            payloads,
            all_idx[k::senders],
            schedule[k::senders],
            timeout_s,
            spin_s,
            spare,
            warm,
            idle_close_s,
            None if in_process else nice,
        )
        for k in range(senders)
    ]
    wall_start = time.time()
    if in_process:
        holder: dict = {}

        def t0_now() -> float:
            t0 = _now() + start_delay_s
            holder["wall"] = time.time() + start_delay_s
            return t0

        switch = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)  # other threads of this process must not hold the GIL across a send
        try:
            results = [_run_sender(configs[0], t0_now, None, stop_check)]
        finally:
            sys.setswitchinterval(switch)
        wall_start = holder.get("wall", wall_start)
    else:
        results, wall_start = _run_multi(configs, stop_check, start_delay_s)
    return _outcome(results, n, duration_s, rate, senders, lag_bounds, wall_start, request_ids)


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


def _outcome(
    results: list[dict],
    n: int,
    duration_s: float,
    rate: float,
    senders: int,
    bounds: LagBounds,
    wall_start: float,
    request_ids: Sequence[str] | None,
) -> RunOutcome:
    rows = sorted((row for r in results for row in r["rows"]), key=lambda row: row[0])
    records = []
    for i, sched, sent, status, t_end, token_times, out_tokens, prompt_tokens, cached, error, connect in rows:
        rid = request_ids[i % len(request_ids)] if request_ids else str(i)
        ttft = token_times[0] - sent if token_times and sent is not None else None
        itl = np.diff(token_times).tolist() if len(token_times) > 1 else []
        records.append(
            RequestRecord(
                request_id=f"{rid}#{i}",
                scheduled_s=sched,
                sent_s=sent,
                ttft_s=ttft,
                itl_s=itl,
                e2e_s=None if (t_end is None or sent is None) else t_end - sent,
                output_tokens=out_tokens,
                prompt_tokens=prompt_tokens,
                cached_tokens=cached,
                status=status,
                error=error,
                connect_s=connect,
            )
        )
    sent_rows = [(row[1], row[2]) for row in rows if row[2] is not None]
    lags = np.array([s - sc for sc, s in sent_rows]) if sent_rows else np.zeros(0)
    last_sent = max((s for _, s in sent_rows), default=0.0)
    achieved = len(sent_rows) / max(duration_s, last_sent) if duration_s > 0 else 0.0
    client_errors = sum(r["client_errors"] for r in results)
    aborted = next((r["aborted"] for r in results if r.get("aborted")), None)
    reasons = []
    lag_summary = _summary_ms(lags)
    if aborted:
        reasons.append(f"run aborted: {aborted}")
    else:
        if lag_summary.p99 is not None and lag_summary.p99 > bounds.p99_ms:
            worst = int(np.argmax(lags))
            reasons.append(
                f"client fell behind its schedule: p99 send lag {lag_summary.p99:.2f} ms > "
                f"{bounds.p99_ms:g} ms (worst {lags[worst] * 1000:.1f} ms at t={sent_rows[worst][0]:.2f}s)"
            )
        if rate > 0 and achieved / rate < bounds.min_rate_ratio:
            reasons.append(
                f"client fell behind its schedule: achieved {achieved:.1f} req/s of {rate:.1f} "
                f"scheduled ({achieved / rate:.1%} < {bounds.min_rate_ratio:.0%})"
            )
    late = max((r.get("late_start_s") or 0.0 for r in results), default=0.0)
    if late * 1000 > bounds.p99_ms:
        reasons.append(
            f"a sender received its start {late * 1000:.0f} ms after the shared start time "
            "(the calling process stalled before the run began)"
        )
    if client_errors > bounds.max_client_errors:
        reasons.append(f"client could not send {client_errors} requests (open files / local ports exhausted)")
    cpu = [r["cpu_util"] for r in results if r.get("cpu_util") is not None]
    notes = []
    if cpu and max(cpu) > 0.9 and reasons:
        notes.append(f"client CPU saturated ({max(cpu):.0%} of a core per sender); use more senders")
    return RunOutcome(
        records=records,
        validity="invalid" if reasons else "valid",
        reason="; ".join(reasons + notes) or None,
        target_rate=rate,
        achieved_rate=achieved,
        duration_s=duration_s,
        send_lag_ms=lag_summary,
        send_lag_max_ms=float(lags.max() * 1000) if lags.size else None,
        senders=senders,
        connections_opened=sum(r["connections_opened"] for r in results),
        client_errors=client_errors,
        client_cpu_util=max(cpu) if cpu else None,
        started_at=wall_start,
        aborted=aborted,
        notes=notes,
    )


if __name__ == "__main__":
    sender_main()
