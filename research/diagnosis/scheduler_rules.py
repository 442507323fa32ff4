"""The diagnosis rules that read the engine's scheduler and caches: requests queued behind the batch
limit, a prefix cache left unused, KV-cache pressure, wasted speculation. Each is named after the
bottleneck it finds and returns it with a severity in 0..1 and its evidence, or None.

Apart from the timing rules because these are answered by an engine setting (a limit, a cache, a
memory share, a speculation method), read through the engine's ``Vocabulary``. Pure functions of plain
dicts: ``r`` (``traffic.request_stats``) and ``e`` (``sweep_stats.engine_stats``).
"""

from __future__ import annotations

import numpy as np

from engines.base import Vocabulary
from research.diagnosis.sweep_stats import format_stat
from research.proposals import Bottleneck


def _flag_int(args: dict[str, str | None], flag: str | None) -> int | None:
    try:
        return int(args[flag]) if flag and args.get(flag) is not None else None
    except ValueError:
        return None


def batch_limit(e: dict, args: dict, vocab: Vocabulary) -> Bottleneck | None:
    """Requests queue behind the engine's sequence limit.

    Two independent signals, and either is enough: the engine's queue gauges (sampled, and on
    vLLM's CPU build often read between scheduler steps) and Little's law on the client side
    (rate x mean latency = requests in flight; more in flight than the limit lets run must wait).
    A sparse gauge sample never vetoes what the client measured."""
    limit_flag = vocab.batch_limit.flag if vocab.batch_limit else None
    limit = _flag_int(args, limit_flag)
    running = e.get("over_requests_running_mean")
    running_max = e.get("over_requests_running_max")
    waiting = e.get("over_requests_waiting_mean")
    in_flight = e.get("over_in_flight_mean")
    ttft_breaks = bool(e.get("sla_violations_ttft"))
    evidence: list[str] = []
    severities: list[float] = []
    if running is not None and waiting is not None:
        saturated = limit is not None and running_max is not None and running_max >= limit and running >= 0.8 * limit
        if limit is None and running_max is not None:  # default limit: look for a plateau instead
            at_cap_max = e.get("at_cap_requests_running_max")
            saturated = at_cap_max is not None and running_max <= at_cap_max and waiting > running
        # The running gauge can read 0 on a busy engine; a queue several times longer than a
        # small batch limit points at the limit all the same.
        waiting_max = e.get("over_requests_waiting_max") or 0.0
        queue_past_small_limit = limit is not None and limit <= 4 and waiting_max >= 2 * limit
        if (saturated or queue_past_small_limit) and waiting >= 0.5:
            evidence.append(
                f"at {format_stat(e.get('over_rate'))} req/s the queue builds: {format_stat(waiting, 1)} "
                f"requests waiting on average (max {format_stat(e.get('over_requests_waiting_max'), 0)}) while "
                f"{format_stat(running, 1)} run (max {format_stat(running_max, 0)})"
            )
            if limit is not None:
                evidence.append(f"running requests sit at the limit {limit_flag} {limit}")
            severities.append(min(1.0, 0.4 + 0.6 * waiting / (waiting + running)))
    # Client side: more requests in flight than the limit lets run, and TTFT (queueing) breaks the SLA.
    if limit is not None and in_flight is not None and ttft_breaks and in_flight >= 1.2 * limit:
        evidence.append(
            f"TTFT breaks the SLA while {in_flight:.1f} requests are in flight on average at "
            f"{format_stat(e.get('over_rate'))} req/s (rate x mean end-to-end latency) against a limit of "
            f"{limit} ({limit_flag} {limit}): the rest wait"
        )
        severities.append(min(1.0, 0.5 + 0.5 * (in_flight - limit) / limit))
    # Client side, without any count: TTFT grows with the offered load while ITL stays flat, so
    # requests wait before they start (a queue), not while they decode.
    ttft_low, ttft_over = e.get("low_ttft_p95_ms"), e.get("over_ttft_p95_ms")
    itl_low, itl_over = e.get("low_itl_p95_ms"), e.get("over_itl_p95_ms")
    if (
        limit is not None
        and ttft_breaks
        and ttft_low
        and ttft_over
        and ttft_over >= 2 * ttft_low
        and (not itl_low or not itl_over or itl_over <= 1.5 * itl_low)
    ):
        growth = ttft_over / ttft_low
        evidence.append(
            f"TTFT p95 grows {growth:.1f}x from the lowest load ({format_stat(e.get('low_rate'))} req/s) to "
            f"{format_stat(e.get('over_rate'))} req/s while ITL p95 stays flat ({format_stat(itl_low, 0)} -> "
            f"{format_stat(itl_over, 0)} ms): requests wait before they start, behind {limit_flag} {limit}"
        )
        severities.append(min(0.9, 0.4 + 0.2 * float(np.log2(growth))))
    if not severities:
        if not (limit is not None and limit <= 4 and ttft_breaks):
            return None
        evidence.append(
            f"{limit_flag} {limit} is very small and TTFT (queueing) breaks the SLA first; "
            "neither the engine's gauges nor the client's in-flight count confirm the queue"
        )
        severities.append(0.45)
    kv = e.get("over_kv_cache_usage_max")
    if kv is not None and kv < 0.6:
        evidence.append(f"KV cache at most {kv:.0%} used: memory left for a larger batch")
    ttft = e.get("over_ttft_p95_ms")
    if ttft is not None:
        evidence.append(
            f"TTFT p95 {ttft:.0f} ms at the overloaded step (ITL p95 {format_stat(e.get('over_itl_p95_ms'), 0)} ms)"
        )
    return Bottleneck(name="batch_limit", severity=round(max(severities), 3), evidence=evidence)


def prefix_cache_unused(r: dict, e: dict, args: dict, vocab: Vocabulary) -> Bottleneck | None:
    reuse = r.get("prefix_reuse", 0.0)
    if reuse < 0.2:
        return None
    off_flag = vocab.prefix_cache_off_flag
    disabled = (off_flag in args) if off_flag else (vocab.prefix_cache is None or not vocab.prefix_cache_on(args))
    if vocab.prefix_cache is None:
        off_flag = "the engine has no prefix cache"
    hit = e.get("prefix_cache_hit_rate")
    how = "simulated per KV block" if r.get("prefix_reuse_method", 0) > 0 else "estimated from prompt text"
    evidence = [
        f"{reuse:.0%} of prompt tokens repeat an earlier prompt's prefix ({how}); "
        f"{r.get('shared_prefix_request_fraction', 0):.0%} of requests share a prefix group"
    ]
    if disabled:
        evidence.append(f"prefix caching is off ({off_flag})")
    if hit is not None:
        evidence.append(
            f"engine prefix-cache hit rate {hit:.0%} over {e.get('prefix_cache_queries_delta', 0):.0f} queried tokens"
        )
    if not disabled and (hit is None or hit >= 0.6 * reuse):
        return None
    gap = reuse - (hit or 0.0)
    severity = min(0.85, 0.2 + 0.7 * gap)
    if vocab.prefix_cache is None:  # no setting of this engine can fix it: below what one can
        evidence.append("no setting of this engine enables a prefix cache (another engine would)")
        severity = min(severity, 0.25)
    return Bottleneck(name="prefix_cache_unused", severity=round(severity, 3), evidence=evidence)


def kv_cache_pressure(e: dict) -> Bottleneck | None:
    kv = e.get("over_kv_cache_usage_max")
    preemptions = e.get("preemptions_delta", 0.0)
    if (kv is None or kv < 0.9) and preemptions <= 0:
        return None
    evidence = []
    if kv is not None:
        evidence.append(f"KV cache usage reaches {kv:.0%} at {format_stat(e.get('over_rate'))} req/s")
    if preemptions > 0:
        evidence.append(f"{preemptions:.0f} preemptions during the sweep (requests evicted and recomputed)")
    severity = min(1.0, 0.3 + (0.4 if preemptions > 0 else 0.0) + max(0.0, (kv or 0) - 0.9) * 3)
    return Bottleneck(name="kv_cache_pressure", severity=round(severity, 3), evidence=evidence)


def speculation_waste(e: dict, args: dict, vocab: Vocabulary) -> Bottleneck | None:
    rate = e.get("spec_decode_acceptance_rate")
    if rate is None or vocab.speculation_flag not in args or rate >= 0.3:
        return None
    return Bottleneck(
        name="speculation_waste",
        severity=round(0.6 - rate, 3),
        evidence=[f"only {rate:.0%} of {e.get('spec_decode_draft_tokens_delta', 0):.0f} draft tokens accepted"],
    )
