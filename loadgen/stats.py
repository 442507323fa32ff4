"""Latency statistics of one run and its SLA check: RunOutcome -> StepResult.

Percentiles are numpy's linear interpolation over successful requests; inter-token latency pools
every gap of every successful request (what vLLM's client and the engine's histogram report).
Failed requests never enter latency percentiles: they count in the error rate, which has its
own SLA limit.

A step whose queue grew beyond its own noise (completions fell short of arrivals:
:mod:`loadgen.sustained`) is not within the SLA, however short the step: its percentiles
describe a transient the engine cannot hold.

Cut requests (still in flight at a sweep step's drain deadline, ``RequestRecord.cut``) are not
errors. What was observed of them counts (a TTFT when their first token came, their inter-token
gaps); what was not is judged worst-case: for the SLA check they sit above every limit in E2E, in
TTFT when no token came, and in ITL when the gap still open at the cut already exceeds the limit. A step can only pass if it would pass however slow its cut requests
were. The stored summaries cover the requests that have the value; ``StepResult.sla_ratios`` holds
the judged value / limit per target (None: the percentile falls among the cut requests).
"""

from __future__ import annotations

import numpy as np

from specs.config import SLASpec
from loadgen.capacity import sla_samples
from loadgen.queue_rate import ttft_growth
from loadgen.results import LatencySummary, RequestRecord, StepResult
from loadgen.runner import RunOutcome
from loadgen.sustained import backlog, queue_grew, queue_note


def summary_ms(values_s) -> LatencySummary:
    values = np.asarray(values_s, dtype=np.float64)
    if values.size == 0:
        return LatencySummary()
    p = np.percentile(values, [50, 90, 95, 99]) * 1000.0
    return LatencySummary(
        p50=float(p[0]), p90=float(p[1]), p95=float(p[2]), p99=float(p[3]), mean=float(values.mean() * 1000.0)
    )


def percentile_ms(values_s, q: float) -> float | None:
    values = np.asarray(values_s, dtype=np.float64)
    return None if values.size == 0 else float(np.percentile(values, q) * 1000.0)


def latency_arrays(records: list[RequestRecord]) -> dict[str, np.ndarray]:
    """TTFT / ITL / E2E (seconds) of successful requests, plus what was observed of cut ones
    (their TTFT when a token came, their gaps; never their E2E, which is unknown)."""
    ok = [r for r in records if r.ok]
    cut = [r for r in records if r.cut]
    return {
        "ttft": np.array([r.ttft_s for r in ok + cut if r.ttft_s is not None], dtype=np.float64),
        "itl": np.array([g for r in ok + cut for g in r.itl_s], dtype=np.float64),
        "e2e": np.array([r.e2e_s for r in ok if r.e2e_s is not None], dtype=np.float64),
        "tpot": np.array(
            [
                (r.e2e_s - r.ttft_s) / (r.output_tokens - 1)
                for r in ok
                if r.e2e_s is not None and r.ttft_s is not None and r.output_tokens > 1
            ],
            dtype=np.float64,
        ),
    }


def judged_percentile_ms(values_s, unresolved: int, q: float) -> float | None:
    """Percentile ``q`` (numpy's linear rule) of ``values_s`` plus ``unresolved`` values worse than
    any (cut requests): inf when it depends on one of those, None when there is nothing at all."""
    values = np.sort(np.asarray(values_s, dtype=np.float64))
    n = values.size + unresolved
    if n == 0:
        return None
    h = (n - 1) * q / 100.0
    lo, hi = int(np.floor(h)), int(np.ceil(h))
    if hi >= values.size:
        return float("inf")
    return float((values[lo] + (h - lo) * (values[hi] - values[lo])) * 1000.0)


def sla_judgement(
    arrays: dict[str, np.ndarray],
    error_rate: float,
    sla: SLASpec,
    requests: int,
    unresolved: dict[str, int] | None = None,
) -> tuple[list[str], dict[str, float | None]]:
    """(violations, ratios): human-readable reasons why these latencies break ``sla`` (empty =
    within SLA), and judged value / limit per target ("ttft", "itl", "e2e", "errors"; None =
    unresolved or no value at all, i.e. worse than any limit). ``unresolved`` counts, per target,
    cut requests whose value was never observed (judged worst-case)."""
    unresolved = unresolved or {}
    out: list[str] = []
    ratios: dict[str, float | None] = {}
    checks = [
        ("ttft", sla.ttft_ms, sla.ttft_percentile),
        ("itl", sla.itl_ms, sla.itl_percentile),
        ("e2e", sla.e2e_ms, sla.e2e_percentile),
    ]
    for name, limit, q in checks:
        if limit is None:
            continue
        missing = unresolved.get(name, 0)
        value = judged_percentile_ms(arrays[name], missing, q)
        if value is None:
            if name == "ttft" and requests:
                out.append("ttft: no successful request")
                ratios[name] = None
            continue
        if value == float("inf"):
            out.append(f"{name} p{q:g} beyond the drain deadline ({missing} of {requests} requests cut unfinished)")
            ratios[name] = None
            continue
        ratios[name] = value / limit
        if value > limit:
            out.append(f"{name} p{q:g} {value:.0f}ms > {limit:g}ms")
    if sla.max_error_rate > 0:
        ratios["errors"] = error_rate / sla.max_error_rate
    else:
        ratios["errors"] = 0.0 if error_rate == 0 else None
    if error_rate > sla.max_error_rate:
        out.append(f"error rate {error_rate:.1%} > {sla.max_error_rate:.1%}")
    return out, ratios


def sla_violations(
    arrays: dict[str, np.ndarray],
    error_rate: float,
    sla: SLASpec,
    requests: int,
    unresolved: dict[str, int] | None = None,
) -> list[str]:
    """Human-readable reasons why these latencies break ``sla`` (empty = within SLA)."""
    return sla_judgement(arrays, error_rate, sla, requests, unresolved)[0]


def step_sla_ratios(step: StepResult, sla: SLASpec | None) -> dict[str, float | None]:
    """Judged value / limit per SLA target of a step: its ``sla_ratios`` when it has them, else
    computed from the stored percentiles (the nearest stored one at or above the SLA's)."""
    if step.sla_ratios or sla is None:
        return dict(step.sla_ratios)

    def stored(summary: LatencySummary, q: float) -> float | None:
        for level in (50, 90, 95, 99):
            if q <= level:
                return getattr(summary, f"p{level}")
        return summary.p99

    out: dict[str, float | None] = {}
    for name, summary, limit, q in (
        ("ttft", step.ttft_ms, sla.ttft_ms, sla.ttft_percentile),
        ("itl", step.itl_ms, sla.itl_ms, sla.itl_percentile),
        ("e2e", step.e2e_ms, sla.e2e_ms, sla.e2e_percentile),
    ):
        value = stored(summary, q)
        if limit is not None and value is not None:
            out[name] = value / limit
    if sla.max_error_rate > 0:
        out["errors"] = step.error_rate / sla.max_error_rate
    else:
        out["errors"] = 0.0 if step.error_rate == 0 else None
    if step.requests and step.ttft_ms.p50 is None:
        out["ttft"] = None
    return out


def sla_excess(step: StepResult, sla: SLASpec) -> float:
    """How far a step is past its SLA: max over targets of value/limit (1.0 = exactly at the limit;
    inf = unresolved). Uses :func:`step_sla_ratios`."""
    ratios = step_sla_ratios(step, sla)
    return max((float("inf") if r is None else r for r in ratios.values()), default=0.0)


def summarize(outcome: RunOutcome, sla: SLASpec, *, target_rate: float | None = None) -> StepResult:
    """One StepResult from a run: latency summaries, throughput, errors, SLA verdict, validity."""
    records = outcome.records
    arrays = latency_arrays(records)
    requests = len(records)
    ok = [r for r in records if r.ok]
    cut = [r for r in records if r.cut]
    cut_early = sum(1 for r in cut if r.ttft_s is None)
    # A cut request's open gap (last token to the cut) is a lower bound of its next gap: past the ITL
    # limit it is a known violation, judged worst-case; below it, unknown and left out.
    stalled = sum(
        1
        for r in cut
        if sla.itl_ms
        and r.ttft_s is not None
        and r.e2e_s is not None
        and (r.e2e_s - r.ttft_s - sum(r.itl_s)) * 1000 > sla.itl_ms
    )
    errors = requests - len(ok) - len(cut)
    error_rate = errors / requests if requests else 0.0
    sent = [r for r in records if r.sent_s is not None]
    ends = [r.sent_s + r.e2e_s for r in ok if r.e2e_s is not None]
    span = max(outcome.duration_s, max(ends, default=0.0)) if ends else outcome.duration_s
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    cached = sum(r.cached_tokens or 0 for r in ok)
    has_cached = any(r.cached_tokens is not None for r in ok)
    violations, ratios = sla_judgement(
        arrays, error_rate, sla, requests, {"ttft": cut_early, "itl": stalled, "e2e": len(cut)}
    )
    lags = np.array([r.send_lag_s for r in sent], dtype=np.float64)
    rate = float(target_rate if target_rate is not None else outcome.target_rate)
    growth = ttft_growth(records)
    closed = any(r.turn is not None for r in records)  # closed-loop users: the queue is bounded by them
    counts = None if closed else backlog(records, outcome.duration_s)
    if rate > 0 and not closed and queue_grew(growth, counts):
        violations.append(queue_note(growth, rate, counts))
    return StepResult(
        target_rate=rate,
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
        tpot_ms=summary_ms(arrays["tpot"]),
        send_lag_ms=summary_ms(lags),
        cached_prompt_fraction=(cached / prompt) if (has_cached and prompt) else None,
        within_sla=not violations and outcome.valid,
        sla_violations=violations,
        validity=outcome.validity,
        invalid_reason=outcome.reason if not outcome.valid else None,
        cut_requests=len(cut),
        cut_before_first_token=cut_early,
        sla_ratios=ratios,
        sla_samples=sla_samples(records, sla),
        ttft_growth=growth,
        backlog=counts,
    )
