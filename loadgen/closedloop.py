"""Closed-loop users: each sends its next request only when its previous reply has ended, plus a think time.

Two uses, one client:

* Session-aware replay (``replay.sessions`` marks the turns of a conversation): a session's first
  turn goes out at its scheduled (recorded or production-shaped) time; each later turn when the
  previous reply has ended plus the logged think time. A conversation's second turn can then never
  reach the server before its first reply exists, as it could in an open-loop replay.
* Concurrency mode: a fixed number of users, each cycling through the pool with a think time,
  for a fixed duration ("how many users does this deployment hold within the SLA").

The client reuses the open-loop runner's connection protocol and stream parsing
(:mod:`loadgen.runner`), in one event loop in the calling thread. A turn's due time is its
predecessor's end plus its think time; ``RequestRecord.scheduled_s`` holds that due time, so the
send lag (sent - due) measures the client as in the open loop, and a client that fell behind
invalidates the run. How far a session drifted from production is due - recorded arrival
(``RequestRecord.recorded_s``): the server's latency, not the client, moves it.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from dataclasses import dataclass
from typing import Callable, Collection, Sequence
from urllib.parse import urlsplit

import numpy as np

from loadgen.results import RequestRecord, SessionDrift
from loadgen.runner import (
    LagBounds,
    RunOutcome,
    _compact,
    _Conn,
    _ConnectionClient,
    _new_loop,
    _raise_nofile,
    _Req,
    _summary_ms,
    _without,
)
from loadgen.sse import http_request, prepare_body

_now = time.monotonic


@dataclass
class UserScript:
    """One closed-loop user: the pool requests it sends, in order, and the think time before each
    (the first one's is ignored: it goes out at ``start_s``). ``recorded_s``: production arrival
    offsets of the turns (session replay), to measure drift. ``cycle``: start over after the last
    request (concurrency mode), until the run's ``stop_sending_s``."""

    start_s: float
    requests: list[int]
    think_s: list[float]
    session: str = ""
    recorded_s: list[float] | None = None
    cycle: bool = False


class _TurnReq(_Req):
    __slots__ = ("user", "turn", "k")


class _ClosedClient(_ConnectionClient):
    """Sends each user's requests one after the other; connection handling as the open-loop client."""

    def __init__(
        self,
        loop,
        host: str,
        port: int,
        payloads: list[bytes],
        users: Sequence[UserScript],
        t0: float,
        timeout_s: float,
        stop_sending_s: float | None,
        stop_check: Callable[[], str | None] | None,
    ):
        self.loop, self.host, self.port = loop, host, port
        self.payloads, self.users, self.t0 = payloads, users, t0
        self.timeout_s, self.stop_sending_s, self.stop_check = timeout_s, stop_sending_s, stop_check
        self.idle: list[_Conn] = []
        self.busy: set[_Conn] = set()
        self.reqs: list[_TurnReq] = []
        self.active = len(users)  # users with a request still to send or in flight
        self.pending_sends = 0
        self.connections_opened = 0
        self.client_errors = 0
        self.turns_sent = [0] * len(users)
        self.aborted: str | None = None
        self.timers: set = set()
        self.finished = loop.create_future()
        self.min_requests = 0

    def start(self):
        for u, user in enumerate(self.users):
            self._at(self.t0 + user.start_s, u, 0)
        self.loop.call_later(0.1, self.housekeeping)
        if not self.users:
            self._complete()

    def _at(self, due: float, u: int, k: int):
        handle = self.loop.call_later(max(0.0, due - _now()), self._send, u, k, due)
        self.timers.add(handle)

    def _user_done(self):
        self.active -= 1
        self._maybe_complete()

    def _send(self, u: int, k: int, due: float):
        user = self.users[u]
        if self.aborted is not None:
            return
        if _now() < due:  # the loop's timer may fire up to a millisecond early: never send before due
            self.loop.call_soon(self._send, u, k, due)
            return
        if (
            self.stop_sending_s is not None
            and due - self.t0 > self.stop_sending_s
            and (len(self.reqs) >= self.min_requests or due - self.t0 > 4 * self.stop_sending_s)
        ):
            self._user_done()
            return
        i = user.requests[k % len(user.requests)]
        req = _TurnReq(i, due - self.t0)
        req.user, req.turn, req.k = u, self.turns_sent[u], k
        self.turns_sent[u] += 1
        self.reqs.append(req)
        payload = self.payloads[i % len(self.payloads)]
        req.sent = _now()
        conn = None
        while self.idle and conn is None:
            c = self.idle.pop()
            conn = None if c.closed else c
        if conn is not None:
            self._write(conn, req, payload)
        else:
            self.pending_sends += 1
            self.loop.create_task(self._open_and_send(req, payload))

    def done(self, conn: _Conn, req: _TurnReq, keep: bool):
        self.busy.discard(conn)
        if keep and not conn.closed and self.aborted is None:
            self.idle.append(conn)
        elif not conn.closed:
            conn.closed = True
            conn.transport.close()
        self._next(req)

    def lost(self, conn: _Conn):
        self.busy.discard(conn)

    def _unsent(self, req: _TurnReq):
        self._next(req)  # a failed connect ends the turn too: the user goes on

    def _next(self, req: _TurnReq):
        """The user's next request: due at this reply's end plus its think time (a failed reply
        ends the turn too: the user goes on, as the production client did)."""
        if self.aborted is not None:
            self._maybe_complete()
            return
        user, k = self.users[req.user], req.k + 1
        if k >= len(user.requests) and not user.cycle:
            self._user_done()
            return
        think = user.think_s[k % len(user.think_s)] if user.think_s else 0.0
        self._at((req.t_end if req.t_end is not None else _now()) + think, req.user, k)

    def _maybe_complete(self):
        if self.active <= 0 and not self.busy and not self.pending_sends:
            self._complete()

    def _complete(self):
        if not self.finished.done():
            self.finished.set_result(None)

    def housekeeping(self):
        """Every 100 ms: abort requests, request timeouts."""
        if self.finished.done():
            return
        now = _now()
        reason = self.stop_check() if self.stop_check else None
        if reason and self.aborted is None:
            self.abort(reason)
            return
        self._fail_overdue(now)
        self.loop.call_later(0.1, self.housekeeping)

    def abort(self, reason: str):
        self.aborted = reason
        for handle in self.timers:
            handle.cancel()
        now = _now()
        for conn in list(self.busy):
            conn._fail(now, f"aborted: {reason}")
        for conn in self.idle:
            conn.closed = True
            conn.transport.close()
        self.idle, self.active = [], 0
        self._maybe_complete()


def run_closed_loop(
    base_url: str,
    model: str | None,
    requests: Sequence[bytes | str | dict],
    users: Sequence[UserScript],
    *,
    stop_sending_s: float | None = None,
    timeout_s: float = 120.0,
    lag_bounds: LagBounds = LagBounds(),
    request_ids: Sequence[str] | None = None,
    headers: dict[str, str] | None = None,
    stop_check: Callable[[], str | None] | None = None,
    start_delay_s: float = 0.1,
    omit_fields: Collection[str] | None = None,
    min_requests: int = 0,
) -> RunOutcome:
    """Run ``users`` closed loop against ``base_url``; records carry session, turn and recorded offset.

    ``stop_sending_s``: no request is sent after this offset (concurrency steps); requests in flight
    then finish (or ``stop_check`` cuts them); with ``min_requests``, sending goes on past it until
    that many were sent, up to 4x ``stop_sending_s`` (percentiles of a handful of requests are
    noise, as in a rate sweep's step). The outcome's rates are what was sent: in a closed
    loop the server's speed sets the rate, so only the send lag (against each due time) and client
    send failures can make a run invalid.
    """
    parts = urlsplit(base_url if "://" in base_url else "http://" + base_url)
    if parts.scheme != "http":
        raise ValueError(f"only plain http:// endpoints are supported, got {base_url!r}")
    if not requests:
        raise ValueError("no requests to send")
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    prefix = parts.path.rstrip("/").removesuffix("/v1")
    omit = frozenset(omit_fields or ())
    payloads = []
    for body in requests:
        path, data = prepare_body(body, model)
        payloads.append(http_request(host, port, prefix + path, _without(data, omit) if omit else data, headers))
    _raise_nofile()
    loop = _new_loop()
    asyncio.set_event_loop(loop)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # the engine watcher's thread must not hold the GIL across a send
    try:
        t0 = _now() + start_delay_s
        client = _ClosedClient(loop, host, port, payloads, users, t0, timeout_s, stop_sending_s, stop_check)
        client.min_requests = min_requests
        loop.run_until_complete(client.warm(min(len(users), 64)))
        gc.collect()
        gc.freeze()  # everything alive now is never scanned again during the run
        gc_was = gc.isenabled()
        gc.disable()
        t0 = client.t0 = max(t0, _now() + 0.01)
        wall_start = time.time() + (t0 - _now())
        cpu0, wall0 = time.process_time(), _now()
        try:
            client.start()
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
        rows = [(_compact(r, t0), r.user, r.turn) for r in client.reqs]
    finally:
        sys.setswitchinterval(switch)
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        asyncio.set_event_loop(None)
    records = []
    for (
        i,
        sched,
        sent,
        status,
        t_end,
        token_times,
        out_tokens,
        prompt_tokens,
        cached,
        error,
        connect,
    ), u, turn in rows:
        user = users[u]
        rid = request_ids[i % len(request_ids)] if request_ids else str(i)
        recorded = user.recorded_s[turn] if user.recorded_s is not None and turn < len(user.recorded_s) else None
        records.append(
            RequestRecord(
                request_id=f"{rid}#{u}.{turn}",
                scheduled_s=sched,
                sent_s=sent,
                ttft_s=token_times[0] - sent if token_times and sent is not None else None,
                itl_s=np.diff(token_times).tolist() if len(token_times) > 1 else [],
                e2e_s=None if (t_end is None or sent is None) else t_end - sent,
                output_tokens=out_tokens,
                prompt_tokens=prompt_tokens,
                cached_tokens=cached,
                status=status,
                error=error,
                connect_s=connect,
                session=user.session or f"user{u}",
                turn=turn,
                recorded_s=recorded,
            )
        )
    records.sort(key=lambda r: (r.scheduled_s, r.request_id))
    sent_s = [r.sent_s for r in records if r.sent_s is not None]
    lags = np.array([r.sent_s - r.scheduled_s for r in records if r.sent_s is not None])
    duration = max(stop_sending_s, max(sent_s, default=0.0)) if stop_sending_s is not None else max(sent_s, default=0.0)
    duration = max(duration, 1e-9)
    lag = _summary_ms(lags)
    reasons = []
    if client.aborted:
        reasons.append(f"run aborted: {client.aborted}")
    elif lag.p99 is not None and lag.p99 > lag_bounds.p99_ms:
        reasons.append(
            f"client fell behind: p99 send lag after a turn was due {lag.p99:.2f} ms > {lag_bounds.p99_ms:g} ms"
        )
    if client.client_errors > lag_bounds.max_client_errors:
        reasons.append(f"client could not send {client.client_errors} requests (open files / local ports exhausted)")
    rate = len(sent_s) / duration
    return RunOutcome(
        records=records,
        validity="invalid" if reasons else "valid",
        reason="; ".join(reasons) or None,
        target_rate=rate,
        achieved_rate=rate,
        duration_s=duration,
        send_lag_ms=lag,
        send_lag_max_ms=float(lags.max() * 1000) if lags.size else None,
        senders=1,
        connections_opened=client.connections_opened,
        client_errors=client.client_errors,
        client_cpu_util=cpu / wall if wall > 0 else None,
        started_at=wall_start,
        aborted=client.aborted,
    )


def session_drift(records: Sequence[RequestRecord]) -> SessionDrift:
    """How far a session replay drifted from production, and whether turn order held.

    drift = due time - recorded arrival of each later turn (both from the replay's start, scaled
    production time): how much the server's replies, slower or faster than production's, moved
    the conversation. ``early_turns`` counts turns sent before their predecessor's reply ended
    (always 0 for this client: the check is the evidence)."""
    by_session: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.session is not None and r.turn is not None:
            by_session.setdefault(r.session, []).append(r)
    drift, lag, early, later = [], [], 0, 0
    for turns in by_session.values():
        turns.sort(key=lambda r: r.turn)
        for prev, cur in zip(turns, turns[1:]):
            later += 1
            if cur.recorded_s is not None:
                drift.append(cur.scheduled_s - cur.recorded_s)
            if prev.sent_s is None or prev.e2e_s is None or cur.sent_s is None:
                continue
            end = prev.sent_s + prev.e2e_s
            if cur.sent_s < end:
                early += 1
            lag.append(cur.sent_s - cur.scheduled_s)  # past (reply end + think): the think time kept
    return SessionDrift(
        sessions=len(by_session),
        turns=sum(len(v) for v in by_session.values()),
        later_turns=later,
        early_turns=early,
        drift_s=_summary_s(np.asarray(drift)),
        turn_send_lag_ms=_summary_ms(np.asarray(lag)),
    )


def _summary_s(values: np.ndarray):
    summary = _summary_ms(values)
    return summary.model_copy(update={k: None if v is None else v / 1000 for k, v in summary.model_dump().items()})
