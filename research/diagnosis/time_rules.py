"""The diagnosis rules that read where a step's time goes: prefill interfering with decode or bounding
TTFT, decode bounding ITL, the profile's breakdown by operation, and the low-load decode step against
the memory-bandwidth roofline (far above it is launch or CPU overhead).

Apart from the scheduler rules because their evidence is time (latencies against load, a profile,
diagnostic workloads, the roofline), which every engine gives even without metrics. Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from research.diagnosis.sweep_stats import format_stat
from research.proposals import Bottleneck, ProfileBreakdown, WorkloadResult
from research.roofline import Roofline

#: a decode step this many times slower than the bandwidth bound is overhead, not memory or compute
ROOFLINE_OVERHEAD_RATIO = 5.0


def _workload_ratio(
    workloads: Sequence[WorkloadResult], vary: str, metric: str
) -> tuple[float, WorkloadResult, WorkloadResult] | None:
    rows = sorted((w for w in workloads if w.vary == vary and getattr(w, metric) is not None), key=lambda w: w.value)
    if len(rows) < 2 or not getattr(rows[0], metric):
        return None
    return getattr(rows[-1], metric) / getattr(rows[0], metric), rows[0], rows[-1]


def prefill_rules(
    e: dict, r: dict, profile: ProfileBreakdown | None, workloads: Sequence[WorkloadResult]
) -> list[Bottleneck]:
    """Prefill interfering with decode (``prefill_interference``) and prefill bounding TTFT (``prefill_bound``)."""
    found: list[Bottleneck] = []
    evidence, severity = [], 0.0
    if profile is not None and profile.prefill_interrupts_decode:
        evidence.append(
            f"profile: {profile.mixed_step_fraction:.0%} of engine steps mix prefill into decode; those "
            f"take {format_stat(profile.mixed_step_ms, 0)} ms vs {format_stat(profile.decode_step_ms, 0)} ms "
            "for decode-only steps"
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


def decode_bound(e: dict, r: dict) -> Bottleneck | None:
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


def profile_rules(profile: ProfileBreakdown | None) -> list[Bottleneck]:
    """What the profile's time breakdown names: host-side overhead, communication, matmul, attention, sampling."""
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


def roofline_overhead(e: dict, roofline: Roofline | None) -> Bottleneck | None:
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
        f"time per output token (p50) at the lowest load ({format_stat(rate)} req/s) is {itl:.1f} ms, "
        f"{ratio:.0f}x the roofline ({roofline.describe()})",
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
