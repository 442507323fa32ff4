"""One open-loop step on a running engine, as every sweep, soak and replay runs it.

``StepRunner`` holds an engine, a replay pool and the client settings: each step waits until the
engine is idle, warms it (a burst of clipped requests), resets its prefix cache and re-warms the pool's
hot prefixes, runs the schedule open loop while ``/metrics`` and liveness are sampled, cuts what is
still in flight at the drain deadline and summarises the step against the SLA (loadgen.stats).
loadgen.sweep chooses the rates (loadgen.ladder), loadgen.users holds closed-loop users.
"""

from __future__ import annotations


import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

from specs.config import SweepSpec, EndpointSpec, SLASpec
from specs.engine_args import parse_args
from loadgen.results import RequestRecord, StepResult
from loadgen.closedloop import UserScript, run_closed_loop
from loadgen.runner import LagBounds, RunOutcome, run_open_loop
from loadgen.stats import summarize
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


def wait_idle(engine: Engine, timeout_s: float) -> None:
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


class StepRunner:
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
        start = advance_cursor(self.engine, count)
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


def runner_for(engine: Engine, pool: pl.DataFrame, spec: EndpointSpec, max_rate: float) -> StepRunner:
    """A step runner for open-loop runs up to ``max_rate`` outside a sweep (the soak), built as a sweep
    builds its own: the pool's requests, the SLA's send-lag bounds and timeout, calibrated senders."""
    from loadgen.calibrate import client_limit, senders_for

    bodies, ids = pool_requests(pool)
    sla, cfg = spec.sla, spec.sweep
    timeout = max(60.0, 3 * cfg.step_duration_s, 3 * (sla.e2e_ms or 0) / 1000)
    return StepRunner(
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


def config_hash(engine: Engine, spec: EndpointSpec) -> str:
    identity = getattr(engine, "identity", None)
    if identity is not None and getattr(identity, "launch_config_hash", None):
        return identity.launch_config_hash
    return getattr(engine, "spec", spec).launch_config_hash()


def advance_cursor(engine: Engine, count: int) -> int | None:
    """Where the engine's own walk through the pool stands, moved on by ``count`` requests (see
    ``StepRunner.take``); None for an engine object that cannot hold it."""
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
