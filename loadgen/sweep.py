"""Capacity sweep: hold increasing arrival rates, find the knee and the capacity within the SLA.

The rates and the capacity maths are loadgen.ladder's, one step on the engine is loadgen.step's, and
closed-loop users are loadgen.users'; this module runs the ladder on one engine.

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
makes its step and the sweep invalid; steps already measured are kept. A client that fell behind (after
its repeats) at a rate above one whose SLA already broke ends a capacity sweep instead: the capacity is
bracketed by the steps before it, and the dropped step is noted (a verdict's round stays invalid).

An endpoint judged by its service rate (``sweep.estimator: service_rate``, :mod:`loadgen.judge`) needs
steps whose queue grew: a sweep on the endpoint's own ladder that ends with fewer than two goes on above
its highest rate (the ladder's next rungs, else x1.4), at most three steps more.

With ``sweep.host_speed_probe``, each step first times one core's pass over memory with the engine idle
(:mod:`loadgen.host_speed`), and so does the sweep after its last step: each step keeps the readings on
either side of it, and service rates are compared at a common host speed.

With ``sweep.engine_warmup_s``, the first sweep on an engine is preceded by an uncounted open-loop
run (:func:`warm_engine`), so engines that build CUDA graphs or compiled kernels per shape as they
first meet it are measured in their steady state, not while they build.

Steps are short: an engine's first step is preceded by a warm-up, a burst of ``warmup_requests`` with
replies clipped to ``warmup_max_tokens``, cut after ``warmup_timeout_s`` (later steps follow a step,
on a warm engine); requests still in flight ``drain_s`` after
the schedule ends are cut and counted (``StepResult.cut_requests``, judged worst-case, see
:mod:`loadgen.stats`). Each step records its wall time (``wall_s``, ``warmup_wall_s``).

The prefix-cache reset before a step is followed, on an engine whose cache is on, by one
prefill-only request per hot prefix group of the pool (``sweep.warm_prefix_groups``): a step then
starts where a production server stays, with its shared system prompts cached, instead of charging
a cold miss to the first request of every group.
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

from specs.config import SweepSpec, EndpointSpec, SLASpec
from loadgen import arrivals
from loadgen.capacity import estimate as estimate_capacity
from loadgen.host_speed import memory_pass_s
from loadgen.step import (
    advance_cursor,
    ProgressFn,
    StepRunner,
    SweepProgress,
    client_bound,
    config_hash,
    drain_cap,
    pool_requests,
    prefix_representatives,
    step_seed,
    sweep_lag_bounds,
    wait_idle,
)
from loadgen.ladder import (
    nice_rate,
    next_auto_rate,
    capacity,
    extend_down,
    interpolated_capacity,
    knee_rate,
    refine_rate,
)
from loadgen.results import StepResult, SweepResult
from loadgen.runner import LagBounds
from loadgen.stats import sla_excess
from loadgen.watch import Engine


#: sweep.estimator "service_rate" reads steps whose queue grew (loadgen.queue_rate): a sweep that ended with
#: fewer than QUEUED of them, or with none that queued clearly, goes on above its highest rate, at most
#: MAX_QUEUE_STEPS more steps
QUEUED, MAX_QUEUE_STEPS = 2, 3
#: A step queued clearly when its TTFT grew by this much (k = lam/mu - 1: arrivals 1.5x what the engine
#: serves). A rung just past the service rate queues in one repeat and not in the next (k 0.10-0.12 at the
#: reference's 0.7 req/s); a sweep that stopped on two such steps shared no queued step with its repeats.
CLEAR_GROWTH = 0.5


def _rate_that_queues(steps: list[StepResult], ladder: list[float]) -> float | None:
    """The next rate above every tested one (the ladder's next rung, else x1.4), while fewer than QUEUED
    valid steps queued or none of them clearly (CLEAR_GROWTH); None once enough did. So every repeat of a
    configuration ends past the same clear overload, whichever way its noisy SLA checks went, and repeats
    share their queued rungs (the schedules loadgen.host_elasticity fits the host exponent on)."""
    from loadgen.queue_rate import queued

    valid = [st for st in steps if st.validity == "valid"]
    growth = [st.ttft_growth["slope"] for st in valid if queued(st)]
    if not valid or (len(growth) >= QUEUED and max(growth) >= CLEAR_GROWTH):
        return None
    top = max(st.target_rate for st in valid)
    return next((r for r in sorted(ladder) if r > top * (1 + 1e-9)), round(top * 1.4, 3))


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
    stop_when_broken: bool = True,
) -> SweepResult:
    """Sweep ``engine`` with requests from ``pool`` (cycled) at a ladder of rates; see the module doc.

    ``rates`` overrides the endpoint's ladder (``spec.sweep.rates``; None there = automatic).
    A step lasts ``step_duration_s`` or long enough for ``min_requests`` (default ``sweep.min_requests``) requests, whichever is
    longer, up to ``sweep.max_step_s`` (4x ``step_duration_s`` by default; percentiles of a handful of
    requests mean nothing). So a step's rate alone fixes its length, and with it its requests and arrival
    times: every repeat and every candidate that runs a rate serves the same requests there, whichever way
    its ladder went (loadgen.host_elasticity fits the host exponent on those repeats).
    A step the client could not keep on schedule (a busy host, not the engine) is repeated up to
    ``client_retries`` times before it invalidates the sweep; the repeat is noted. ``senders`` defaults to what the client calibration says the highest rate needs (1 when
    uncalibrated). Rates beyond the calibrated client limit are refused (ValueError) when
    ``check_client`` is set and a calibration exists. ``engine_startup_s`` (launch to healthy, when
    the caller measured it; else the engine's ``startup_s`` attribute, if any) is kept in the result.
    ``stop_when_broken=False`` holds every rate of an explicit ladder even past a clear SLA failure: a
    verdict's round (loadgen.verdict) chose its rates to sit around the crossing, and an estimator that
    reads overloaded steps (loadgen.queue_rate) needs them.
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

    runner = StepRunner(
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
        next_rate = nice_rate(max(0.2, 0.5 * len(lat) / float(np.max(lat))))
    else:
        next_rate = ladder[0]
    floor = cfg.min_rate if cfg.min_rate is not None else next_rate / 16
    history: list[tuple[float, bool]] = []
    fails_in_row = refined = 0
    used = 1  # ladder rungs taken so far (the first one is next_rate)
    extended = False  # went below the ladder: the lowest rung failed
    queue_steps = 0  # steps added past the ladder's end for the service rate (sweep.estimator)
    while True:
        # the endpoint's own ladder only: rates a caller passed (a verdict's round, a test) are held as given
        own_ladder = rates is None and ladder is not None
        if next_rate is None and validity == "valid" and own_ladder and cfg.estimator == "service_rate":
            next_rate = _rate_that_queues(steps, ladder) if queue_steps < MAX_QUEUE_STEPS else None
            if next_rate is not None:
                queue_steps += 1
                notes.append(f"{next_rate:g} req/s held past the SLA: the service rate needs steps that queue")
        if next_rate is None or len(steps) >= steps_cap:
            break
        rate = next_rate
        if check_client and cal is not None and rate > cal.max_rate * senders:
            notes.append(
                f"stopped before {rate:g} req/s: beyond the calibrated client limit "
                f"({cal.max_rate:g} req/s x {senders} sender(s))"
            )
            break
        emit("warmup", rate, f"step {len(steps) + 1}: warm-up and prefix-cache reset")
        step_began = time.monotonic()
        warmup_wall = warm_up_and_reset(runner, engine, cfg, idle_timeout_s, notes, f"{rate:g} req/s")
        host_s = memory_pass_s() if cfg.host_speed_probe else None  # the engine idle, just before the step
        emit("step", rate, f"step {len(steps) + 1}: {rate:g} req/s for {duration:g}s")
        step_s = max(duration, min(min_requests / rate, cfg.max_step_s or 4 * duration))  # the rate's alone
        past_a_break = any(rate > tried and not ok for tried, ok in history)  # a lower rate broke the SLA
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

        step = repeat_if_client_bound(
            runner.run(schedule, step_s, rate, label, offset=offset, drain_s=drain),
            client_retries,
            rerun,
            runner,
            engine,
            idle_timeout_s,
            notes,
            f"{rate:g} req/s",
        )
        step = step.model_copy(
            update={
                "wall_s": time.monotonic() - step_began,
                "warmup_wall_s": warmup_wall,
                "host_memory_pass_s": [host_s] if host_s else [],
            }
        )
        if step.cut_requests:
            notes.append(
                f"{rate:g} req/s: {step.cut_requests} of {step.requests} requests cut {drain:g}s after "
                f"the schedule ({step.cut_before_first_token} before their first token)"
            )
        steps.append(step)
        emit("step_done", rate, _step_line(step), step)
        if stop_when_broken and client_bound(step) and past_a_break:
            # the SLA already broke below this rate, so the capacity is bracketed by the steps before it:
            # a host stall here (repeated) ends the sweep instead of voiding what it measured (a verdict's
            # round, which holds every rate for the service rate, stays invalid: that step is its evidence)
            notes.append(
                f"stopped at {rate:g} req/s, the step dropped: {step.invalid_reason} (after {client_retries} "
                "repeat(s)); the SLA had already broken at a lower rate"
            )
            steps.pop()
            break
        if step.validity != "valid":
            validity, reason = "invalid", f"step at {rate:g} req/s: {step.invalid_reason}"
            break
        history.append((rate, step.within_sla))
        if ladder is None:
            next_rate = next_auto_rate(history, 2.0, resolution, floor)
            continue
        fails_in_row = 0 if step.within_sla else fails_in_row + 1
        if not any(ok for _, ok in history):  # nothing held yet: go down
            lowest = min(r for r, _ in history)
            # a ladder that already goes down (a repeat), or a verdict's round that holds every rate first
            if used < len(ladder) and (ladder[used] < lowest or not stop_when_broken):
                next_rate, used = ladder[used], used + 1
            else:
                next_rate = extend_down(history, floor)
                extended = extended or next_rate is not None
            continue
        broken = stop_when_broken and not step.within_sla and (sla_excess(step, sla) >= 2.0 or fails_in_row >= 2)
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
    if cfg.host_speed_probe:
        steps = _bracket_host_readings(steps, engine, idle_timeout_s)
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
        launch_config_hash=config_hash(engine, spec),
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
        estimator=cfg.estimator,
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
        engine_internals=_internals(engine),
    )
    fit = estimate_capacity(steps)
    if fit is not None and not fit.censored and validity == "valid":
        result.capacity_fit_rps, result.capacity_fit_low, result.capacity_fit_high = fit.capacity, fit.low, fit.high
    text = f"below {below:g} req/s" if below is not None else f"{cap:.3g} req/s ({cap / divisor:.3g} per GPU)"
    emit("done", None, f"capacity {text}, knee {result.knee_rate}")
    return result


def _bracket_host_readings(steps: list[StepResult], engine: Engine, idle_timeout_s: float) -> list[StepResult]:
    """Each step's host reading from before it, joined by the next step's (or, after the last, one taken
    now with the engine idle again): the host's speed on both sides of the step, at one probe per step."""
    if not steps:
        return steps
    wait_idle(engine, idle_timeout_s)
    last = memory_pass_s()
    after = [s.host_memory_pass_s[:1] for s in steps[1:]] + [[last] if last else []]
    return [s.model_copy(update={"host_memory_pass_s": s.host_memory_pass_s[:1] + a}) for s, a in zip(steps, after)]


def _internals(engine) -> dict | None:
    """The engine's internals as its evidence overlay last wrote them (None: the engine has none)."""
    adapter = getattr(engine, "adapter", None)
    return adapter.internals() if adapter is not None else None


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
    runner = StepRunner(
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
        start = advance_cursor(engine, len(schedule)) or 0  # an engine that keeps its cache starts past these
        step = runner.run(schedule, cfg.engine_warmup_s, rate, "engine-warmup", offset=start, drain_s=5.0)
        notes.append(
            f"engine warm-up (not counted): {step.requests} requests at {rate:g} req/s over "
            f"{cfg.engine_warmup_s:g}s, {step.cut_requests} cut 5 s after"
        )
    except Exception as exc:  # noqa: BLE001 - the first step's watcher classifies a dead engine
        notes.append(f"engine warm-up failed: {exc}")
    _mark_warm(engine)
    return True


def repeat_if_client_bound(
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
        wait_idle(engine, idle_timeout_s)
        runner.reset()
        step = rerun(attempt)
    return step


def warm_up_and_reset(runner, engine, cfg: SweepSpec, idle_timeout_s: float, notes: list[str], before: str) -> float:
    """Before a step: wait for an idle engine, warm it up if nothing has yet (the burst of
    ``warmup_requests``, once per engine: one that served a step seconds ago is warm, and on the 2-core
    host a burst before every step cost 2-3 s of it), wait again, reset the prefix cache.
    A failed warm-up is a note (the step's watcher classifies a dead engine). Returns its wall time."""
    began = time.monotonic()
    wait_idle(engine, idle_timeout_s)
    if not getattr(engine, "warmed_up", False):
        try:
            runner.warmup(cfg.warmup_requests, max_tokens=cfg.warmup_max_tokens, timeout_s=cfg.warmup_timeout_s)
        except Exception as exc:  # noqa: BLE001 - the step's watcher will classify a dead engine
            notes.append(f"warm-up before {before} failed: {exc}")
        _mark_warm(engine)
        wait_idle(engine, idle_timeout_s)
    runner.reset()
    return time.monotonic() - began


def _mark_warm(engine) -> None:
    """Remember on the engine object that it has been warmed (an object without attributes of its own
    is warmed before every step)."""
    try:
        engine.warmed_up = True
    except AttributeError:
        pass


def sla_of(sweep: SweepResult) -> SLASpec | None:
    """The SLA a sweep was judged against (stored with it)."""
    return SLASpec(**sweep.sla) if sweep.sla else None


def warn_if_client_bound(sweep: SweepResult) -> None:
    if sweep.validity != "valid" and sweep.invalid_reason and "client" in sweep.invalid_reason:
        warnings.warn(sweep.invalid_reason, stacklevel=2)
