"""Production-shaped verification: the configuration a campaign adopted, and the one it started from,
each replayed with the pool's own production arrival pattern (per-interval rates from the trace, its
bursts and quiet periods, a cache left warm), back to back on this host.

A sweep says what an engine holds at a steady rate; production is not steady. This check says what the
adopted change does to the traffic the endpoint really sees: the share of requests that met every SLA
target (attainment), the reporting intervals that held the SLA, and what the GPUs cost per 1,000
requests, all of them and those served within the SLA (a change that serves more requests within the
SLA on the same GPUs costs less per good request). Without a GPU the cost is ``unmeasured``, never 0.

Each engine starts through the one engine-start path (``engines.run_engine``): a crash or a failed
start is that configuration's ``invalid`` row, with its reason, and the other row still stands.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
from pydantic import BaseModel, Field

from specs.config import EndpointSpec


class ProductionRow(BaseModel):
    """One configuration replayed in production shape."""

    label: str  # "before" (the campaign's reference) or "after" (its best)
    engine_args: list[str]
    validity: str = "valid"
    invalid_reason: str | None = None
    log_tail: str | None = None  # the engine log's tail, for an invalid row
    requests: int = 0
    span_s: float = 0.0  # replay seconds
    attainment: float | None = None  # share of requests that met every SLA target
    intervals: int = 0
    intervals_within_sla: int = 0
    ttft_p95_ms: float | None = None
    e2e_p95_ms: float | None = None
    gpu_s_per_1k: float | None = None  # GPU-seconds the endpoint held per 1,000 requests sent
    gpu_s_per_1k_within_sla: float | None = None  # ... per 1,000 requests served within the SLA
    gpu_busy_share: float | None = None  # mean GPU utilisation over the replay (NVML), where measured

    def line(self) -> str:
        if self.validity != "valid":
            return f"{self.label}: invalid ({self.invalid_reason})"
        cost = (
            f"{self.gpu_s_per_1k:.0f} GPU-s per 1,000 requests, "
            + (f"{self.gpu_s_per_1k_within_sla:.0f}" if self.gpu_s_per_1k_within_sla is not None else "none")
            + " per 1,000 within the SLA"
            if self.gpu_s_per_1k is not None
            else "GPU cost unmeasured (no GPU)"
        )
        attained = f"{self.attainment:.1%}" if self.attainment is not None else "unmeasured"
        return (
            f"{self.label}: SLA attainment {attained} of {self.requests} requests over {self.span_s:.0f} s, "
            f"{self.intervals_within_sla}/{self.intervals} intervals within the SLA; {cost}"
        )


class ProductionCheck(BaseModel):
    """Before and after, on one schedule: the same requests at the same times for both."""

    seconds: float
    mode: str = "shaped"
    rows: list[ProductionRow] = Field(default_factory=list)

    def row(self, label: str) -> ProductionRow | None:
        return next((r for r in self.rows if r.label == label), None)

    def summary(self) -> str:
        before, after = self.row("before"), self.row("after")
        if before is None or after is None:
            return "; ".join(r.line() for r in self.rows)
        if before.validity != "valid" or after.validity != "valid" or None in (before.attainment, after.attainment):
            return f"{before.line()}; {after.line()}"
        return (
            f"SLA attainment in production shape {before.attainment:.1%} -> {after.attainment:.1%} "
            f"({100 * (after.attainment - before.attainment):+.1f} points) over {after.requests} requests"
        )


def _row(label: str, args: list[str], result, gpu_count: int) -> ProductionRow:
    intervals = [i for i in result.intervals if i.requests]
    span = result.overall.duration_s  # the replay's schedule (its reporting intervals may run past it)
    requests = result.overall.requests
    met = round((result.attainment or 0.0) * requests)
    row = ProductionRow(
        label=label,
        engine_args=list(args),
        validity=result.validity,
        invalid_reason=result.invalid_reason,
        requests=requests,
        span_s=span,
        attainment=result.attainment,
        intervals=len(intervals),
        intervals_within_sla=sum(1 for i in intervals if i.within_sla),
        ttft_p95_ms=result.overall.ttft_ms.p95,
        e2e_p95_ms=result.overall.e2e_ms.p95,
    )
    if gpu_count > 0 and requests:
        gpu_s = gpu_count * span
        row.gpu_s_per_1k = 1000 * gpu_s / requests
        row.gpu_s_per_1k_within_sla = 1000 * gpu_s / met if met else None
        util = (result.overall.device_metrics or {}).get("gpu_util_mean")
        row.gpu_busy_share = util / 100 if util is not None else None
    return row


def production_check(
    spec: EndpointSpec,
    pool: pl.DataFrame,
    configs: list[tuple[str, list[str]]],
    *,
    workdir: Path,
    seconds: float,
    active_file: Path | None = None,
    progress: Callable[[str], None] = lambda _m: None,
) -> ProductionCheck:
    """Replay ``pool`` in production shape for at most ``seconds`` on each ``(label, engine_args)``."""
    from engines import EngineRunInvalid, run_engine
    from loadgen.replay import run_production_replay

    check = ProductionCheck(seconds=seconds)
    for label, args in configs:
        progress(f"production-shaped replay ({label}): {' '.join(args) or '(engine defaults)'}, {seconds:g} s")
        config = spec.with_engine_args(list(args))
        try:
            with run_engine(
                config, workdir=workdir / f"production-{label}", purpose="replay", active_file=active_file
            ) as engine:
                result = run_production_replay(engine, pool, config, max_duration_s=seconds)
        except EngineRunInvalid as exc:
            check.rows.append(
                ProductionRow(
                    label=label,
                    engine_args=list(args),
                    validity="invalid",
                    invalid_reason=exc.reason,
                    log_tail=exc.log_tail or None,
                )
            )
            progress(f"  {label}: invalid ({exc.reason})")
            continue
        row = _row(label, args, result, spec.hardware.gpu_count)
        check.rows.append(row)
        progress(f"  {row.line()}")
    progress(f"  {check.summary()}")
    return check
