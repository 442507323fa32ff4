"""Production-shaped replay: the pool's own arrival pattern, cache left to evolve, SLA attainment over time.

``mode="shaped"`` (default) keeps the production count of requests per ``shape_interval_s`` and
draws send times uniformly inside each interval; ``mode="exact"`` sends at the recorded
offsets. ``time_scale`` compresses time (0.5 = twice as fast). The prefix cache is reset once
before the replay and then left alone, as in production. Attainment per reporting interval is
the fraction of requests that met every per-request SLA target (TTFT, mean inter-token gap,
end-to-end, success); the interval is also judged on its percentiles like a sweep step.

A pool with multi-turn sessions (``specs.pool_schema.has_sessions``) replays session-aware: each
session's first turn follows the schedule above (its own arrivals), each later turn goes out when
the previous reply has ended plus the logged think time (scaled by ``time_scale``); the result's
``sessions`` says how far that moved turns from their recorded times. A pool without sessions
(token-count traces) replays open loop exactly as before; ``sessions=False`` forces that.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import polars as pl

from specs.config import EndpointSpec, SLASpec
from loadgen import arrivals
from loadgen.closedloop import UserScript, session_drift
from loadgen.results import IntervalResult, ProductionReplayResult, RequestRecord
from loadgen.runner import LagBounds
from loadgen.stats import latency_arrays, percentile_ms, sla_violations
from loadgen.step import StepRunner, config_hash, pool_requests, sweep_lag_bounds, wait_idle
from loadgen.watch import Engine
from specs.pool_schema import has_sessions


def request_meets_sla(record: RequestRecord, sla: SLASpec) -> bool:
    if not record.ok or record.ttft_s is None:
        return False
    if record.ttft_s * 1000 > sla.ttft_ms:
        return False
    if sla.itl_ms is not None and record.itl_s and float(np.mean(record.itl_s)) * 1000 > sla.itl_ms:
        return False
    if sla.e2e_ms is not None and (record.e2e_s is None or record.e2e_s * 1000 > sla.e2e_ms):
        return False
    return True


def intervals_of(records: list[RequestRecord], sla: SLASpec, interval_s: float, span_s: float) -> list[IntervalResult]:
    """Bucket records by scheduled time and judge each bucket."""
    count = max(1, int(np.ceil(span_s / interval_s - 1e-9)))
    buckets: list[list[RequestRecord]] = [[] for _ in range(count)]
    for r in records:
        buckets[min(int(r.scheduled_s // interval_s), count - 1)].append(r)
    out = []
    for k, bucket in enumerate(buckets):
        arrays = latency_arrays(bucket)
        errors = sum(1 for r in bucket if not r.ok)
        err_rate = errors / len(bucket) if bucket else 0.0
        out.append(
            IntervalResult(
                start_s=k * interval_s,
                end_s=(k + 1) * interval_s,
                target_rate=len(bucket) / interval_s,
                requests=len(bucket),
                errors=errors,
                attainment=(sum(request_meets_sla(r, sla) for r in bucket) / len(bucket)) if bucket else None,
                ttft_p95_ms=percentile_ms(arrays["ttft"], 95),
                itl_p95_ms=percentile_ms(arrays["itl"], 95),
                e2e_p95_ms=percentile_ms(arrays["e2e"], 95),
                within_sla=not sla_violations(arrays, err_rate, sla, len(bucket)) if bucket else True,
            )
        )
    return out


def replay_seconds(
    pool: pl.DataFrame,
    max_duration_s: float | None = None,
    *,
    shape_interval_s: float = 10.0,
    time_scale: float = 1.0,
    sessions: bool | None = None,
) -> float:
    """How long a production-shaped replay of ``pool`` sends for (replay seconds, before latencies), with
    :func:`run_production_replay`'s arguments: open loop, the schedule's span (whole shape intervals) cut
    at ``max_duration_s``; with sessions, until the last recorded turn of the sessions that start within
    it (:func:`session_scripts`), since their later turns follow, each after a reply and its think time.
    What a deadline must keep for it: the main job's 60 s replays ran 88-91 s, its sessions' last turns
    being recorded at 84 s."""
    if pool.height == 0:
        return 0.0
    if has_sessions(pool) if sessions is None else sessions:
        scripts = session_scripts(pool, time_scale=time_scale, max_duration_s=max_duration_s)
        return max((script.recorded_s[-1] for script in scripts), default=0.0)
    offsets = np.sort(pool["arrival_offset_s"].cast(pl.Float64).to_numpy())
    return _open_loop_span(offsets, shape_interval_s, time_scale, max_duration_s)


def _open_loop_span(
    offsets: np.ndarray, shape_interval_s: float | None, time_scale: float, max_duration_s: float | None
) -> float:
    """The replay seconds an open-loop replay of sorted ``offsets`` spans: the recorded span, in whole
    shape intervals when shaped (``shape_interval_s``; None: replayed exactly), cut at ``max_duration_s``."""
    if not offsets.size:
        return 0.0
    recorded = float(offsets[-1] - offsets[0])
    span = recorded * time_scale
    if shape_interval_s is not None:
        span = max(span, float(np.ceil(recorded / shape_interval_s + 1e-9) * shape_interval_s * time_scale))
    return span if max_duration_s is None else min(span, max_duration_s)


def run_production_replay(
    engine: Engine,
    pool: pl.DataFrame,
    spec: EndpointSpec,
    time_scale: float = 1.0,
    *,
    mode: str = "shaped",
    shape_interval_s: float = 10.0,
    report_interval_s: float | None = None,
    rate_scale: float = 1.0,
    seed: int = 0,
    senders: int = 1,
    lag_bounds: LagBounds | None = None,
    timeout_s: float = 120.0,
    records_dir: Path | None = None,
    max_duration_s: float | None = None,
    sessions: bool | None = None,
) -> ProductionReplayResult:
    """Replay ``pool`` with its production arrival pattern; report SLA attainment per interval.

    ``shape_interval_s`` and ``report_interval_s`` are production seconds (scaled by ``time_scale``);
    ``max_duration_s`` (replay seconds) cuts a long trace short. ``sessions``: None = session-aware
    when the pool has multi-turn sessions, False = open loop always. ``lag_bounds``: when the client
    counts as fallen behind; by default the endpoint's own, as its sweeps use (loadgen.step.sweep_lag_bounds:
    an engine sharing a small host with the client declares a looser one).
    """
    lag_bounds = lag_bounds or sweep_lag_bounds(spec.sla, spec.sweep)
    if "arrival_offset_s" not in pool.columns:
        raise ValueError("replay pool has no 'arrival_offset_s' column; see specs/pool_schema.py")
    if sessions is None:
        sessions = has_sessions(pool)
    if sessions:
        return _replay_sessions(
            engine,
            pool,
            spec,
            time_scale,
            mode=mode,
            shape_interval_s=shape_interval_s,
            report_interval_s=report_interval_s,
            rate_scale=rate_scale,
            seed=seed,
            lag_bounds=lag_bounds,
            timeout_s=timeout_s,
            records_dir=records_dir,
            max_duration_s=max_duration_s,
        )
    bodies, ids = pool_requests(pool)
    offsets = np.sort(pool["arrival_offset_s"].cast(pl.Float64).to_numpy())
    if mode == "exact":
        schedule = arrivals.recorded(offsets, time_scale)
    elif mode == "shaped":
        schedule = arrivals.production_shaped(
            timestamps=offsets, interval_s=shape_interval_s, time_scale=time_scale, rate_scale=rate_scale, seed=seed
        )
    else:
        raise ValueError(f"mode must be 'shaped' or 'exact', got {mode!r}")
    span = _open_loop_span(offsets, shape_interval_s if mode == "shaped" else None, time_scale, max_duration_s)
    if max_duration_s is not None:
        schedule = schedule[schedule < max_duration_s]
    if schedule.size == 0:
        raise ValueError("the replay schedule is empty (pool without arrivals, or max_duration_s too short)")
    span = max(span, float(schedule[-1]) + 1e-6)
    runner = StepRunner(
        engine,
        spec,
        bodies,
        ids,
        senders=senders,
        lag_bounds=lag_bounds,
        timeout_s=timeout_s,
        records_dir=records_dir,
    )
    started = time.time()
    wait_idle(engine, 60.0)
    runner.warmup(spec.sweep.warmup_requests)
    wait_idle(engine, 60.0)
    runner.reset()  # once: from here on the cache evolves as in production
    # The runner keeps records; re-run summarisation per interval from a records file kept in memory.
    overall, records = _run_keep_records(runner, schedule, span)
    interval = (report_interval_s or shape_interval_s) * time_scale
    intervals = intervals_of(records, spec.sla, interval, span)
    attained = [request_meets_sla(r, spec.sla) for r in records]
    return ProductionReplayResult(
        endpoint=spec.name,
        engine_args=list(getattr(getattr(engine, "spec", None), "engine", spec.engine).args),
        launch_config_hash=config_hash(engine, spec),
        started_at=started,
        mode=mode,
        time_scale=time_scale,
        interval_s=interval,
        intervals=intervals,
        overall=overall,
        attainment=sum(attained) / len(attained) if attained else None,
        validity=overall.validity,
        invalid_reason=overall.invalid_reason,
        send_lag_bound_ms=lag_bounds.p99_ms,
    )


def _run_keep_records(runner: StepRunner, schedule: np.ndarray, span: float):
    captured: dict = {}
    step = runner.run(schedule, span, len(schedule) / span, "replay", keep=captured)
    return step, captured["records"]


def session_scripts(
    pool: pl.DataFrame,
    first_schedule: np.ndarray | None = None,
    time_scale: float = 1.0,
    max_duration_s: float | None = None,
) -> list[UserScript]:
    """One closed-loop user per session of ``pool`` (rows in arrival order, as pool_requests gives
    them). A session starts at ``first_schedule[j]`` (the j-th session by first arrival; default its
    recorded offset, scaled); think times and recorded offsets are scaled by ``time_scale``.
    Sessions starting at or after ``max_duration_s`` are left out."""
    pool = pool.sort("arrival_offset_s", maintain_order=True)
    offsets = pool["arrival_offset_s"].to_numpy()
    base = float(offsets[0]) if len(offsets) else 0.0
    thinks = pool["think_time_s"].to_list()
    groups: dict[str, list[int]] = {}
    for i, sid in enumerate(pool["session_id"].to_list()):
        groups.setdefault(sid if sid is not None else f"row{i}", []).append(i)
    scripts = []
    for j, (sid, rows) in enumerate(groups.items()):  # insertion order = order of first turns
        start = float(first_schedule[j]) if first_schedule is not None else (offsets[rows[0]] - base) * time_scale
        if max_duration_s is not None and start >= max_duration_s:
            continue
        scripts.append(
            UserScript(
                start,
                rows,
                [(thinks[i] or 0.0) * time_scale for i in rows],
                session=sid,
                recorded_s=[(offsets[i] - base) * time_scale for i in rows],
            )
        )
    return scripts


def _replay_sessions(
    engine: Engine,
    pool: pl.DataFrame,
    spec: EndpointSpec,
    time_scale: float,
    *,
    mode: str,
    shape_interval_s: float,
    report_interval_s: float | None,
    rate_scale: float,
    seed: int,
    lag_bounds: LagBounds,
    timeout_s: float,
    records_dir: Path | None,
    max_duration_s: float | None,
) -> ProductionReplayResult:
    """Session-aware replay: first turns on the schedule, later turns after the reply plus think time."""
    pool = pool.sort("arrival_offset_s", maintain_order=True)
    bodies, ids = pool_requests(pool)
    first = pool.group_by("session_id", maintain_order=True).agg(pl.col("arrival_offset_s").min())
    first_offsets = first["arrival_offset_s"].to_numpy()
    if mode == "exact":
        schedule = arrivals.recorded(first_offsets, time_scale)
    elif mode == "shaped":
        if rate_scale != 1.0:
            raise ValueError(
                "rate_scale changes the number of sessions started; session-aware replay keeps the "
                "recorded sessions (use sessions=False for an open-loop replay at another rate)"
            )
        schedule = arrivals.production_shaped(
            timestamps=first_offsets, interval_s=shape_interval_s, time_scale=time_scale, rate_scale=1.0, seed=seed
        )
    else:
        raise ValueError(f"mode must be 'shaped' or 'exact', got {mode!r}")
    scripts = session_scripts(pool, np.sort(schedule), time_scale, max_duration_s)
    if not scripts:
        raise ValueError("the replay schedule is empty (pool without arrivals, or max_duration_s too short)")
    runner = StepRunner(
        engine,
        spec,
        bodies,
        ids,
        senders=1,
        lag_bounds=lag_bounds,
        timeout_s=timeout_s,
        records_dir=records_dir,
    )
    started = time.time()
    wait_idle(engine, 60.0)
    runner.warmup(spec.sweep.warmup_requests)
    wait_idle(engine, 60.0)
    runner.reset()
    captured: dict = {}
    overall = runner.run_closed(scripts, "replay-sessions", keep=captured)
    records = captured["records"]
    span = max([r.scheduled_s for r in records] + [1e-6])
    interval = (report_interval_s or shape_interval_s) * time_scale
    attained = [request_meets_sla(r, spec.sla) for r in records]
    return ProductionReplayResult(
        endpoint=spec.name,
        engine_args=list(getattr(getattr(engine, "spec", None), "engine", spec.engine).args),
        launch_config_hash=config_hash(engine, spec),
        started_at=started,
        mode=mode,
        time_scale=time_scale,
        interval_s=interval,
        intervals=intervals_of(records, spec.sla, interval, span),
        overall=overall,
        attainment=sum(attained) / len(attained) if attained else None,
        validity=overall.validity,
        invalid_reason=overall.invalid_reason,
        sessions=session_drift(records),
        send_lag_bound_ms=lag_bounds.p99_ms,
    )
