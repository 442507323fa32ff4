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

Where each part lives: the HTTP client (:mod:`loadgen.connection`), one sender's schedule loop
(:mod:`loadgen.sender`), sender processes (:mod:`loadgen.sender_process`), records, lag accounting and
validity (:mod:`loadgen.outcome`); this module is the entry point, :func:`run_open_loop`.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Callable, Collection, Sequence
from urllib.parse import urlsplit

import numpy as np

from loadgen.connection import _Conn, _ConnectionClient, _new_loop, _raise_nofile, _Req
from loadgen.outcome import LagBounds, RunOutcome, _compact, _outcome, _summary_ms
from loadgen.sender import _run_sender, _SenderConfig
from loadgen.sender_process import _run_multi, sender_main
from loadgen.sse import http_request, prepare_body

_now = time.monotonic

#: the runner's API, and the client pieces loadgen.closedloop builds on
__all__ = [
    "LagBounds",
    "RunOutcome",
    "run_open_loop",
    "sender_main",
    "_Conn",
    "_ConnectionClient",
    "_Req",
    "_compact",
    "_new_loop",
    "_raise_nofile",
    "_summary_ms",
    "_without",
]


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


if __name__ == "__main__":
    sender_main()
