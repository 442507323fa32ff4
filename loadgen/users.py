"""Concurrency sweeps: closed-loop users (each sends its next request when the last reply ends),
for the "how many users" question next to the open-loop capacity of loadgen.sweep.

Each step holds a number of users (``sweep.users``) on one warm engine, each replaying its own share
of the pool as a session (loadgen.closedloop); the capacity is the most users whose steps hold the SLA.
"""

from __future__ import annotations


import math
import time
from pathlib import Path

import polars as pl

from specs.config import EndpointSpec
from loadgen.results import StepResult, SweepResult
from loadgen.closedloop import UserScript
from loadgen.runner import LagBounds
from loadgen.watch import Engine
from loadgen.step import (
    ProgressFn,
    StepRunner,
    SweepProgress,
    config_hash,
    drain_cap,
    pool_requests,
    prefix_representatives,
    sweep_lag_bounds,
)
from loadgen.sweep import repeat_if_client_bound, warm_engine, warm_up_and_reset


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
    runner = StepRunner(
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
        warmup_wall = warm_up_and_reset(runner, engine, cfg, idle_timeout_s, notes, f"{count} users")
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

        step = repeat_if_client_bound(
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
        launch_config_hash=config_hash(engine, spec),
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
