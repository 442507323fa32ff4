"""Diagnosis of one endpoint: what limits its capacity, with the numbers that say so.

Pure functions over plain inputs (a replay pool DataFrame, the baseline's SweepResults, the
engine arguments, an optional parsed profile and diagnostic-workload results), so every rule is
unit-testable with constructed data. Each rule names a bottleneck from
``research.proposals.BOTTLENECKS`` with a severity in 0..1 and the evidence behind it, in
words a person can check against the load curve and the engine's /metrics.

Engine-metric names are those loadgen writes into ``StepResult.engine_metrics``:
``requests_running_mean/_max``, ``requests_waiting_mean/_max``, ``kv_cache_usage_mean/_max``,
``preemptions_delta``, ``prefix_cache_queries_delta``, ``prefix_cache_hits_delta``,
``prefix_cache_hit_rate``, ``spec_decode_acceptance_rate``, ``prompt_tokens_delta``,
``generation_tokens_delta``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np
import polars as pl

from specs.engine_args import parse_args
from engines.base import Vocabulary
from engines.registry import ADAPTERS
from loadgen.results import StepResult, SweepResult
from research.proposals import Bottleneck, Diagnosis, ProfileBreakdown, WorkloadResult
from research.roofline import Roofline

#: a decode step this many times slower than the bandwidth bound is overhead, not memory or compute
ROOFLINE_OVERHEAD_RATIO = 5.0
SAMPLE_ROWS = 5000  # pool rows read for body statistics (enough for stable fractions)
TOKENIZED_ROWS = 1000  # rows tokenized for the exact prefix-reuse simulation (tokenizing is slow)


# ---------------------------------------------------------------- request-log statistics


def _prompt_text(body: dict) -> str:
    """The prompt as the model sees it, roughly: tools, then every message's text, in order."""
    parts = [json.dumps(body.get("tools"), sort_keys=True)] if body.get("tools") else []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<{message.get('role')}>{content or ''}")
        if message.get("tool_calls"):
            parts.append(json.dumps(message["tool_calls"], sort_keys=True))
    return "\n".join(parts)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on equal prefixes (fast for long shared system prompts)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def estimate_prefix_reuse(texts: Sequence[str], groups: Sequence[str], lookback: int = 32) -> float:
    """Share of prompt characters an ideal prefix cache would serve: each prompt's longest
    common prefix with a recent earlier prompt of the same prefix group, over all characters."""
    recent: dict[str, list[str]] = defaultdict(list)
    reused = total = 0
    for text, group in zip(texts, groups):
        previous = recent[group]
        best = max((_common_prefix(text, p) for p in previous), default=0)
        reused += best
        total += len(text)
        previous.append(text)
        if len(previous) > lookback:
            previous.pop(0)
    return reused / total if total else 0.0


def request_stats(pool: pl.DataFrame, tokenizer=None, block_size: int = 16) -> dict[str, float]:
    """Prompt/output lengths, shared prefixes, tool use and structured outputs of a replay pool.

    ``tokenizer`` (a ``replay.tokenize.ChatTokenizer``) makes ``prefix_reuse`` an exact
    block-level simulation (``block_size`` = the engine's KV block); without it the reuse is
    estimated from the prompt text.
    """
    if pool.height == 0:
        raise ValueError("the replay pool is empty: nothing to diagnose")
    pool = pool.sort("arrival_offset_s")
    prompt = pool["prompt_tokens"].cast(pl.Float64).to_numpy()
    output = pool["expected_output_tokens"].cast(pl.Float64).to_numpy()
    sample = pool.head(SAMPLE_ROWS)
    bodies = [json.loads(b) for b in sample["body"].to_list()]
    stats: dict[str, float] = {
        "requests": float(pool.height),
        "prompt_tokens_mean": float(prompt.mean()),
        "prompt_tokens_p50": float(np.percentile(prompt, 50)),
        "prompt_tokens_p95": float(np.percentile(prompt, 95)),
        "prompt_tokens_max": float(prompt.max()),
        "output_tokens_mean": float(output.mean()),
        "output_tokens_p50": float(np.percentile(output, 50)),
        "output_tokens_p95": float(np.percentile(output, 95)),
        "decode_share": float(output.sum() / max(output.sum() + prompt.sum(), 1.0)),
        "long_prompt_fraction": float((prompt > 4 * max(np.median(prompt), 1.0)).mean()),
        "tool_use_fraction": float(np.mean([bool(b.get("tools")) for b in bodies])),
        "tool_result_fraction": float(
            np.mean([any(m.get("role") == "tool" for m in b.get("messages") or []) for b in bodies])
        ),
        "structured_output_fraction": float(
            np.mean([(b.get("response_format") or {}).get("type") in ("json_schema", "json_object") for b in bodies])
        ),
        "multi_turn_fraction": float(
            np.mean([sum(m.get("role") == "assistant" for m in b.get("messages") or []) > 0 for b in bodies])
        ),
        "prefix_groups": float(pool["prefix_group"].n_unique()),
    }
    groups = sample["prefix_group"].fill_null("none").to_list()
    stats["shared_prefix_request_fraction"] = float(
        sample.group_by("prefix_group").len().filter(pl.col("len") > 1)["len"].sum() / sample.height
    )
    if tokenizer is not None:
        from replay.prefix import cached_fraction

        ids = tokenizer.encode_bodies(bodies[:TOKENIZED_ROWS])
        stats["prefix_reuse"] = float(cached_fraction(ids, block_size))
        stats["prefix_reuse_method"] = float(block_size)  # >0: simulated with this block size
    else:
        stats["prefix_reuse"] = float(estimate_prefix_reuse([_prompt_text(b) for b in bodies], groups))
        stats["prefix_reuse_method"] = 0.0  # 0: estimated from text
    logged = pool["logged_cached_tokens"].drop_nulls()
    if logged.len() > 0:
        matching = pool.filter(pl.col("logged_cached_tokens").is_not_null())
        stats["logged_cached_fraction"] = float(logged.sum() / max(matching["prompt_tokens"].sum(), 1))
    arrivals = pool["arrival_offset_s"].to_numpy()
    if len(arrivals) > 2 and arrivals[-1] > arrivals[0]:
        gaps = np.diff(arrivals)
        stats["arrival_rate"] = float((len(arrivals) - 1) / (arrivals[-1] - arrivals[0]))
        stats["interarrival_cv"] = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 0.0
    return stats


# ---------------------------------------------------------------- engine statistics over sweeps


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


# ---------------------------------------------------------------- rules


def _flag_int(args: dict[str, str | None], flag: str | None) -> int | None:
    try:
        return int(args[flag]) if flag and args.get(flag) is not None else None
    except ValueError:
        return None


def _f(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _batch_limit(e: dict, args: dict, vocab: Vocabulary) -> Bottleneck | None:
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
                f"at {_f(e.get('over_rate'))} req/s the queue builds: {_f(waiting, 1)} requests waiting on "
                f"average (max {_f(e.get('over_requests_waiting_max'), 0)}) while {_f(running, 1)} run "
                f"(max {_f(running_max, 0)})"
            )
            if limit is not None:
                evidence.append(f"running requests sit at the limit {limit_flag} {limit}")
            severities.append(min(1.0, 0.4 + 0.6 * waiting / (waiting + running)))
    # Client side: more requests in flight than the limit lets run, and TTFT (queueing) breaks the SLA.
    if limit is not None and in_flight is not None and ttft_breaks and in_flight >= 1.2 * limit:
        evidence.append(
            f"TTFT breaks the SLA while {in_flight:.1f} requests are in flight on average at "
            f"{_f(e.get('over_rate'))} req/s (rate x mean end-to-end latency) against a limit of "
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
            f"TTFT p95 grows {growth:.1f}x from the lowest load ({_f(e.get('low_rate'))} req/s) to "
            f"{_f(e.get('over_rate'))} req/s while ITL p95 stays flat ({_f(itl_low, 0)} -> "
            f"{_f(itl_over, 0)} ms): requests wait before they start, behind {limit_flag} {limit}"
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
        evidence.append(f"TTFT p95 {ttft:.0f} ms at the overloaded step (ITL p95 {_f(e.get('over_itl_p95_ms'), 0)} ms)")
    return Bottleneck(name="batch_limit", severity=round(max(severities), 3), evidence=evidence)


def _prefix_cache(r: dict, e: dict, args: dict, vocab: Vocabulary) -> Bottleneck | None:
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


def _kv_pressure(e: dict) -> Bottleneck | None:
    kv = e.get("over_kv_cache_usage_max")
    preemptions = e.get("preemptions_delta", 0.0)
    if (kv is None or kv < 0.9) and preemptions <= 0:
        return None
    evidence = []
    if kv is not None:
        evidence.append(f"KV cache usage reaches {kv:.0%} at {_f(e.get('over_rate'))} req/s")
    if preemptions > 0:
        evidence.append(f"{preemptions:.0f} preemptions during the sweep (requests evicted and recomputed)")
    severity = min(1.0, 0.3 + (0.4 if preemptions > 0 else 0.0) + max(0.0, (kv or 0) - 0.9) * 3)
    return Bottleneck(name="kv_cache_pressure", severity=round(severity, 3), evidence=evidence)


def _workload_ratio(
    workloads: Sequence[WorkloadResult], vary: str, metric: str
) -> tuple[float, WorkloadResult, WorkloadResult] | None:
    rows = sorted((w for w in workloads if w.vary == vary and getattr(w, metric) is not None), key=lambda w: w.value)
    if len(rows) < 2 or not getattr(rows[0], metric):
        return None
    return getattr(rows[-1], metric) / getattr(rows[0], metric), rows[0], rows[-1]


def _prefill(
    e: dict, r: dict, profile: ProfileBreakdown | None, workloads: Sequence[WorkloadResult]
) -> list[Bottleneck]:
    found: list[Bottleneck] = []
    evidence, severity = [], 0.0
    if profile is not None and profile.prefill_interrupts_decode:
        evidence.append(
            f"profile: {profile.mixed_step_fraction:.0%} of engine steps mix prefill into decode; those "
            f"take {_f(profile.mixed_step_ms, 0)} ms vs {_f(profile.decode_step_ms, 0)} ms for decode-only steps"
        )
        severity = max(
            severity, min(0.8, 0.2 + 0.1 * (profile.mixed_step_ms or 0) / max(profile.decode_step_ms or 1, 1e-9))
        )
    ratio = _workload_ratio(workloads, "long_prompt_interference", "itl_p95_ms")
    if ratio and ratio[0] > 1.3:
        evidence.append(
            f"diagnostic workload: ITL p95 rises {ratio[0]:.1f}x ({ratio[1].itl_p95_ms:.0f} -> "
            f"{ratio[2].itl_p95_ms:.0f} ms) when {ratio[2].value:.0%} of prompts are long"
        )
        severity = max(severity, min(0.9, 0.3 + 0.2 * ratio[0]))
    if e.get("sla_violations_itl") and r.get("long_prompt_fraction", 0) > 0.05:
        evidence.append(f"ITL breaks the SLA and {r['long_prompt_fraction']:.0%} of prompts are long (>4x median)")
        severity = max(severity, 0.4)
    if evidence:
        found.append(Bottleneck(name="prefill_interference", severity=round(severity, 3), evidence=evidence))

    evidence, severity = [], 0.0
    ratio = _workload_ratio(workloads, "prompt_tokens", "ttft_p50_ms")
    if ratio and ratio[0] > 2.0:
        length_ratio = ratio[2].value / max(ratio[1].value, 1.0)
        evidence.append(
            f"diagnostic workload: TTFT p50 grows {ratio[0]:.1f}x for {length_ratio:.0f}x longer prompts "
            f"({ratio[1].value:.0f} -> {ratio[2].value:.0f} tokens)"
        )
        severity = min(0.8, 0.2 * ratio[0] / max(length_ratio, 1.0) + 0.3)
    if (
        r.get("decode_share", 1.0) < 0.1
        and e.get("sla_violations_ttft")
        and (e.get("over_requests_waiting_mean") or 0) < 1
    ):
        evidence.append(f"prompts are {1 - r['decode_share']:.0%} of tokens and TTFT breaks the SLA without a queue")
        severity = max(severity, 0.5)
    if evidence:
        found.append(Bottleneck(name="prefill_bound", severity=round(severity, 3), evidence=evidence))
    return found


def _decode(e: dict, r: dict) -> Bottleneck | None:
    if not e.get("sla_violations_itl") and not e.get("sla_violations_e2e"):
        return None
    ttft, e2e = e.get("at_cap_ttft_p95_ms"), e.get("at_cap_e2e_p95_ms")
    decode_part = 1 - ttft / e2e if ttft and e2e else None
    if decode_part is None or decode_part < 0.6:
        return None
    evidence = [
        f"decode is {decode_part:.0%} of end-to-end latency at capacity; ITL/E2E break the SLA first",
        f"outputs average {r.get('output_tokens_mean', 0):.0f} tokens",
    ]
    if r.get("structured_output_fraction", 0) + r.get("tool_result_fraction", 0) > 0.2:
        evidence.append(
            f"{r.get('structured_output_fraction', 0):.0%} structured outputs and "
            f"{r.get('tool_result_fraction', 0):.0%} tool results: outputs repeat prompt text (n-gram friendly)"
        )
    return Bottleneck(name="decode_bound", severity=round(min(0.8, decode_part * 0.8), 3), evidence=evidence)


def _profile_rules(profile: ProfileBreakdown | None) -> list[Bottleneck]:
    if profile is None:
        return []
    out = []
    where = f"profile ({profile.device}, {profile.window_us / 1e6:.1f} s window)"
    sched = profile.share("cpu_scheduling")
    if sched > 0.15 or profile.idle_gap_fraction > 0.15:
        out.append(
            Bottleneck(
                name="cpu_overhead",
                severity=round(min(0.8, max(sched, profile.idle_gap_fraction) * 1.5), 3),
                evidence=[
                    f"{where}: {sched:.0%} of time is host-side scheduling / input preparation",
                    f"device idle {profile.idle_gap_fraction:.0%} of the window in "
                    f"{profile.idle_gaps} gaps (p95 {profile.idle_gap_p95_us / 1000:.1f} ms)",
                ],
            )
        )
    for name, category, threshold in (
        ("communication", "communication", 0.1),
        ("matmul_bound", "matmul", 0.5),
        ("attention_bound", "attention", 0.35),
        ("sampling_overhead", "sampling", 0.12),
    ):
        share = profile.share(category)
        if share > threshold:
            top = [op for op, cat, _ in profile.top_ops if cat == category][:2]
            out.append(
                Bottleneck(
                    name=name,
                    severity=round(min(0.7, share * 0.8), 3),
                    evidence=[
                        f"{where}: {category} takes {share:.0%} of categorised time"
                        + (f" (top: {', '.join(top)})" if top else "")
                    ],
                )
            )
    return out


def _roofline(e: dict, roofline: Roofline | None) -> Bottleneck | None:
    """Decode at the lowest load against the bandwidth bound: far above it = launch or CPU overhead."""
    # time per output token, robust to streams that coalesce tokens (ITL gaps of 0); ITL where absent
    itl, rate = e.get("low_tpot_p50_ms") or e.get("low_itl_p50_ms"), e.get("low_rate")
    if roofline is None or not itl:
        return None
    bound = roofline.decode_step_ms
    ratio = itl / bound
    e["roofline_decode_ms"], e["roofline_ratio"] = bound, ratio
    if ratio < ROOFLINE_OVERHEAD_RATIO:
        return None
    evidence = [
        f"time per output token (p50) at the lowest load ({_f(rate)} req/s) is {itl:.1f} ms, {ratio:.0f}x the roofline "
        f"({roofline.describe()})",
        "a decode step this far above the bandwidth bound at a small batch is launch or CPU overhead"
        if ratio >= 20
        else "the decode step is well above the bandwidth bound at a small batch",
    ]
    util = e.get("low_gpu_util_mean")
    if util is not None:
        evidence.append(f"NVML: the GPU is busy {util:.0f}% of the time at that load")
    severity = min(0.95, 0.35 + 0.15 * np.log2(ratio / ROOFLINE_OVERHEAD_RATIO))
    if util is not None and util >= 80:  # busy device: the gap is kernels, not idle time
        severity *= 0.5
    if not (e.get("sla_violations_itl") or e.get("sla_violations_e2e")):
        # a slow decode step that no SLA target feels does not limit capacity: queueing or prefill does
        evidence.append("ITL and E2E stay within the SLA: the overhead is real but not what limits capacity here")
        severity = min(severity, 0.3)
    return Bottleneck(name="cpu_overhead", severity=round(float(severity), 3), evidence=evidence)


def _speculation(e: dict, args: dict, vocab: Vocabulary) -> Bottleneck | None:
    rate = e.get("spec_decode_acceptance_rate")
    if rate is None or vocab.speculation_flag not in args or rate >= 0.3:
        return None
    return Bottleneck(
        name="speculation_waste",
        severity=round(0.6 - rate, 3),
        evidence=[f"only {rate:.0%} of {e.get('spec_decode_draft_tokens_delta', 0):.0f} draft tokens accepted"],
    )


def diagnose(
    pool: pl.DataFrame,
    sweeps: Sequence[SweepResult],
    engine_args: list[str],
    *,
    endpoint: str | None = None,
    engine_kind: str,
    profile: ProfileBreakdown | None = None,
    workloads: Sequence[WorkloadResult] = (),
    tokenizer=None,
    block_size: int = 16,
    roofline: Roofline | None = None,
) -> Diagnosis:
    """Name the suspected bottlenecks of one endpoint, worst first, with their evidence.

    What the engine cannot give (metrics, a profile) is replaced by what every engine gives:
    client-side latencies against load and, with ``roofline``, the low-load decode step against
    the bandwidth bound."""
    args = parse_args(list(engine_args))
    cls = ADAPTERS.get(engine_kind)
    vocab = cls.vocabulary if cls is not None else Vocabulary()
    r = request_stats(pool, tokenizer=tokenizer, block_size=block_size)
    e = engine_stats(sweeps)
    notes = []
    if not any(k.endswith("requests_running_mean") for k in e):
        notes.append("no engine queue metrics in the sweeps: queueing rules used latency only")
    if profile is None:
        notes.append("no profile: time breakdown by operation not available")
    found = [
        b
        for b in (
            _batch_limit(e, args, vocab),
            _prefix_cache(r, e, args, vocab),
            _kv_pressure(e),
            _decode(e, r),
            _speculation(e, args, vocab),
        )
        if b is not None
    ]
    found += _prefill(e, r, profile, workloads)
    profiled = _profile_rules(profile)
    found += profiled
    overhead = _roofline(e, roofline)
    if roofline is None:
        notes.append("no roofline: model weight size or memory bandwidth unknown")
    if overhead is not None:
        same = next((b for b in found if b.name == overhead.name), None)
        if same is None:
            found.append(overhead)
        else:  # profile and roofline agree: one bottleneck with both kinds of evidence
            found[found.index(same)] = same.model_copy(
                update={
                    "severity": max(same.severity, overhead.severity),
                    "evidence": same.evidence + overhead.evidence,
                }
            )
    found.sort(key=lambda b: -b.severity)
    traits = {
        k: r[k]
        for k in (
            "prompt_tokens_mean",
            "output_tokens_mean",
            "decode_share",
            "prefix_reuse",
            "tool_use_fraction",
            "structured_output_fraction",
            "multi_turn_fraction",
            "long_prompt_fraction",
            "arrival_rate",
            "interarrival_cv",
        )
        if k in r
    }
    if "capacity_rps" in e:
        traits["capacity_rps"] = e["capacity_rps"]
    return Diagnosis(
        endpoint=endpoint or (sweeps[0].endpoint if sweeps else "unknown"),
        engine_kind=engine_kind,
        engine_args=list(engine_args),
        bottlenecks=found,
        traits=traits,
        request_stats=r,
        engine_stats=e,
        profile=profile,
        workloads=list(workloads),
        notes=notes,
    )
