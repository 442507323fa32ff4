"""Capacity sweep: hold increasing arrival rates, find the knee and the capacity within the SLA.

Each step: wait until the engine is idle, warm it up, reset its prefix cache, then run an
open-loop schedule (Poisson by default) for ``step_duration_s`` while a side thread samples
``/metrics`` and liveness. The ladder is explicit, or found automatically: a quick probe gives
the rate one request at a time would sustain, then geometric steps (x2) up to the first SLA
failure, then geometric bisection between the last pass and the first failure until they are
within ``resolution`` of each other. An explicit ladder stops once the SLA is clearly broken
(a target at least twice its limit, or two failing steps in a row), then bisects the bracket
around capacity ``sweep.refine_steps`` times.

Capacity is the highest tested rate within the SLA below the first failing rate; the knee is the
last rate before latency takes off (see :func:`knee_rate`). A crashed engine or a client that
fell behind makes its step and the sweep invalid; steps already measured are kept.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

from autoresearch.config import SweepSpec, EndpointSpec, SLASpec
from loadgen import arrivals
from loadgen.results import RequestRecord, StepResult, SweepResult
from loadgen.runner import LagBounds, run_open_loop
from loadgen.stats import sla_excess, summarize
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
        raise ValueError(f"replay pool has no 'body' column (columns: {pool.columns}); see replay/schema.py")
    if pool.height == 0:
        raise ValueError("replay pool is empty")
    if "arrival_offset_s" in pool.columns:
        pool = pool.sort("arrival_offset_s", maintain_order=True)
    ids = pool["request_id"].cast(pl.Utf8).to_list() if "request_id" in pool.columns else [str(i) for i in range(pool.height)]
    return pool["body"].to_list(), ids


def step_seed(seed: int, rate: float) -> int:
    """Same seed and rate -> same schedule, so repeats of a sweep see identical arrivals."""
    return (seed * 1_000_003 + int(round(rate * 1000))) % (2**32)


def knee_rate(steps: list[StepResult], latency_factor: float = 2.0, min_increase_ms: float = 50.0,
              throughput_ratio: float = 0.9) -> float | None:
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
        return (ttft is None or ttft > limit or step.error_rate > 0.05
                or keeping_up < throughput_ratio * step.achieved_rate)

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


def _next_auto_rate(history: list[tuple[float, bool]], factor: float, resolution: float, min_rate: float) -> float | None:
    passes = [r for r, ok in history if ok]
    lo = max(passes, default=None)
    fails = [r for r, ok in history if not ok and (lo is None or r > lo)]
    hi = min(fails, default=None)
    if hi is None:
        return _nice(lo * factor) if lo is not None else None
    if lo is None:
        rate = _nice(hi / factor)
        return rate if rate >= min_rate and rate < hi else None
    if hi / lo <= 1 + resolution:
        return None
    rate = _nice(math.sqrt(lo * hi))
    tried = {r for r, _ in history}
    return rate if lo < rate < hi and rate not in tried else None


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


def _records_frame(records: list[RequestRecord]) -> pl.DataFrame:
    return pl.DataFrame([r.model_dump() for r in records], schema_overrides={"itl_s": pl.List(pl.Float64)})


class _StepRunner:
    """Shared by sweeps and replays: warm-up, cache reset, one watched open-loop run."""

    def __init__(self, engine: Engine, spec: EndpointSpec, bodies: list[str], ids: list[str], *, senders: int,
                 lag_bounds: LagBounds, timeout_s: float, records_dir: Path | None, reset_cache: bool = True):
        self.engine, self.spec, self.bodies, self.ids = engine, spec, bodies, ids
        self.senders, self.lag_bounds, self.timeout_s = senders, lag_bounds, timeout_s
        self.records_dir = records_dir
        self.reset_cache = reset_cache
        self.notes: list[str] = []
        self._reset_warned = False

    def warmup(self, count: int) -> list[float]:
        """Send ``count`` requests at once and wait for them; return their e2e latencies (seconds)."""
        if count <= 0:
            return []
        outcome = run_open_loop(self.engine.base_url, self.engine.served_model, self.bodies[:count] or self.bodies,
                                np.zeros(count), timeout_s=self.timeout_s, lag_bounds=LagBounds(1e9, 0.0, 10**9))
        return [r.e2e_s for r in outcome.records if r.ok and r.e2e_s is not None]

    def reset(self) -> None:
        if not self.reset_cache:
            return
        try:
            self.engine.reset_prefix_cache()
        except Exception as exc:  # noqa: BLE001 - external servers cannot be reset; say so once
            if not self._reset_warned:
                self.notes.append(f"prefix cache not reset before steps: {str(exc).splitlines()[0]}")
                self._reset_warned = True

    def run(self, schedule: np.ndarray, duration_s: float, target_rate: float, label: str,
            keep: dict | None = None, offset: int = 0) -> StepResult:
        """One open-loop run; requests are taken from the pool in order starting at ``offset``
        (steps start at different, seeded places so they do not all replay the pool's beginning)."""
        offset %= len(self.bodies)
        bodies, ids = self.bodies[offset:] + self.bodies[:offset], self.ids[offset:] + self.ids[:offset]
        with EngineWatch(self.engine) as watch:
            outcome = run_open_loop(self.engine.base_url, self.engine.served_model, bodies, schedule,
                                    timeout_s=self.timeout_s, senders=self.senders, lag_bounds=self.lag_bounds,
                                    duration_s=duration_s, request_ids=ids, stop_check=watch.stop_check,
                                    isolate=True, nice=-10)
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
        update = {"engine_metrics": metrics, "metrics_samples": timeline, "send_lag_max_ms": outcome.send_lag_max_ms,
                  "client_cpu_util": outcome.client_cpu_util, "senders": outcome.senders,
                  "connections_opened": outcome.connections_opened, "error_examples": errors,
                  "started_at": outcome.started_at, "device_metrics": watch.device_summary()}
        if watch.device_note and watch.device_note not in self.notes:
            self.notes.append(watch.device_note)
        if crash:
            reason = crash if not step.invalid_reason else f"{crash}; {step.invalid_reason}"
            update.update(validity="invalid", invalid_reason=reason, within_sla=False)
        if self.records_dir is not None:
            self.records_dir.mkdir(parents=True, exist_ok=True)
            path = self.records_dir / f"{label}.parquet"
            _records_frame(outcome.records).write_parquet(path)
            update["records_path"] = str(path)
        return step.model_copy(update=update)


def run_sweep(engine: Engine, pool: pl.DataFrame, spec: EndpointSpec, *, rates: list[float] | None = None,
              progress: ProgressFn | None = None, repeats_label: str | None = None,
              step_duration_s: float | None = None, max_steps: int | None = None, senders: int | None = None,
              lag_bounds: LagBounds | None = None, timeout_s: float | None = None, resolution: float = 0.15,
              records_dir: Path | None = None, check_client: bool = True, idle_timeout_s: float = 60.0,
              min_requests: int | None = None, client_retries: int = 1) -> SweepResult:
    """Sweep ``engine`` with requests from ``pool`` (cycled) at a ladder of rates; see the module doc.

    ``rates`` overrides the endpoint's ladder (``spec.sweep.rates``; None there = automatic).
    A step lasts ``step_duration_s`` or long enough for ``min_requests`` (default ``sweep.min_requests``) requests, whichever is
    longer, up to 4x ``step_duration_s`` (percentiles of a handful of requests mean nothing).
    A step the client could not keep on schedule (a busy host, not the engine) is repeated up to
    ``client_retries`` times before it invalidates the sweep; the repeat is noted. ``senders`` defaults to what the client calibration says the highest rate needs (1 when
    uncalibrated). Rates beyond the calibrated client limit are refused (ValueError) when
    ``check_client`` is set and a calibration exists.
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
    notes: list[str] = []

    from loadgen.calibrate import client_limit, senders_for

    cal = client_limit()
    if senders is None:
        senders = senders_for(max(ladder) if ladder else 0.0, cal)
    if check_client and cal is not None and ladder and max(ladder) > cal.max_rate * senders:
        raise ValueError(f"sweep asks for {max(ladder):g} req/s but this machine's client was calibrated to sustain "
                         f"{cal.max_rate:g} req/s per sender ({senders} sender(s)); lower the rates or add senders")
    if cal is None:
        notes.append("client not calibrated on this machine (run `autoresearch loadgen calibrate`); "
                     "send lag is still checked on every step")

    runner = _StepRunner(engine, spec, bodies, ids, senders=senders, lag_bounds=bounds, timeout_s=timeout,
                         records_dir=records_dir)
    steps: list[StepResult] = []
    validity, reason = "valid", None
    engine_args = list(getattr(getattr(engine, "spec", None), "engine", spec.engine).args)
    started = time.time()

    def emit(phase: str, rate: float | None, message: str, step: StepResult | None = None) -> None:
        if progress:
            progress(SweepProgress(phase, len(steps), steps_cap if ladder is None
                                   else min(steps_cap, len(ladder) + cfg.refine_steps),
                                   rate, message, step))

    next_rate: float | None
    if ladder is None:
        emit("probe", None, "probing single-request latency")
        probe = max(cfg.warmup_requests, 4)
        lat = runner.warmup(probe)
        if not lat:
            raise RuntimeError(f"probe requests to {engine.base_url} all failed; is the engine serving "
                               f"{engine.served_model!r}?")
        # `probe` requests sent together finished in max(lat): half that throughput is a safe first rate.
        next_rate = _nice(max(0.2, 0.5 * len(lat) / float(np.max(lat))))
    else:
        next_rate = ladder[0]
    history: list[tuple[float, bool]] = []
    fails_in_row = refined = 0
    while next_rate is not None and len(steps) < steps_cap:
        rate = next_rate
        if check_client and cal is not None and rate > cal.max_rate * senders:
            notes.append(f"stopped before {rate:g} req/s: beyond the calibrated client limit "
                         f"({cal.max_rate:g} req/s x {senders} sender(s))")
            break
        emit("warmup", rate, f"step {len(steps) + 1}: warm-up and prefix-cache reset")
        _wait_idle(engine, idle_timeout_s)
        try:
            runner.warmup(cfg.warmup_requests)
        except Exception as exc:  # noqa: BLE001 - the step's watcher will classify a dead engine
            notes.append(f"warm-up before {rate:g} req/s failed: {exc}")
        _wait_idle(engine, idle_timeout_s)
        runner.reset()
        emit("step", rate, f"step {len(steps) + 1}: {rate:g} req/s for {duration:g}s")
        step_s = max(duration, min(min_requests / rate, 4 * duration))
        schedule = arrivals.schedule(cfg.arrival, rate, step_s, burstiness=cfg.burstiness,
                                     seed=step_seed(cfg.seed, rate))
        label = f"{repeats_label or 'sweep'}-{len(steps):02d}-{rate:g}"
        offset = int(np.random.default_rng(step_seed(cfg.seed, rate)).integers(len(bodies)))  # same in every repeat
        step = runner.run(schedule, step_s, rate, label, offset=offset)
        for attempt in range(client_retries):
            if not client_bound(step):
                break
            notes.append(f"step at {rate:g} req/s repeated: {step.invalid_reason}")
            emit("step", rate, f"step {len(steps) + 1}: client fell behind, repeating {rate:g} req/s")
            _wait_idle(engine, idle_timeout_s)
            runner.reset()
            step = runner.run(schedule, step_s, rate, f"{label}-retry{attempt + 1}", offset=offset)
        steps.append(step)
        emit("step_done", rate, _step_line(step), step)
        if step.validity != "valid":
            validity, reason = "invalid", f"step at {rate:g} req/s: {step.invalid_reason}"
            break
        history.append((rate, step.within_sla))
        if ladder is None:
            next_rate = _next_auto_rate(history, 2.0, resolution, 0.05)
        else:
            fails_in_row = 0 if step.within_sla else fails_in_row + 1
            broken = not step.within_sla and (sla_excess(step, sla) >= 2.0 or fails_in_row >= 2)
            if refined or broken or len(steps) >= len(ladder):  # the ladder is done: refine, or stop
                if broken and not refined and len(steps) < len(ladder):
                    notes.append(f"stopped after {rate:g} req/s: SLA clearly broken ({'; '.join(step.sla_violations)})")
                next_rate = refine_rate(history) if refined < cfg.refine_steps else None
                refined += next_rate is not None
            else:
                next_rate = ladder[len(steps)]
    cap, bounded = capacity(steps)
    divisor = spec.hardware.capacity_divisor
    result = SweepResult(
        endpoint=spec.name, engine_args=engine_args, launch_config_hash=_config_hash(engine, spec),
        started_at=started, steps=steps, knee_rate=knee_rate(steps), capacity_rps=cap,
        capacity_per_gpu=cap / divisor, validity=validity, invalid_reason=reason,
        client_max_rate=cal.max_rate * senders if cal else None, label=repeats_label,
        sla=sla.model_dump(), arrival=cfg.arrival, step_duration_s=duration, gpu_divisor=divisor,
        capacity_bounded=bounded, notes=notes + runner.notes)
    emit("done", None, f"capacity {cap:g} req/s ({cap / divisor:g} per GPU), knee {result.knee_rate}")
    return result


def _config_hash(engine: Engine, spec: EndpointSpec) -> str:
    identity = getattr(engine, "identity", None)
    if identity is not None and getattr(identity, "launch_config_hash", None):
        return identity.launch_config_hash
    return getattr(engine, "spec", spec).launch_config_hash()


def _step_line(step: StepResult) -> str:
    mark = "ok" if step.within_sla else ("INVALID" if step.validity != "valid" else "SLA broken")
    ttft = f"{step.ttft_ms.p95:.0f}" if step.ttft_ms.p95 is not None else "-"
    return (f"{step.target_rate:g} req/s: ttft p95 {ttft} ms, {step.throughput_rps:.1f} ok/s, "
            f"errors {step.error_rate:.1%} -> {mark}")


def sla_of(sweep: SweepResult) -> SLASpec | None:
    """The SLA a sweep was judged against (stored with it)."""
    return SLASpec(**sweep.sla) if sweep.sla else None


def warn_if_client_bound(sweep: SweepResult) -> None:
    if sweep.validity != "valid" and sweep.invalid_reason and "client" in sweep.invalid_reason:
        warnings.warn(sweep.invalid_reason, stacklevel=2)
