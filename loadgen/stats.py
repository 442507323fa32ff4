"""Latency statistics of one run and its SLA check: RunOutcome -> StepResult.

Percentiles are numpy's linear interpolation over successful requests; inter-token latency pools
every gap of every successful request (what vLLM's client and the engine's histogram report).
Failed requests never enter latency percentiles: they count in the error rate, which has its
own SLA limit.
"""

from __future__ import annotations

import numpy as np

from autoresearch.config import SLASpec
from loadgen.results import LatencySummary, RequestRecord, StepResult
from loadgen.runner import RunOutcome


def summary_ms(values_s) -> LatencySummary:
    values = np.asarray(values_s, dtype=np.float64)
    if values.size == 0:
        return LatencySummary()
    p = np.percentile(values, [50, 90, 95, 99]) * 1000.0
    return LatencySummary(p50=float(p[0]), p90=float(p[1]), p95=float(p[2]), p99=float(p[3]),
                          mean=float(values.mean() * 1000.0))


def percentile_ms(values_s, q: float) -> float | None:
    values = np.asarray(values_s, dtype=np.float64)
    return None if values.size == 0 else float(np.percentile(values, q) * 1000.0)


def latency_arrays(records: list[RequestRecord]) -> dict[str, np.ndarray]:
    ok = [r for r in records if r.ok]
    return {
        "ttft": np.array([r.ttft_s for r in ok if r.ttft_s is not None], dtype=np.float64),
        "itl": np.array([g for r in ok for g in r.itl_s], dtype=np.float64),
        "e2e": np.array([r.e2e_s for r in ok if r.e2e_s is not None], dtype=np.float64),
    }


def sla_violations(arrays: dict[str, np.ndarray], error_rate: float, sla: SLASpec, requests: int) -> list[str]:
    """Human-readable reasons why these latencies break ``sla`` (empty = within SLA)."""
    out = []
    checks = [("ttft", sla.ttft_ms, sla.ttft_percentile), ("itl", sla.itl_ms, sla.itl_percentile),
              ("e2e", sla.e2e_ms, sla.e2e_percentile)]
    for name, limit, q in checks:
        if limit is None:
            continue
        value = percentile_ms(arrays[name], q)
        if value is None:
            if name == "ttft" and requests:
                out.append("ttft: no successful request")
            continue
        if value > limit:
            out.append(f"{name} p{q:g} {value:.0f}ms > {limit:g}ms")
    if error_rate > sla.max_error_rate:
        out.append(f"error rate {error_rate:.1%} > {sla.max_error_rate:.1%}")
    return out


def sla_excess(step: StepResult, sla: SLASpec) -> float:
    """How far a step is past its SLA: max over targets of value/limit (1.0 = exactly at the limit).
    Uses the stored p50/p90/p95/p99 (the nearest stored percentile at or above the SLA one)."""
    def stored(summary: LatencySummary, q: float) -> float | None:
        for level in (50, 90, 95, 99):
            if q <= level:
                return getattr(summary, f"p{level}")
        return summary.p99

    ratios = []
    for summary, limit, q in ((step.ttft_ms, sla.ttft_ms, sla.ttft_percentile), (step.itl_ms, sla.itl_ms, sla.itl_percentile),
                              (step.e2e_ms, sla.e2e_ms, sla.e2e_percentile)):
        value = stored(summary, q)
        if limit is not None and value is not None:
            ratios.append(value / limit)
    if sla.max_error_rate > 0:
        ratios.append(step.error_rate / sla.max_error_rate)
    elif step.error_rate > 0:
        ratios.append(float("inf"))
    if step.requests and step.ttft_ms.p50 is None:
        ratios.append(float("inf"))
    return max(ratios) if ratios else 0.0


def summarize(outcome: RunOutcome, sla: SLASpec, *, target_rate: float | None = None) -> StepResult:
    """One StepResult from a run: latency summaries, throughput, errors, SLA verdict, validity."""
    records = outcome.records
    arrays = latency_arrays(records)
    requests = len(records)
    ok = [r for r in records if r.ok]
    errors = requests - len(ok)
    error_rate = errors / requests if requests else 0.0
    sent = [r for r in records if r.sent_s is not None]
    ends = [r.sent_s + r.e2e_s for r in ok if r.e2e_s is not None]
    span = max(outcome.duration_s, max(ends, default=0.0)) if ends else outcome.duration_s
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    cached = sum(r.cached_tokens or 0 for r in ok)
    has_cached = any(r.cached_tokens is not None for r in ok)
    violations = sla_violations(arrays, error_rate, sla, requests)
    lags = np.array([r.send_lag_s for r in sent], dtype=np.float64)
    return StepResult(
        target_rate=float(target_rate if target_rate is not None else outcome.target_rate),
        achieved_rate=outcome.achieved_rate,
        throughput_rps=len(ok) / span if span > 0 else 0.0,
        output_tokens_per_s=sum(r.output_tokens for r in ok) / span if span > 0 else 0.0,
        duration_s=outcome.duration_s,
        requests=requests,
        errors=errors,
        error_rate=error_rate,
        ttft_ms=summary_ms(arrays["ttft"]),
        itl_ms=summary_ms(arrays["itl"]),
        e2e_ms=summary_ms(arrays["e2e"]),
        send_lag_ms=summary_ms(lags),
        cached_prompt_fraction=(cached / prompt) if (has_cached and prompt) else None,
        within_sla=not violations and outcome.valid,
        sla_violations=violations,
        validity=outcome.validity,
        invalid_reason=outcome.reason if not outcome.valid else None,
    )
