"""What a run measured: per-request records, the send-lag accounting and the run's validity.

:func:`_compact` turns one sent request into a picklable row (its stream parsed, times relative to
the start); :func:`_outcome` assembles the rows of every sender into request records
(:class:`loadgen.results.RequestRecord`) and judges the client against :class:`LagBounds`: a run
whose p99 send lag or achieved/scheduled rate is out of bounds, whose client could not send, that
started late or was aborted is invalid with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from loadgen.connection import _Req
from loadgen.results import LatencySummary, RequestRecord
from loadgen.sse import parse_stream


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


def _summary_ms(values: np.ndarray) -> LatencySummary:
    if values.size == 0:
        return LatencySummary()
    p = np.percentile(values, [50, 90, 95, 99]) * 1000.0
    return LatencySummary(
        p50=float(p[0]), p90=float(p[1]), p95=float(p[2]), p99=float(p[3]), mean=float(values.mean() * 1000.0)
    )


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
