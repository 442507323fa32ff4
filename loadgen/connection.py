"""The lean HTTP/1.1 keep-alive client that the open loop (:mod:`loadgen.sender`) and the closed loop
(:mod:`loadgen.closedloop`) share.

* Requests are pre-encoded bytes; responses are framed (Content-Length or chunked) by an asyncio
  Protocol (:class:`_Conn`) and stored as ``(arrival time, bytes)`` pieces on the request (:class:`_Req`);
  SSE/JSON parsing happens after the run (:func:`loadgen.outcome._compact`, :mod:`loadgen.sse`).
* :class:`_ConnectionClient` opens, warms and writes connections, and opens a connection for a due
  request that found none idle (``connect_s`` records that wait, charged to the server). A request
  the client itself could not send (no file descriptor, no local port: :data:`CLIENT_ERRNOS`) is a
  ``client:`` error, which invalidates the run.
* :func:`_raise_nofile` raises RLIMIT_NOFILE to its hard limit; :func:`_new_loop` is a uvloop loop.
"""

from __future__ import annotations

import asyncio
import errno
import resource

import time

_now = time.monotonic
CLIENT_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS, errno.ENOMEM}
CLIENT_ERROR_PREFIX = "client:"


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

    def __init__(self, client: "_ConnectionClient"):
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
