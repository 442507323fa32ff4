"""Statistics of the engine over the baseline's sweeps, at the loads where a bottleneck shows: the lowest
rate (closest to batch 1), the highest rate within the SLA, and the first beyond it.

Apart from the rules because it is the one reading of ``StepResult``s (engine gauges, client-side
latencies, Little's law, SLA violations) that every rule shares, as one flat dict ``e``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from loadgen.results import StepResult, SweepResult


def _valid_steps(sweep: SweepResult) -> list[StepResult]:
    return sorted((s for s in sweep.steps if s.validity == "valid"), key=lambda s: s.target_rate)


def _pick(steps: list[StepResult], capacity: float | None) -> tuple[StepResult | None, StepResult | None]:
    """(highest step within SLA, first step beyond it): where the bottleneck shows."""
    within = [s for s in steps if s.within_sla]
    beyond = [s for s in steps if not s.within_sla and (capacity is None or s.target_rate > capacity)]
    return (within[-1] if within else None), (beyond[0] if beyond else (steps[-1] if steps else None))


def _mean(values: Iterable[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def engine_stats(sweeps: Sequence[SweepResult]) -> dict[str, float]:
    """Queueing, KV usage, preemptions, prefix hits and speculation at the load where it matters.

    ``at_cap_*`` = the highest rate within SLA, ``over_*`` = the first rate beyond it
    (the overloaded step, or the highest tested rate when none broke the SLA); averaged
    over the sweeps given (the baseline's repeats).
    """
    rows: dict[str, list[float | None]] = defaultdict(list)
    totals: dict[str, float] = defaultdict(float)
    violated: dict[str, float] = defaultdict(float)
    for sweep in sweeps:
        steps = _valid_steps(sweep)
        if not steps:
            continue
        at_cap, over = _pick(steps, sweep.capacity_rps)
        rows["capacity_rps"].append(sweep.capacity_rps)
        low = steps[0]  # the lowest load: closest to batch 1, where the roofline applies
        rows["low_rate"].append(low.target_rate)
        rows["low_itl_p50_ms"].append(low.itl_ms.p50)
        rows["low_tpot_p50_ms"].append(low.tpot_ms.p50)
        rows["low_ttft_p50_ms"].append(low.ttft_ms.p50)
        rows["low_ttft_p95_ms"].append(low.ttft_ms.p95)
        rows["low_itl_p95_ms"].append(low.itl_ms.p95)
        for key, value in (getattr(low, "device_metrics", None) or {}).items():
            rows[f"low_{key}"].append(value)
        for label, step in (("at_cap", at_cap), ("over", over)):
            if step is None:
                continue
            m = step.engine_metrics
            rows[f"{label}_rate"].append(step.target_rate)
            rows[f"{label}_throughput_rps"].append(step.throughput_rps)
            rows[f"{label}_ttft_p95_ms"].append(step.ttft_ms.p95)
            rows[f"{label}_itl_p95_ms"].append(step.itl_ms.p95)
            rows[f"{label}_e2e_p95_ms"].append(step.e2e_ms.p95)
            rows[f"{label}_error_rate"].append(step.error_rate)
            # Little's law on the client side: requests in flight (queued or running) at this rate.
            # Independent of engine gauges, which vLLM's CPU build often reads as 0 between steps.
            e2e_s = (step.e2e_ms.mean or step.e2e_ms.p50 or 0.0) / 1000
            rows[f"{label}_in_flight_mean"].append(step.achieved_rate * e2e_s if e2e_s else None)
            for key in (
                "requests_running_mean",
                "requests_running_max",
                "requests_waiting_mean",
                "requests_waiting_max",
                "kv_cache_usage_mean",
                "kv_cache_usage_max",
            ):
                rows[f"{label}_{key}"].append(m.get(key))
        for step in steps:
            m = step.engine_metrics
            for key in (
                "preemptions_delta",
                "prefix_cache_queries_delta",
                "prefix_cache_hits_delta",
                "spec_decode_draft_tokens_delta",
                "spec_decode_accepted_tokens_delta",
                "prompt_tokens_delta",
                "generation_tokens_delta",
            ):
                if m.get(key) is not None:
                    totals[key] += m[key]
            if step.cached_prompt_fraction is not None:
                rows["client_cached_prompt_fraction"].append(step.cached_prompt_fraction)
            for violation in step.sla_violations:
                violated[violation.split()[0].lower().rstrip(":")] += 1
    out = {k: v for k, v in ((k, _mean(v)) for k, v in rows.items()) if v is not None}
    out.update(totals)
    if totals.get("prefix_cache_queries_delta"):
        out["prefix_cache_hit_rate"] = totals.get("prefix_cache_hits_delta", 0.0) / totals["prefix_cache_queries_delta"]
    if totals.get("spec_decode_draft_tokens_delta"):
        out["spec_decode_acceptance_rate"] = (
            totals.get("spec_decode_accepted_tokens_delta", 0.0) / totals["spec_decode_draft_tokens_delta"]
        )
    for metric, count in violated.items():
        out[f"sla_violations_{metric}"] = count
    out["sweeps"] = float(len([s for s in sweeps if _valid_steps(s)]))
    return out


def format_stat(x: float | None, digits: int = 2) -> str:
    """A statistic for evidence text: ``n/a`` when the sweeps did not give it."""
    return "n/a" if x is None else f"{x:.{digits}f}"
