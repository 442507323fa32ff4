"""The rule-based proposer's driver: from a diagnosis, one proposal per question, worst bottleneck first,
each the first applicable, valid, untried technique of the playbook with the rest as its alternatives.

Used when no LLM is configured (and as the fallback when an LLM's answers are unusable), so the research
loop runs anywhere; it returns the same ``Proposal`` objects as the LLM subagents.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

from research.interventions import validate_intervention
from research.proposals import BOTTLENECKS, Bottleneck, Diagnosis, Intervention, Proposal, ResearchQuestion
from research.rules.context import Context, context_for
from research.rules.internal import internal_interventions, recipe_interventions, setting_for
from research.rules.playbook import PLAYBOOK, expectation


def _signature(intervention: Intervention) -> str:
    return json.dumps(intervention.engine_arg_diff, sort_keys=True)


def interventions_for(bottleneck: str, ctx: Context, skip: set[str] = frozenset()) -> list[Intervention]:
    """Applicable, valid interventions for one bottleneck, best first, minus ``skip`` (techniques
    or diff signatures already tried)."""
    out: list[Intervention] = []
    seen: set[str] = set()
    candidates = [technique(ctx) for technique in PLAYBOOK.get(bottleneck, [])]
    # the adapter's own settings, then its fixes for bugs of this version, last
    for intervention in candidates + internal_interventions(bottleneck, ctx) + recipe_interventions(bottleneck, ctx):
        if intervention is None:
            continue
        sig = _signature(intervention)
        if sig in seen or sig in skip or intervention.technique in skip:
            continue
        check = validate_intervention(intervention, ctx.diagnosis.engine_args, ctx.kind, gpu_count=ctx.gpu_count)
        if not check.ok:
            continue
        seen.add(sig)
        out.append(intervention.model_copy(update={"lossy": check.lossy}))
    return out


def questions_for(diagnosis: Diagnosis, n: int) -> list[ResearchQuestion]:
    """One research question per suspected bottleneck, worst first (the orchestrator's fallback)."""
    out = []
    for i, b in enumerate(diagnosis.bottlenecks[:n]):
        out.append(
            ResearchQuestion(
                question_id=f"q{i + 1}-{b.name}",
                bottleneck=b.name,
                question=f"Is {diagnosis.endpoint} limited by {b.name.replace('_', ' ')} "
                f"({BOTTLENECKS[b.name]}), and which single change lifts its capacity the most?",
            )
        )
    return out


def propose(
    diagnosis: Diagnosis,
    n: int = 3,
    *,
    gpu_count: int = 0,
    skip: Iterable[str] = (),
    questions: list[ResearchQuestion] | None = None,
) -> list[Proposal]:
    """Up to ``n`` proposals, one distinct change each, for the worst bottlenecks first.

    ``skip``: techniques or diff signatures already tried (from memory or earlier rounds);
    ``gpu_count`` bounds parallelism changes (0 = CPU host).
    """
    ctx = context_for(diagnosis, gpu_count)
    skip_set = set(skip)
    by_name = {b.name: b for b in diagnosis.bottlenecks}
    targets = questions if questions is not None else questions_for(diagnosis, len(diagnosis.bottlenecks))
    proposals: list[Proposal] = []
    used: set[str] = set(skip_set)
    # First pass: one proposal per question; second pass: next-best changes for the same
    # bottlenecks when there are fewer bottlenecks than subagents.
    for _ in range(2):
        for question in targets:
            if len(proposals) >= n:
                return proposals
            bottleneck = by_name.get(question.bottleneck)
            if bottleneck is None:
                continue
            options = interventions_for(bottleneck.name, ctx, used)
            if not options:
                continue
            proposals.append(_proposal(question, bottleneck, options, diagnosis, len(proposals) + 1))
            used.add(_signature(options[0]))
            used.add(options[0].technique)
    return proposals


def _proposal(
    question: ResearchQuestion, b: Bottleneck, options: list[Intervention], diagnosis: Diagnosis, index: int
) -> Proposal:
    main = options[0]
    prediction, falsification, ratio = expectation(main.technique)
    internal = setting_for(diagnosis.engine_kind, main.technique)
    if internal is not None:  # the adapter says what its own setting should do, and what it risks
        prediction = internal.expect + (f" (risk: {internal.risk})" if internal.risk else "")
        falsification, ratio = internal.falsified_by, internal.ratio
    if main.technique == "raise_max_num_seqs":
        stats = diagnosis.engine_stats
        running = stats.get("over_requests_running_mean") or 1.0
        demand = max(
            running + (stats.get("over_requests_waiting_mean") or 0.0), stats.get("over_in_flight_mean") or 0.0
        )
        ratio = round(min(2.5, math.sqrt(demand / max(running, 1e-9))), 2)
    if main.technique == "enable_prefix_caching":
        reuse = diagnosis.request_stats.get("prefix_reuse", 0.0)
        ratio = round(1.0 + 0.5 * reuse, 2)
    explanation = (
        f"{BOTTLENECKS[b.name].capitalize()}. Evidence: "
        + "; ".join(b.evidence)
        + f". {main.describe()} addresses this directly."
    )
    return Proposal(
        proposal_id=f"rules-{index}-{main.technique}",
        question=question.question,
        bottleneck=b.name,
        explanation=explanation,
        observations=list(b.evidence),
        intervention=main,
        alternatives=options[1:],
        prediction=prediction,
        predicted_capacity_ratio=ratio,
        falsification=falsification,
        source="rules",
    )
