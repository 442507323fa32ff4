"""``diagnose``: one endpoint's diagnosis, from the traffic and engine statistics and every rule, as the
``Diagnosis`` record the proposers read (bottlenecks worst first, traits, notes on what was missing).

Apart from the statistics and the rules because it is the one place that runs them all, merges what two
kinds of evidence say of one bottleneck, and knows which evidence was absent (no engine metrics, no
profile, no roofline) and says so in the diagnosis.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from specs.engine_args import parse_args
from engines.base import Vocabulary
from engines.registry import ADAPTERS
from loadgen.results import SweepResult
from research.diagnosis.scheduler_rules import batch_limit, kv_cache_pressure, prefix_cache_unused, speculation_waste
from research.diagnosis.time_rules import decode_bound, prefill_rules, profile_rules, roofline_overhead
from research.diagnosis.sweep_stats import engine_stats
from research.diagnosis.traffic import request_stats
from research import internals_evidence
from research.proposals import Bottleneck, Diagnosis, ProfileBreakdown, WorkloadResult
from research.roofline import Roofline


def find_bottlenecks(
    r: dict,
    e: dict,
    args: dict,
    vocab: Vocabulary,
    *,
    profile: ProfileBreakdown | None,
    workloads: Sequence[WorkloadResult],
    roofline: Roofline | None,
) -> list[Bottleneck]:
    """Every rule over the traffic (``r``) and engine (``e``) statistics, worst bottleneck first.

    A profile and the roofline that name the same bottleneck give one, with both kinds of evidence. The
    roofline rule records its bound and ratio in ``e`` (``roofline_decode_ms``, ``roofline_ratio``)."""
    found = [
        b
        for b in (
            batch_limit(e, args, vocab),
            prefix_cache_unused(r, e, args, vocab),
            kv_cache_pressure(e),
            decode_bound(e, r),
            speculation_waste(e, args, vocab),
        )
        if b is not None
    ]
    found += prefill_rules(e, r, profile, workloads)
    found += profile_rules(profile)
    overhead = roofline_overhead(e, roofline)
    return _merged(found, [overhead] if overhead is not None else [])


def _merged(found: list[Bottleneck], more: list[Bottleneck]) -> list[Bottleneck]:
    """``found`` plus ``more``, one bottleneck per name (the worse severity, both kinds of evidence), worst first."""
    by_name = {b.name: b for b in found}
    for b in more:
        same = by_name.get(b.name)
        by_name[b.name] = (
            b
            if same is None
            else same.model_copy(
                update={"severity": max(same.severity, b.severity), "evidence": same.evidence + b.evidence}
            )
        )
    return sorted(by_name.values(), key=lambda b: -b.severity)


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
    sustained_failure: str | None = None,
    engine_version: str | None = None,
) -> Diagnosis:
    """Name the suspected bottlenecks of one endpoint, worst first, with their evidence.

    What the engine cannot give (metrics, a profile) is replaced by what every engine gives:
    client-side latencies against load and, with ``roofline``, the low-load decode step against
    the bandwidth bound. ``sustained_failure``: why the configuration's soak found it unstable (an OOM
    there is a memory-headroom bottleneck however short steps looked)."""
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
    found = find_bottlenecks(r, e, args, vocab, profile=profile, workloads=workloads, roofline=roofline)
    internals = internals_evidence.latest(sweeps)
    if internals is not None:  # the adapter's evidence overlay: capture stalls, padding, memory
        found = _merged(found, internals_evidence.bottlenecks(internals))
    elif cls is not None and cls.evidence_overlay:
        notes.append("the engine's evidence overlay wrote nothing: its internals are unmeasured")
    oom = internals_evidence.oom_bottleneck(sustained_failure)  # the configuration's own soak died of OOM
    if oom is not None:
        found = _merged(found, [oom])
    if roofline is None:
        notes.append("no roofline: model weight size or memory bandwidth unknown")
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
        engine_version=engine_version,
        bottlenecks=found,
        traits=traits,
        request_stats=r,
        engine_stats=e,
        profile=profile,
        workloads=list(workloads),
        notes=notes,
    )
