"""Capacity sweep: hold increasing arrival rates, find the knee and the capacity within the SLA.

Each step: wait until the engine is idle, warm it up, reset its prefix cache, then run an
open-loop schedule (Poisson by default) for ``step_duration_s`` while a side thread samples
``/metrics`` and liveness. The ladder is explicit, or found automatically: a quick probe gives
the rate one request at a time would sustain, then geometric steps (x2) up to the first SLA
failure, then geometric bisection between the last pass and the first failure until they are
within ``resolution`` of each other. An explicit ladder stops once the SLA is clearly broken
(a target at least twice its limit, or two failing steps in a row), then bisects the bracket
around capacity ``sweep.refine_steps`` times.

When even the lowest rate breaks the SLA, the sweep extends downwards (halving) until a rate
holds or the floor ``sweep.min_rate`` (default: the first rate / 16) fails too; the capacity is
then "below the floor", never a silent 0.

Capacity is the SLA crossing interpolated between the highest tested rate within the SLA below the
first failing rate and that failure (see :func:`interpolated_capacity`); the knee is the last rate
before latency takes off (see :func:`knee_rate`). A crashed engine or a client that fell behind
makes its step and the sweep invalid; steps already measured are kept.

With ``sweep.engine_warmup_s``, the first sweep on an engine is preceded by an uncounted open-loop
run (:func:`warm_engine`), so engines that build CUDA graphs or compiled kernels per shape as they
first meet it are measured in their steady state, not while they build.

Steps are short: the warm-up is a burst of ``warmup_requests`` with replies clipped to
``warmup_max_tokens``, cut after ``warmup_timeout_s``; requests still in flight ``drain_s`` after
the schedule ends are cut and counted (``StepResult.cut_requests``, judged worst-case, see
:mod:`loadgen.stats`). Each step records its wall time (``wall_s``, ``warmup_wall_s``).

The prefix-cache reset before a step is followed, on an engine whose cache is on, by one
prefill-only request per hot prefix group of the pool (``sweep.warm_prefix_groups``): a step then
starts where a production server stays, with its shared system prompts cached, instead of charging
a cold miss to the first request of every group.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

from specs.config import SweepSpec, EndpointSpec, SLASpec
from specs.engine_args import parse_args
from loadgen import arrivals
from loadgen.capacity import estimate as estimate_capacity
from loadgen.results import RequestRecord, StepResult, SweepResult
from loadgen.closedloop import UserScript, run_closed_loop
from loadgen.runner import LagBounds, RunOutcome, run_open_loop
from loadgen.stats import sla_excess, step_sla_ratios, summarize
from loadgen.watch import Engine, EngineWatch


@dataclass
class SweepProgress:
    """What a progress bar needs: which step of at most ``max_steps``, at which rate, doing what."""

    phase: str  # "probe" | "warmup" | "step" | "step_done" | "done"
    step_index: int
    max_steps: int
    rate: float | None
    message: str
    step: StepResult | None = None


ProgressFn = Callable[[SweepProgress], None]


def pool_requests(pool: pl.DataFrame) -> tuple[list[str], list[str]]:
    """(bodies, request_ids) of a replay pool, in arrival order."""
    if "body" not in pool.columns:
        raise ValueError(f"replay pool has no 'body' column (columns: {pool.columns}); see specs/pool_schema.py")
    if pool.height == 0:
        raise ValueError("replay pool is empty")
    if "arrival_offset_s" in pool.columns:
        pool = pool.sort("arrival_offset_s", maintain_order=True)
    ids = (
        pool["request_id"].cast(pl.Utf8).to_list()
        if "request_id" in pool.columns
        else [str(i) for i in range(pool.height)]
    )
    return pool["body"].to_list(), ids


def prefix_representatives(pool: pl.DataFrame, groups: int) -> list[str]:
    """One request body from each of the pool's ``groups`` most frequent prefix groups (ties: the
    group met first), in that order; [] when the pool records no prefix groups."""
    if groups <= 0 or "prefix_group" not in pool.columns:
        return []
    ranked = (
        pool.with_row_index("_row")
        .filter(pl.col("prefix_group").is_not_null())
        .group_by("prefix_group")
        .agg(pl.len().alias("n"), pl.col("_row").min(), pl.col("body").first())
        .sort(["n", "_row"], descending=[True, False])
        .head(groups)
    )
    return ranked["body"].to_list()


def step_seed(seed: int, rate: float) -> int:
    """Same seed and rate -> same schedule, so repeats of a sweep see identical arrivals."""
    return (seed * 1_000_003 + int(round(rate * 1000))) % (2**32)


def knee_rate(
    steps: list[StepResult], latency_factor: float = 2.0, min_increase_ms: float = 50.0, throughput_ratio: float = 0.9
) -> float | None:
    """The last tested rate before the curve bends: beyond it TTFT p95 exceeds ``latency_factor``
    times (and ``min_increase_ms`` more than) its value at the lowest rate, or completed
    throughput falls below ``throughput_ratio`` of the achieved send rate. None when no step
    bends (knee not reached) or the lowest step is already past it."""
    curve = sorted((s for s in steps if s.validity == "valid"), key=lambda s: s.target_rate)
    if len(curve) < 2 or curve[0].ttft_ms.p95 is None:
        return None
    base = curve[0].ttft_ms.p95
    limit = max(base * latency_factor, base + min_increase_ms)

    def bent(step: StepResult) -> bool:
        ttft = step.ttft_ms.p95
        # Completions are counted until the last one ends, so an unqueued step still "loses" the
        # drain tail (about one median e2e latency): credit it back before comparing.
        drain_s = (step.e2e_ms.p50 or 0.0) / 1000
        keeping_up = step.throughput_rps * (step.duration_s + drain_s) / max(step.duration_s, 1e-9)
        # Requests cut at the drain deadline after their first token were being served, not queued.
        keeping_up += (step.cut_requests - step.cut_before_first_token) / max(step.duration_s, 1e-9)
        return (
            ttft is None or ttft > limit or step.error_rate > 0.05 or keeping_up < throughput_ratio * step.achieved_rate
        )

    if bent(curve[0]):
        return None
    for before, step in zip(curve, curve[1:]):
        if bent(step):
            return before.target_rate
    return None


def capacity(steps: list[StepResult]) -> tuple[float, bool]:
    """(capacity, bounded): the highest valid rate within SLA below the lowest failing rate;
    bounded=False when no valid step failed (the capacity is then only a lower bound)."""
    valid = [s for s in steps if s.validity == "valid"]
    failing = [s.target_rate for s in valid if not s.within_sla]
    first_fail = min(failing, default=math.inf)
    passing = [s.target_rate for s in valid if s.within_sla and s.target_rate < first_fail]
    return (max(passing, default=0.0), bool(failing))


def interpolated_capacity(steps: list[StepResult], sla: SLASpec | None = None) -> tuple[float, str]:
    """(capacity, method): the SLA crossing between the highest passing rate ``lo`` below the lowest
    failing rate ``hi`` (as in :func:`capacity`) and ``hi``. For each target the ``hi`` step
    violates, linear in judged value / limit vs rate from ``lo`` to ``hi``; the capacity is the
    lowest such crossing, clipped to [lo, hi]. Latency curves are convex in rate, so the chord
    crosses the limit no later than the curve does: the estimate errs low. A target unresolved at
    ``hi`` (cut requests, no successful request) crosses at ``lo``.

    method: "interpolated"; "tested" (no failure above ``lo``: a lower bound, or no ratios to
    interpolate); "none_held" (no valid rate within the SLA: capacity 0.0, see the sweep's
    ``capacity_below_rps``)."""
    tested, bounded = capacity(steps)
    if not bounded:
        return tested, "tested"
    valid = [s for s in steps if s.validity == "valid"]
    hi = min(s.target_rate for s in valid if not s.within_sla)
    below = [s for s in valid if s.within_sla and s.target_rate < hi]
    if not below:
        return 0.0, "none_held"
    lo = tested
    lo_step = [s for s in below if s.target_rate == lo][-1]
    hi_step = [s for s in valid if not s.within_sla and s.target_rate == hi][-1]
    r_lo, r_hi = step_sla_ratios(lo_step, sla), step_sla_ratios(hi_step, sla)
    crossing = hi
    for name, value in r_hi.items():
        high = math.inf if value is None else value
        if high <= 1.0:
            continue
        low = r_lo.get(name, 0.0)
        if low is None or math.isinf(high) or low >= high:
            crossing = lo
            break
        crossing = min(crossing, lo + (1.0 - min(low, 1.0)) / (high - low) * (hi - lo))
    if crossing >= hi:
        return lo, "tested"
    return float(f"{min(max(crossing, lo), hi):.4g}"), "interpolated"


def sweep_lag_bounds(sla: SLASpec, sweep: SweepSpec | None = None) -> LagBounds:
    """Send-lag bounds for measuring an engine: p99 lag within max(10 ms, 5% of the tighter of the
    TTFT and E2E targets, which lag inflates; ITL is measured after the send and is unaffected)
    and the achieved rate within 2% of the schedule. A lag that small cannot move a percentile
    past an SLA limit by more than 5% of it; a larger one is the client's fault.

    An endpoint may declare its own bounds (``sweep.max_send_lag_ms``, ``sweep.min_rate_ratio``):
    for an engine sharing a small host with the client, whose scheduler stalls every process now
    and then, the YAML says so and the result keeps the looser bound it was measured under."""
    targets = [t for t in (sla.ttft_ms, sla.e2e_ms) if t]
    p99 = max(10.0, 0.05 * min(targets)) if targets else 10.0
    if sweep is not None and sweep.max_send_lag_ms is not None:
        p99 = sweep.max_send_lag_ms
    return LagBounds(p99_ms=p99, min_rate_ratio=sweep.min_rate_ratio if sweep is not None else 0.98)


def client_bound(step: StepResult) -> bool:
    """Whether a step is invalid because of the client (not because the engine crashed)."""
    reason = step.invalid_reason or ""
    return step.validity != "valid" and reason.startswith("client") and "engine" not in reason


def _nice(rate: float) -> float:
    """Round to two significant digits (ladders people can read)."""
    if rate <= 0:
        return rate
    digits = 1 - int(math.floor(math.log10(rate)))
    return float(round(rate, digits))


def _next_auto_rate(
    history: list[tuple[float, bool]], factor: float, resolution: float, min_rate: float
) -> float | None:
    passes = [r for r, ok in history if ok]
    lo = max(passes, default=None)
    fails = [r for r, ok in history if not ok and (lo is None or r > lo)]
    hi = min(fails, default=None)
    if hi is None:
        return _nice(lo * factor) if lo is not None else None
    if lo is None:  # nothing held yet: go down, to the floor at most
        rate = _nice(hi / factor)
        if rate < min_rate:
            rate = min_rate
        tried = {r for r, _ in history}
        return rate if rate < hi and rate not in tried else None
    if hi / lo <= 1 + resolution:
        return None
    rate = _nice(math.sqrt(lo * hi))
    tried = {r for r, _ in history}
    return rate if lo < rate < hi and rate not in tried else None


def extend_down(history: list[tuple[float, bool]], floor: float) -> float | None:
    """Below a ladder whose lowest tested rate failed: half that rate (readably rounded), not below
    ``floor``; None once the floor itself was tried (or nothing lower is left)."""
    lowest = min(r for r, _ in history)
    if lowest <= floor * (1 + 1e-9):
        return None
    rate = max(_nice(lowest / 2), floor)
    return rate if rate < lowest and rate not in {r for r, _ in history} else None


def refine_rate(history: list[tuple[float, bool]], min_ratio: float = 1.05) -> float | None:
    """Geometric midpoint between the capacity so far (highest pass below the lowest failure) and
    that failure, or None when there is no such bracket or it is already narrower than ``min_ratio``."""
    fails = [r for r, ok in history if not ok]
    hi = min(fails, default=None)
    lo = max((r for r, ok in history if ok and (hi is None or r < hi)), default=None)
    if lo is None or hi is None or hi / lo <= min_ratio:
        return None
    rate = _nice(math.sqrt(lo * hi))
    return rate if lo < rate < hi and rate not in {r for r, _ in history} else None


def _wait_idle(engine: Engine, timeout_s: float) -> None:
    """Let a previous step's queue drain so it does not spill into the next one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            snap = engine.metrics()
        except Exception:  # noqa: BLE001 - liveness is checked by the watcher; here we only wait
            return
        running = getattr(snap, "requests_running", None)
        waiting = getattr(snap, "requests_waiting", None)
        if running is None and waiting is None:
            return
        if not (running or 0) and not (waiting or 0):
            return
        time.sleep(0.25)


DRAIN_CUT = "drain deadline"


def _deadline_check(inner: Callable[[], str | None] | None, after_s: float, reason: str) -> Callable[[], str | None]:
    """A stop_check: ``inner``'s reason if it has one, else ``reason`` once ``after_s`` seconds have
    passed since its first call (the runner first polls it right before the schedule starts)."""
    state: dict[str, float] = {}

    def check() -> str | None:
        found = inner() if inner is not None else None
        if found:
            return found
        now = time.monotonic()
        return reason if now >= state.setdefault("deadline", now + after_s) else None

    return check


def _cut_at_deadline(outcome: RunOutcome, bounds: LagBounds, drain_s: float) -> RunOutcome:
    """A run stopped at its drain deadline is not an aborted run: requests in flight become cut
    (counted, judged worst-case in loadgen.stats), and validity is the client checks alone (as in
    the runner: send lag, achieved rate, client send failures)."""
    cut_error = f"aborted: {DRAIN_CUT}"
    records = []
    for r in outcome.records:
        if r.error == cut_error:
            r = r.model_copy(update={"cut": True, "error": f"cut: in flight {drain_s:g}s after the schedule ended"})
        elif r.error and DRAIN_CUT in r.error and r.sent_s is None:
            r = r.model_copy(update={"error": "not sent before the step's drain deadline"})
        records.append(r)
    reasons = []
    lag = outcome.send_lag_ms
    if lag.p99 is not None and lag.p99 > bounds.p99_ms:
        reasons.append(f"client fell behind its schedule: p99 send lag {lag.p99:.2f} ms > {bounds.p99_ms:g} ms")
    if outcome.target_rate > 0 and outcome.achieved_rate / outcome.target_rate < bounds.min_rate_ratio:
        reasons.append(
            f"client fell behind its schedule: achieved {outcome.achieved_rate:.1f} req/s of "
            f"{outcome.target_rate:.1f} scheduled ({outcome.achieved_rate / outcome.target_rate:.1%} "
            f"< {bounds.min_rate_ratio:.0%})"
        )
    if outcome.client_errors > bounds.max_client_errors:
        reasons.append(f"client could not send {outcome.client_errors} requests (open files / local ports exhausted)")
    return dataclasses.replace(
        outcome,
        records=records,
        validity="invalid" if reasons else "valid",
        reason="; ".join(reasons + outcome.notes) if reasons else None,
        aborted=None,
    )


def _clip_output(body: str | bytes | dict, max_tokens: int) -> str | bytes | dict:
    """``body`` with its reply limit clipped at ``max_tokens`` (warm-up bursts); unparsable bodies
    pass unchanged (the runner reports them)."""
    try:
        obj = dict(body) if isinstance(body, dict) else json.loads(body)
    except (TypeError, ValueError):
        return body
    if not isinstance(obj, dict):
        return body
    keys = [k for k in ("max_completion_tokens", "max_tokens") if obj.get(k)] or ["max_tokens"]
    for key in keys:
        obj[key] = min(int(obj.get(key) or max_tokens), max_tokens)
    if isinstance(obj.get("min_tokens"), int):
        obj["min_tokens"] = min(obj["min_tokens"], max_tokens)
    return json.dumps(obj)


def drain_cap(sla: SLASpec, sweep: SweepSpec) -> float:
    """Seconds a step's in-flight requests may drain after its schedule: ``sweep.drain_s``, else the
    larger of the TTFT and E2E limits (at least 2 s). A request cut then has already missed every
    target it was judged worst-case on, so cutting changes no pass/fail."""
    if sweep.drain_s is not None:
        return sweep.drain_s
    return max(2.0, (sla.ttft_ms or 0.0) / 1000, (sla.e2e_ms or 0.0) / 1000)


def _records_frame(records: list[RequestRecord]) -> pl.DataFrame:
    return pl.DataFrame([r.model_dump() for r in records], schema_overrides={"itl_s": pl.List(pl.Float64)})


class _StepRunner:
    """Shared by sweeps and replays: warm-up, cache reset, one watched open-loop run."""

    def __init__(
        self,
        engine: Engine,
        spec: EndpointSpec,
        bodies: list[str],
        ids: list[str],
        *,
        senders: int,
        lag_bounds: LagBounds,
        timeout_s: float,
        records_dir: Path | None,
        reset_cache: bool = True,
        prefix_bodies: list[str] | None = None,
    ):
        self.engine, self.spec, self.bodies, self.ids = engine, spec, bodies, ids
        self.prefix_bodies = prefix_bodies or []
        # the engine keeps what it cached across steps (no reset route, or the reset failed): a step
        # must then never replay a prompt this engine has already served (see take())
        self.cache_kept = False
        self.senders, self.lag_bounds, self.timeout_s = senders, lag_bounds, timeout_s
        self.records_dir = records_dir
        self.reset_cache = reset_cache
        # request fields this engine rejects (HTTP 422): left out of every body
        adapter = getattr(engine, "adapter", None)
        self.omit_fields = frozenset(getattr(adapter, "rejected_request_fields", ()) or ())
        self.notes: list[str] = []
        self._reset_warned = False

    def warmup(self, count: int, *, max_tokens: int | None = None, timeout_s: float | None = None) -> list[float]:
        """Send ``count`` requests at once and wait for them; return their e2e latencies (seconds).
        ``max_tokens`` clips their replies, ``timeout_s`` cuts the burst (a warm-up, not a step)."""
        if count <= 0:
            return []
        bodies = self.bodies[-count:]  # the pool's tail: steps start elsewhere (see take())
        if max_tokens is not None:
            bodies = [_clip_output(b, max_tokens) for b in bodies]
        stop = _deadline_check(None, timeout_s, "warm-up deadline") if timeout_s is not None else None
        outcome = run_open_loop(
            self.engine.base_url,
            self.engine.served_model,
            bodies,
            np.zeros(count),
            omit_fields=self.omit_fields,
            timeout_s=self.timeout_s,
            lag_bounds=LagBounds(1e9, 0.0, 10**9),
            stop_check=stop,
        )
        return [r.e2e_s for r in outcome.records if r.ok and r.e2e_s is not None]

    def reset(self) -> None:
        """Empty the prefix cache, then warm the pool's hot shared prefixes (``sweep.warm_prefix_groups``)."""
        if not self.reset_cache:
            return
        try:
            self.engine.reset_prefix_cache()
        except Exception as exc:  # noqa: BLE001 - external servers cannot be reset; say so once
            self.cache_kept = True
            if not self._reset_warned:
                self.notes.append(
                    f"prefix cache not reset before steps: {str(exc).splitlines()[0]}; every step "
                    "takes requests this engine has not served yet"
                )
                self._reset_warned = True
            return
        self.warm_prefixes()

    def take(self, count: int, seeded_offset: int) -> int:
        """Where a step's ``count`` requests start in the pool. On an engine whose cache is reset before
        each step: the seeded place, the same in every repeat. On one that keeps its cache: the next
        requests of this engine's own walk through the pool, so a repeat never replays prompts the
        engine has cached (transformers serve shares prefix blocks and has no reset: on the H200 every
        second sweep replayed the first's prompts and held 40-70% more). Each engine starts its walk
        at the pool's start, so configurations still meet the same requests, sweep for sweep."""
        if not self.cache_kept:
            return seeded_offset
        start = _advance_cursor(self.engine, count)
        return seeded_offset if start is None else start

    def warm_prefixes(self) -> int:
        """Send one prefill-only request per hot prefix group and wait for them (the engine's cache
        must be on: with it off they would only cost time). Returns how many completed."""
        if not self.prefix_bodies or not _prefix_cache_on(self.engine):
            return 0
        bodies = [_clip_output(b, 1) for b in self.prefix_bodies]
        outcome = run_open_loop(
            self.engine.base_url,
            self.engine.served_model,
            bodies,
            np.zeros(len(bodies)),
            omit_fields=self.omit_fields,
            timeout_s=self.timeout_s,
            lag_bounds=LagBounds(1e9, 0.0, 10**9),
        )
        done = sum(1 for r in outcome.records if r.ok)
        if done < len(bodies) and not any("prefix warm-up" in n for n in self.notes):
            self.notes.append(f"prefix warm-up: {len(bodies) - done} of {len(bodies)} requests failed")
        return done

    def run(
        self,
        schedule: np.ndarray,
        duration_s: float,
        target_rate: float,
        label: str,
        keep: dict | None = None,
        offset: int = 0,
        drain_s: float | None = None,
    ) -> StepResult:
        """One open-loop run; requests are taken from the pool in order starting at ``offset``
        (steps start at different, seeded places so they do not all replay the pool's beginning).
        With ``drain_s``, requests still in flight that long after the schedule ends are cut."""
        offset %= len(self.bodies)
        bodies, ids = self.bodies[offset:] + self.bodies[:offset], self.ids[offset:] + self.ids[:offset]
        with EngineWatch(self.engine) as watch:
            stop = watch.stop_check
            if drain_s is not None:
                # Polled every 0.1 s from about 0.2 s before the schedule starts; the margin keeps
                # every request's drain at least drain_s.
                stop = _deadline_check(watch.stop_check, duration_s + drain_s + 0.5, DRAIN_CUT)
            outcome = run_open_loop(
                self.engine.base_url,
                self.engine.served_model,
                bodies,
                schedule,
                omit_fields=self.omit_fields,
                timeout_s=self.timeout_s,
                senders=self.senders,
                lag_bounds=self.lag_bounds,
                duration_s=duration_s,
                request_ids=ids,
                stop_check=stop,
                isolate=True,
                nice=-10,
            )
        if outcome.aborted == DRAIN_CUT:
            outcome = _cut_at_deadline(outcome, self.lag_bounds, drain_s or 0.0)
        return self._step(outcome, watch, target_rate, label, keep)

    def run_closed(
        self,
        users: list[UserScript],
        label: str,
        *,
        stop_sending_s: float | None = None,
        keep: dict | None = None,
        drain_s: float | None = None,
        deadline_s: float | None = None,
        user_count: int | None = None,
        min_requests: int = 0,
    ) -> StepResult:
        """One closed-loop run (session replay or concurrency step), watched like an open-loop step.
        Requests still in flight ``drain_s`` after ``stop_sending_s`` (or after ``deadline_s``) are cut."""
        with EngineWatch(self.engine) as watch:
            stop = watch.stop_check
            if drain_s is not None and (stop_sending_s is not None or deadline_s is not None):
                # sending may go on up to 4x stop_sending_s for min_requests (see run_closed_loop)
                limit = (4 * stop_sending_s if stop_sending_s is not None else deadline_s) + drain_s + 0.5
                stop = _deadline_check(watch.stop_check, limit, DRAIN_CUT)
            outcome = run_closed_loop(
                self.engine.base_url,
                self.engine.served_model,
                self.bodies,
                users,
                stop_sending_s=stop_sending_s,
                omit_fields=self.omit_fields,
                timeout_s=self.timeout_s,
                lag_bounds=self.lag_bounds,
                request_ids=self.ids,
                stop_check=stop,
                min_requests=min_requests,
            )
        if outcome.aborted == DRAIN_CUT:
            outcome = _cut_at_deadline(
                outcome, LagBounds(self.lag_bounds.p99_ms, 0.0, self.lag_bounds.max_client_errors), drain_s or 0.0
            )
        step = self._step(outcome, watch, outcome.achieved_rate, label, keep)
        return step.model_copy(update={"users": user_count}) if user_count is not None else step

    def _step(
        self, outcome: RunOutcome, watch: EngineWatch, target_rate: float, label: str, keep: dict | None
    ) -> StepResult:
        crash = watch.final_check()
        if keep is not None:
            keep["records"] = outcome.records
        step = summarize(outcome, self.spec.sla, target_rate=target_rate)
        metrics, timeline = watch.summary()
        errors = []
        for r in outcome.records:
            if r.error and r.error not in errors:
                errors.append(r.error[:300])
            if len(errors) >= 5:
                break
        update = {
            "engine_metrics": metrics,
            "metrics_samples": timeline,
            "send_lag_max_ms": outcome.send_lag_max_ms,
            "client_cpu_util": outcome.client_cpu_util,
            "senders": outcome.senders,
            "connections_opened": outcome.connections_opened,
            "error_examples": errors,
            "started_at": outcome.started_at,
            "device_metrics": watch.device_summary(),
        }
        if watch.device_note and watch.device_note not in self.notes:
            self.notes.append(watch.device_note)
        if not crash and step.requests and step.cut_before_first_token == step.requests:
            crash = (
                f"the engine answered none of the {step.requests} requests by the step's deadline (not one "
                "first token): it accepts connections but does not serve"
            )
        if crash:
            reason = crash if not step.invalid_reason else f"{crash}; {step.invalid_reason}"
            update.update(validity="invalid", invalid_reason=reason, within_sla=False)
        if self.records_dir is not None:
            path = self.records_dir / f"{label}.parquet"
            failed = _write_records(outcome.records, path)
            if failed:  # a step whose evidence cannot be kept is not a measurement (a full disk, a read-only mount)
                reason = f"request records could not be written to {path.parent}: {failed}"
                previous = update.get("invalid_reason") or step.invalid_reason
                update.update(
                    validity="invalid", within_sla=False, invalid_reason=f"{previous}; {reason}" if previous else reason
                )
            else:
                update["records_path"] = str(path)
        return step.model_copy(update=update)


def _write_records(records: list[RequestRecord], path: Path) -> str | None:
    """Write a step's request records beside their place and rename them into it, so that a failed write
    (a full disk) leaves no half-written file; returns the error, or None when written."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _records_frame(records).write_parquet(partial)
        os.replace(partial, path)
    except (OSError, pl.exceptions.PolarsError) as exc:  # polars wraps the OS error in its own
        partial.unlink(missing_ok=True)
        text = getattr(exc, "strerror", None) or str(exc)
        return text.split("IO error: ", 1)[-1]
    return None


def runner_for(engine: Engine, pool: pl.DataFrame, spec: EndpointSpec, max_rate: float) -> _StepRunner:
    """A step runner for open-loop runs up to ``max_rate`` outside a sweep (the soak), built as a sweep
    builds its own: the pool's requests, the SLA's send-lag bounds and timeout, calibrated senders."""
    from loadgen.calibrate import client_limit, senders_for

    bodies, ids = pool_requests(pool)
    sla, cfg = spec.sla, spec.sweep
    timeout = max(60.0, 3 * cfg.step_duration_s, 3 * (sla.e2e_ms or 0) / 1000)
    return _StepRunner(
        engine,
        spec,
        bodies,
        ids,
        senders=senders_for(max_rate, client_limit()),
        lag_bounds=sweep_lag_bounds(sla, cfg),
        timeout_s=timeout,
        records_dir=None,
        prefix_bodies=prefix_representatives(pool, cfg.warm_prefix_groups),
    )


def run_sweep(
    engine: Engine,
    pool: pl.DataFrame,
    spec: EndpointSpec,
    *,
    rates: list[float] | None = None,
    progress: ProgressFn | None = None,
    repeats_label: str | None = None,
    step_duration_s: float | None = None,
    max_steps: int | None = None,
    senders: int | None = None,
    lag_bounds: LagBounds | None = None,
    timeout_s: float | None = None,
    resolution: float = 0.15,
    records_dir: Path | None = None,
    check_client: bool = True,
    idle_timeout_s: float = 60.0,
    min_requests: int | None = None,
    client_retries: int = 1,
    engine_startup_s: float | None = None,
) -> SweepResult:
    """Sweep ``engine`` with requests from ``pool`` (cycled) at a ladder of rates; see the module doc.

    ``rates`` overrides the endpoint's ladder (``spec.sweep.rates``; None there = automatic).
    A step lasts ``step_duration_s`` or long enough for ``min_requests`` (default ``sweep.min_requests``) requests, whichever is
    longer, up to 4x ``step_duration_s`` (percentiles of a handful of requests mean nothing).
    A step the client could not keep on schedule (a busy host, not the engine) is repeated up to
    ``client_retries`` times before it invalidates the sweep; the repeat is noted. ``senders`` defaults to what the client calibration says the highest rate needs (1 when
    uncalibrated). Rates beyond the calibrated client limit are refused (ValueError) when
    ``check_client`` is set and a calibration exists. ``engine_startup_s`` (launch to healthy, when
    the caller measured it; else the engine's ``startup_s`` attribute, if any) is kept in the result.
    """
    cfg = spec.sweep
    duration = step_duration_s or cfg.step_duration_s
    min_requests = min_requests or cfg.min_requests
    steps_cap = max_steps or cfg.max_steps
    ladder = list(rates) if rates is not None else (list(cfg.rates) if cfg.rates else None)
    if ladder is not None and (not ladder or any((not math.isfinite(r)) or r <= 0 for r in ladder)):
        raise ValueError(f"sweep rates must be positive numbers, got {ladder}")
    bodies, ids = pool_requests(pool)
    sla = spec.sla
    timeout = timeout_s or max(60.0, 3 * duration, 3 * (sla.e2e_ms or 0) / 1000)
    bounds = lag_bounds or sweep_lag_bounds(sla, cfg)
    drain = drain_cap(sla, cfg)
    notes: list[str] = []

    from loadgen.calibrate import client_limit, senders_for

    cal = client_limit()
    if senders is None:
        senders = senders_for(max(ladder) if ladder else 0.0, cal)
    if check_client and cal is not None and ladder and max(ladder) > cal.max_rate * senders:
        raise ValueError(
            f"sweep asks for {max(ladder):g} req/s but this machine's client was calibrated to sustain "
            f"{cal.max_rate:g} req/s per sender ({senders} sender(s)); lower the rates or add senders"
        )
    if cal is None:
        notes.append(
            "client not calibrated on this machine (run `autoresearch loadgen calibrate`); "
            "send lag is still checked on every step"
        )

    runner = _StepRunner(
        engine,
        spec,
        bodies,
        ids,
        senders=senders,
        lag_bounds=bounds,
        timeout_s=timeout,
        records_dir=records_dir,
        prefix_bodies=prefix_representatives(pool, cfg.warm_prefix_groups),
    )
    steps: list[StepResult] = []
    validity, reason = "valid", None
    engine_args = list(getattr(getattr(engine, "spec", None), "engine", spec.engine).args)
    started = time.time()
    started_mono = time.monotonic()

    def emit(phase: str, rate: float | None, message: str, step: StepResult | None = None) -> None:
        if progress:
            progress(
                SweepProgress(
                    phase,
                    len(steps),
                    steps_cap if ladder is None else min(steps_cap, len(ladder) + cfg.refine_steps),
                    rate,
                    message,
                    step,
                )
            )

    if warm_engine(engine, bodies, ids, spec, ladder, timeout, notes):
        emit("warmup", None, f"engine warm-up done ({cfg.engine_warmup_s:g}s, not counted)")
    next_rate: float | None
    if ladder is None:
        emit("probe", None, "probing single-request latency")
        probe = max(cfg.warmup_requests, 4)
        lat = runner.warmup(probe)
        if not lat:
            raise RuntimeError(
                f"probe requests to {engine.base_url} all failed; is the engine serving {engine.served_model!r}?"
            )
        # `probe` requests sent together finished in max(lat): half that throughput is a safe first rate.
        next_rate = _nice(max(0.2, 0.5 * len(lat) / float(np.max(lat))))
    else:
        next_rate = ladder[0]
    floor = cfg.min_rate if cfg.min_rate is not None else next_rate / 16
    history: list[tuple[float, bool]] = []
    fails_in_row = refined = 0
    used = 1  # ladder rungs taken so far (the first one is next_rate)
    extended = False  # went below the ladder: the lowest rung failed
    while next_rate is not None and len(steps) < steps_cap:
        rate = next_rate
        if check_client and cal is not None and rate > cal.max_rate * senders:
            notes.append(
                f"stopped before {rate:g} req/s: beyond the calibrated client limit "
                f"({cal.max_rate:g} req/s x {senders} sender(s))"
            )
            break
        emit("warmup", rate, f"step {len(steps) + 1}: warm-up and prefix-cache reset")
        step_began = time.monotonic()
        warmup_wall = _warm_up_and_reset(runner, engine, cfg, idle_timeout_s, notes, f"{rate:g} req/s")
        emit("step", rate, f"step {len(steps) + 1}: {rate:g} req/s for {duration:g}s")
        step_s = max(duration, min(min_requests / rate, 4 * duration))
        schedule = arrivals.schedule(
            cfg.arrival, rate, step_s, burstiness=cfg.burstiness, seed=step_seed(cfg.seed, rate)
        )
        label = f"{repeats_label or 'sweep'}-{len(steps):02d}-{rate:g}"
        seeded = int(np.random.default_rng(step_seed(cfg.seed, rate)).integers(len(bodies)))  # same in every repeat
        offset = runner.take(len(schedule), seeded)

        def rerun(attempt: int) -> StepResult:
            emit("step", rate, f"step {len(steps) + 1}: client fell behind, repeating {rate:g} req/s")
            return runner.run(
                schedule,
                step_s,
                rate,
                f"{label}-retry{attempt}",
                offset=runner.take(len(schedule), offset),
                drain_s=drain,
            )

        step = _repeat_if_client_bound(
            runner.run(schedule, step_s, rate, label, offset=offset, drain_s=drain),
            client_retries,
            rerun,
            runner,
            engine,
            idle_timeout_s,
            notes,
            f"{rate:g} req/s",
        )
        step = step.model_copy(update={"wall_s": time.monotonic() - step_began, "warmup_wall_s": warmup_wall})
        if step.cut_requests:
            notes.append(
                f"{rate:g} req/s: {step.cut_requests} of {step.requests} requests cut {drain:g}s after "
                f"the schedule ({step.cut_before_first_token} before their first token)"
            )
        steps.append(step)
        emit("step_done", rate, _step_line(step), step)
        if step.validity != "valid":
            validity, reason = "invalid", f"step at {rate:g} req/s: {step.invalid_reason}"
            break
        history.append((rate, step.within_sla))
        if ladder is None:
            next_rate = _next_auto_rate(history, 2.0, resolution, floor)
            continue
        fails_in_row = 0 if step.within_sla else fails_in_row + 1
        if not any(ok for _, ok in history):  # nothing held yet: go down
            lowest = min(r for r, _ in history)
            if used < len(ladder) and ladder[used] < lowest:  # a ladder that already goes down (a repeat)
                next_rate, used = ladder[used], used + 1
            else:
                next_rate = extend_down(history, floor)
                extended = extended or next_rate is not None
            continue
        broken = not step.within_sla and (sla_excess(step, sla) >= 2.0 or fails_in_row >= 2)
        if extended or refined or broken or used >= len(ladder):  # the ladder is done: refine, or stop
            if broken and not refined and not extended and used < len(ladder):
                notes.append(f"stopped after {rate:g} req/s: SLA clearly broken ({'; '.join(step.sla_violations)})")
            next_rate = refine_rate(history) if refined < cfg.refine_steps else None
            refined += next_rate is not None
        else:
            next_rate, used = ladder[used], used + 1
    if not steps and validity == "valid":  # nothing measured is not a capacity of 0
        validity = "invalid"
        reason = (
            "no step was run: "
            + (notes[-1] if notes else "the first rate was refused")
            + "; nothing about the engine was measured"
        )
    tested, bounded = capacity(steps)
    cap, method = interpolated_capacity(steps, sla)
    below = None
    held = [s for s in steps if s.validity == "valid" and s.within_sla]
    tried = [s.target_rate for s in steps if s.validity == "valid"]
    if not held and tried and validity == "valid":
        below = min(tried)
        at_floor = below <= floor * (1 + 1e-9)
        method = "below_floor" if at_floor else "none_held"
        notes.append(
            f"no tested rate held the SLA: capacity is below {below:g} req/s"
            + (
                f" (the floor, sweep.min_rate {floor:g} req/s)"
                if at_floor
                else f" (stopped at max_steps before the floor {floor:g} req/s)"
            )
        )
    divisor = spec.hardware.capacity_divisor
    result = SweepResult(
        endpoint=spec.name,
        engine_args=engine_args,
        launch_config_hash=_config_hash(engine, spec),
        started_at=started,
        steps=steps,
        knee_rate=knee_rate(steps),
        capacity_rps=cap,
        capacity_per_gpu=cap / divisor,
        validity=validity,
        invalid_reason=reason,
        client_max_rate=cal.max_rate * senders if cal else None,
        label=repeats_label,
        sla=sla.model_dump(),
        arrival=cfg.arrival,
        step_duration_s=duration,
        gpu_divisor=divisor,
        capacity_bounded=bounded,
        notes=notes + runner.notes,
        capacity_tested_rps=tested,
        capacity_method=method,
        capacity_below_rps=below,
        min_rate=floor,
        drain_s=drain,
        engine_startup_s=engine_startup_s if engine_startup_s is not None else getattr(engine, "startup_s", None),
        wall_s=time.monotonic() - started_mono,
    )
    fit = estimate_capacity(steps)
    if fit is not None and not fit.censored and validity == "valid":
        result.capacity_fit_rps, result.capacity_fit_low, result.capacity_fit_high = fit.capacity, fit.low, fit.high
    text = f"below {below:g} req/s" if below is not None else f"{cap:.3g} req/s ({cap / divisor:.3g} per GPU)"
    emit("done", None, f"capacity {text}, knee {result.knee_rate}")
    return result


def _config_hash(engine: Engine, spec: EndpointSpec) -> str:
    identity = getattr(engine, "identity", None)
    if identity is not None and getattr(identity, "launch_config_hash", None):
        return identity.launch_config_hash
    return getattr(engine, "spec", spec).launch_config_hash()


def _step_line(step: StepResult) -> str:
    mark = "ok" if step.within_sla else ("INVALID" if step.validity != "valid" else "SLA broken")
    ttft = f"{step.ttft_ms.p95:.0f}" if step.ttft_ms.p95 is not None else "-"
    return (
        f"{step.target_rate:g} req/s: ttft p95 {ttft} ms, {step.throughput_rps:.1f} ok/s, "
        f"errors {step.error_rate:.1%} -> {mark}"
    )


def warm_engine(
    engine: Engine,
    bodies: list[str],
    ids: list[str],
    spec: EndpointSpec,
    ladder: list[float] | None,
    timeout_s: float,
    notes: list[str],
) -> bool:
    """Once per engine: an uncounted open-loop run of ``sweep.engine_warmup_s`` seconds at
    ``sweep.engine_warmup_rps`` (default half the ladder's top rate, 1 req/s without a ladder), with
    the pool's own replies (the batch grows to the sizes a step meets: clipped replies left the H200's
    first sweep as slow as before); in-flight requests are cut 5 s after it. Marks the engine
    (``warmed_up``) so later sweeps on it skip it. Returns whether it ran; a failure is a note."""
    cfg = spec.sweep
    if cfg.engine_warmup_s <= 0 or getattr(engine, "warmed_up", False):
        return False
    rate = cfg.engine_warmup_rps or (max(ladder) / 2 if ladder else 1.0)
    runner = _StepRunner(
        engine,
        spec,
        bodies,
        ids,
        senders=1,
        lag_bounds=LagBounds(1e9, 0.0, 10**9),
        timeout_s=timeout_s,
        records_dir=None,
        reset_cache=False,
    )
    schedule = arrivals.schedule("constant", rate, cfg.engine_warmup_s, seed=cfg.seed)
    try:
        start = _advance_cursor(engine, len(schedule)) or 0  # an engine that keeps its cache starts past these
        step = runner.run(schedule, cfg.engine_warmup_s, rate, "engine-warmup", offset=start, drain_s=5.0)
        notes.append(
            f"engine warm-up (not counted): {step.requests} requests at {rate:g} req/s over "
            f"{cfg.engine_warmup_s:g}s, {step.cut_requests} cut 5 s after"
        )
    except Exception as exc:  # noqa: BLE001 - the first step's watcher classifies a dead engine
        notes.append(f"engine warm-up failed: {exc}")
    try:
        engine.warmed_up = True
    except AttributeError:  # an engine object without attributes of its own: warm it every sweep
        pass
    return True


def _repeat_if_client_bound(
    step: StepResult,
    retries: int,
    rerun: Callable[[int], StepResult],
    runner,
    engine,
    idle_timeout_s: float,
    notes: list[str],
    what: str,
) -> StepResult:
    """A step the client fell behind on (a busy host, not the engine) is run again, up to ``retries``
    times, after an idle wait and a cache reset; each repeat is noted. ``rerun(n)`` runs repeat n."""
    for attempt in range(1, retries + 1):
        if not client_bound(step):
            break
        notes.append(f"step at {what} repeated: {step.invalid_reason}")
        _wait_idle(engine, idle_timeout_s)
        runner.reset()
        step = rerun(attempt)
    return step


def _advance_cursor(engine: Engine, count: int) -> int | None:
    """Where the engine's own walk through the pool stands, moved on by ``count`` requests (see
    ``_StepRunner.take``); None for an engine object that cannot hold it."""
    start = getattr(engine, "pool_cursor", 0)
    try:
        engine.pool_cursor = start + count
    except AttributeError:
        return None
    return start


def _prefix_cache_on(engine: Engine) -> bool:
    """Whether the running engine's arguments keep a prefix cache (asks the adapter's vocabulary)."""
    vocab = getattr(getattr(engine, "adapter", None), "vocabulary", None)
    args = getattr(getattr(engine, "spec", None), "engine", None)
    if vocab is None or args is None:
        return False
    return vocab.prefix_cache_on(parse_args(list(args.args)))


def _warm_up_and_reset(runner, engine, cfg: SweepSpec, idle_timeout_s: float, notes: list[str], before: str) -> float:
    """Before a step: wait for an idle engine, warm it up, wait again, reset the prefix cache.
    A failed warm-up is a note (the step's watcher classifies a dead engine). Returns its wall time."""
    began = time.monotonic()
    _wait_idle(engine, idle_timeout_s)
    try:
        runner.warmup(cfg.warmup_requests, max_tokens=cfg.warmup_max_tokens, timeout_s=cfg.warmup_timeout_s)
    except Exception as exc:  # noqa: BLE001 - the step's watcher will classify a dead engine
        notes.append(f"warm-up before {before} failed: {exc}")
    _wait_idle(engine, idle_timeout_s)
    runner.reset()
    return time.monotonic() - began


def sla_of(sweep: SweepResult) -> SLASpec | None:
    """The SLA a sweep was judged against (stored with it)."""
    return SLASpec(**sweep.sla) if sweep.sla else None


def warn_if_client_bound(sweep: SweepResult) -> None:
    if sweep.validity != "valid" and sweep.invalid_reason and "client" in sweep.invalid_reason:
        warnings.warn(sweep.invalid_reason, stacklevel=2)


def user_scripts(pool: pl.DataFrame, users: int, think_time_s: float | None) -> list[UserScript]:
    """``users`` closed-loop users over the pool (in arrival order), each starting at its own share of
    it and cycling; the think time before each request is ``think_time_s``, else the pool's logged
    think time of that request (0 for a session's first turn or a pool without sessions)."""
    n = pool.height
    if think_time_s is not None or "think_time_s" not in pool.columns:
        think = [think_time_s or 0.0] * n
    else:
        think = [t or 0.0 for t in pool.sort("arrival_offset_s", maintain_order=True)["think_time_s"].to_list()]
    scripts = []
    for u in range(users):
        first = u * n // users
        order = list(range(first, n)) + list(range(first))
        scripts.append(UserScript(0.0, order, [think[i] for i in order], session=f"user{u}", cycle=True))
    return scripts


def user_capacity(steps: list[StepResult]) -> tuple[int | None, bool]:
    """(highest users within the SLA below the lowest failing count, bounded): as :func:`capacity`,
    on user counts; None when no valid count held."""
    valid = [s for s in steps if s.validity == "valid" and s.users is not None]
    first_fail = min((s.users for s in valid if not s.within_sla), default=math.inf)
    held = [s.users for s in valid if s.within_sla and s.users < first_fail]
    return (max(held) if held else None), first_fail != math.inf


def run_user_sweep(
    engine: Engine,
    pool: pl.DataFrame,
    spec: EndpointSpec,
    *,
    users: list[int] | None = None,
    think_time_s: float | None = None,
    step_duration_s: float | None = None,
    lag_bounds: LagBounds | None = None,
    timeout_s: float | None = None,
    records_dir: Path | None = None,
    progress: ProgressFn | None = None,
    idle_timeout_s: float = 60.0,
    repeats_label: str | None = None,
    client_retries: int = 1,
) -> SweepResult:
    """Concurrency mode: hold each number of closed-loop users for a step; report the load curve
    against users and the highest count within the SLA (``capacity_users``).

    Each user sends its next request when its previous reply has ended plus a think time, so the
    server's speed sets the request rate: this answers "how many users at once", the open-loop
    sweep "how much traffic"; capacity verdicts stay on the open loop, whose offered load does not
    bend to the server. Steps as in :func:`run_sweep` (idle wait, warm-up, cache reset, drain cut,
    held past ``step_duration_s`` until ``sweep.min_requests`` were sent, at most 4x, a step the
    client fell behind on repeated ``client_retries`` times before it invalidates the sweep); the sweep
    stops after two failing counts in a row.
    """
    cfg = spec.sweep
    counts = list(users if users is not None else (cfg.users or []))
    if not counts or any(int(u) != u or u < 1 for u in counts):
        raise ValueError(f"concurrency sweep needs positive integer user counts, got {counts}")
    think = think_time_s if think_time_s is not None else cfg.think_time_s
    duration = step_duration_s or cfg.step_duration_s
    sla = spec.sla
    bodies, ids = pool_requests(pool)
    timeout = timeout_s or max(60.0, 3 * duration, 3 * (sla.e2e_ms or 0) / 1000)
    bounds = lag_bounds or sweep_lag_bounds(sla, cfg)
    drain = drain_cap(sla, cfg)
    runner = _StepRunner(
        engine,
        spec,
        bodies,
        ids,
        senders=1,
        lag_bounds=bounds,
        timeout_s=timeout,
        records_dir=records_dir,
        prefix_bodies=prefix_representatives(pool, cfg.warm_prefix_groups),
    )
    steps: list[StepResult] = []
    notes: list[str] = []
    validity, reason = "valid", None
    started, started_mono = time.time(), time.monotonic()
    ordered = pool.sort("arrival_offset_s", maintain_order=True) if "arrival_offset_s" in pool.columns else pool
    fails_in_row = 0

    def emit(phase: str, message: str, step: StepResult | None = None, count: int | None = None) -> None:
        if progress:
            progress(SweepProgress(phase, len(steps), len(counts), count, message, step))

    if warm_engine(engine, bodies, ids, spec, list(cfg.rates or []), timeout, notes):
        emit("warmup", f"engine warm-up done ({cfg.engine_warmup_s:g}s, not counted)")
    for count in sorted(int(u) for u in counts):
        emit("warmup", f"{count} users: warm-up and prefix-cache reset", count=count)
        began = time.monotonic()
        warmup_wall = _warm_up_and_reset(runner, engine, cfg, idle_timeout_s, notes, f"{count} users")
        emit("step", f"{count} users for {duration:g}s", count=count)
        label = f"{repeats_label or 'users'}-{count}"

        def run_users(name: str) -> StepResult:
            return runner.run_closed(
                user_scripts(ordered, count, think),
                name,
                stop_sending_s=duration,
                drain_s=drain,
                user_count=count,
                min_requests=cfg.min_requests,
            )

        def rerun(attempt: int) -> StepResult:
            emit("step", f"{count} users: client fell behind, repeating", count=count)
            return run_users(f"{label}-retry{attempt}")

        step = _repeat_if_client_bound(
            run_users(label), client_retries, rerun, runner, engine, idle_timeout_s, notes, f"{count} users"
        )
        step = step.model_copy(update={"wall_s": time.monotonic() - began, "warmup_wall_s": warmup_wall})
        steps.append(step)
        emit("step_done", _users_line(step), step, count)
        if step.validity != "valid":
            validity, reason = "invalid", f"step at {count} users: {step.invalid_reason}"
            break
        fails_in_row = 0 if step.within_sla else fails_in_row + 1
        if fails_in_row >= 2:
            notes.append(f"stopped after {count} users: two user counts in a row broke the SLA")
            break
    held, bounded = user_capacity(steps)
    if held is None and steps and validity == "valid":
        notes.append(f"no tested user count held the SLA (lowest {min(counts)})")
    result = SweepResult(
        endpoint=spec.name,
        engine_args=list(getattr(getattr(engine, "spec", None), "engine", spec.engine).args),
        launch_config_hash=_config_hash(engine, spec),
        started_at=started,
        steps=steps,
        validity=validity,
        invalid_reason=reason,
        label=repeats_label,
        sla=sla.model_dump(),
        arrival="closed_loop",
        step_duration_s=duration,
        gpu_divisor=spec.hardware.capacity_divisor,
        capacity_bounded=bounded,
        notes=notes + runner.notes,
        drain_s=drain,
        wall_s=time.monotonic() - started_mono,
        mode="users",
        capacity_users=held,
        think_time_s=think,
    )
    emit(
        "done",
        f"highest users within the SLA: {held if held is not None else 'none'}"
        + ("" if bounded else " (no tested count broke it: a lower bound)"),
    )
    return result


def _users_line(step: StepResult) -> str:
    mark = "ok" if step.within_sla else ("INVALID" if step.validity != "valid" else "SLA broken")
    ttft = f"{step.ttft_ms.p95:.0f}" if step.ttft_ms.p95 is not None else "-"
    return (
        f"{step.users} users: {step.achieved_rate:.2f} req/s sent, ttft p95 {ttft} ms, "
        f"{step.throughput_rps:.1f} ok/s, errors {step.error_rate:.1%} -> {mark}"
    )


def render_users(result: SweepResult) -> str:
    """The concurrency sweep as text: the load curve against users and the highest count held."""
    lines = [
        f"{result.endpoint}: concurrency sweep (closed loop, think "
        f"{'pool' if result.think_time_s is None else f'{result.think_time_s:g}s'}, "
        f"{result.step_duration_s:g}s per step)",
        f"{'users':>6} {'req/s':>7} {'ttft p95':>9} {'itl p95':>8} {'e2e p95':>8} {'tok/s':>7} {'err':>6}  sla",
    ]
    fmt = lambda v: "-" if v is None else f"{v:.0f}"
    for s in result.steps:
        lines.append(
            f"{s.users:>6} {s.achieved_rate:>7.2f} {fmt(s.ttft_ms.p95):>9} {fmt(s.itl_ms.p95):>8} "
            f"{fmt(s.e2e_ms.p95):>8} {s.output_tokens_per_s:>7.1f} {s.error_rate:>6.1%}  "
            + ("ok" if s.within_sla else "INVALID" if s.validity != "valid" else "; ".join(s.sla_violations))
        )
    held = result.capacity_users
    lines.append(
        f"highest users within the SLA: {held if held is not None else 'none'}"
        + ("" if result.capacity_bounded else " (no tested count broke it: a lower bound)")
        + ("" if result.valid else f"  [INVALID: {result.invalid_reason}]")
    )
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)
