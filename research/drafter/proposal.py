"""The drafter in the research round (research.drafter): the proposer's drafter rule, a recorded
drafter as a candidate, and the harness's verdict written back to its record."""

from __future__ import annotations

from pathlib import Path

from research.drafter.serving import break_even_acceptance, cannot_serve_drafter, draft_cost_ratio, draft_model_diff

TECHNIQUE = "trained_drafter"  # the technique name of a drafter candidate, in proposals and memory
QUESTION = "Would a draft model trained on {endpoint}'s own traffic pay off?"


def propose_drafter(
    spec, diagnosis, batch, *, n: int, memory=None, campaign_id: str | None = None, skip=(), k: int = 3, layers: int = 4
):
    """The drafter rule (research.rules.drafter_training) in a proposal round; returns the batch updated.

    When the rule says a drafter would pay at this load and memory holds a fresh drafter of the
    endpoint's current model that the harness has not judged yet, that drafter joins the batch as a
    candidate (technique ``trained_drafter``, a lossless engine diff), in place of the last-ranked
    proposal when the batch is full. Otherwise the batch carries the suggestion (what acceptance
    length would pay, the command that trains one), and memory gets it as an open question.
    """
    from research.rules import drafter_training

    why = cannot_serve_drafter(spec.engine.kind)
    if why:
        return batch.model_copy(update={"drafter": None, "drafter_why_not": why})
    ready = usable_drafter(memory, spec) if memory is not None else None
    why_not: list[str] = []
    cost, note = _draft_cost(spec, ready, layers)
    suggestion = drafter_training(
        diagnosis,
        k=ready.num_speculative_tokens if ready else k,
        draft_cost_ratio=cost,
        gpu_count=spec.hardware.gpu_count,
        why_not=why_not,
    )
    if suggestion is None:
        return batch.model_copy(update={"drafter": None, "drafter_why_not": why_not[0] if why_not else None})
    if note:
        suggestion.evidence.append(note)
    proposals = list(batch.proposals)
    if ready is not None and TECHNIQUE not in skip and n > 0:
        # a drafter someone trained for this endpoint comes before the round's last-ranked proposal,
        # which stays untried and can come back next round
        proposals = proposals[: n - 1] + [drafter_proposal(spec, ready, suggestion)]
    elif memory is not None:
        from memory_db.records import OpenQuestion  # only with a memory (a GPU machine runs without DuckDB)

        memory.record_question(
            OpenQuestion(
                endpoint=spec.name,
                campaign_id=campaign_id,
                bottleneck="decode_bound",
                question=QUESTION.format(endpoint=spec.name),
                rationale=f"{suggestion.explanation} Train one with: {suggestion.command}",
            )
        )
    return batch.model_copy(update={"proposals": proposals, "drafter": suggestion, "drafter_why_not": None})


def usable_drafter(memory, spec):
    """The newest fresh drafter of ``spec``'s current model that no harness has judged, if its files exist."""
    from research.drift import model_fingerprint

    model = model_fingerprint(spec)
    for rec in memory.drafters(spec.name):
        if rec.status == "fresh" and rec.verdict is None and rec.model_signature == model and Path(rec.path).exists():
            return rec
    return None


def _draft_cost(spec, ready, layers: int) -> tuple[float, str | None]:
    """A draft step's cost in target steps from the bytes each reads; a stated guess when the target's
    config cannot be read (a remote model)."""
    from specs.models import ModelUnavailable, ensure_model

    try:
        target = ensure_model(spec.model.path)
        return draft_cost_ratio(target, Path(ready.path) if ready else None, draft_layers=layers), None
    except (ModelUnavailable, OSError, KeyError, ValueError) as exc:
        return 0.3, f"draft cost assumed 30% of a target step: the target's config is not readable here ({exc})"


def drafter_proposal(spec, rec, suggestion=None):
    """A recorded drafter as a candidate for the harness (lossless: the engine verifies every drafted
    token). ``suggestion``: the drafter rule's reasoning when it proposed one; without it (a drafter the
    user asked to judge) the break-even comes from the draft's bytes alone."""
    from research.proposals import Intervention, Proposal

    k = rec.num_speculative_tokens
    offline = rec.acceptance_offline.get("acceptance_length") or 1.0
    if suggestion is not None:
        be, why, evidence = suggestion.break_even_acceptance_length, suggestion.explanation, list(suggestion.evidence)
    else:
        be = break_even_acceptance(k, rec.train.get("draft_cost_ratio") or 0.3)
        why, evidence = (
            (
                f"A draft reading {rec.train.get('draft_cost_ratio') or 0.3:.0%} of the target's bytes pays "
                f"off above an acceptance length of {be:.2f} when decode is memory-bound."
            ),
            [],
        )
    diff = draft_model_diff(spec.engine.kind, Path(rec.path), k)
    return Proposal(
        proposal_id=f"rules-drafter-{rec.drafter_id.removeprefix('drafter_')[:12]}",
        question=QUESTION.format(endpoint=spec.name),
        bottleneck="decode_bound",
        explanation=f"{why} Drafter {rec.drafter_id} ({rec.layers} layers, {rec.steps} steps on "
        f"{rec.train_examples} of the endpoint's own replies) reached an offline acceptance length of "
        f"{offline:.2f} (k={k}).",
        observations=evidence,
        intervention=Intervention(technique=TECHNIQUE, engine_arg_diff=diff),
        prediction=f"served acceptance length near the offline {offline:.2f}; capacity "
        + ("up" if offline > be else "not up")
        + f", since the break-even is {be:.2f}",
        predicted_capacity_ratio=round(offline / be, 2) if be else None,
        falsification=f"capacity within the noise floor or below it, or a served acceptance length "
        f"(the engine's speculative-decoding counters) under the break-even {be:.2f}",
        source="rules",
    )


def record_judgement(memory, spec, diff: dict, verdict: str, correctness: str | None, sweeps) -> str | None:
    """Write the harness's verdict on a drafter candidate back to its drafter record, with the
    acceptance vLLM counted over the candidate's sweeps; the drafter's id (None: no record matches)."""
    for rec in memory.drafters(spec.name):
        if draft_model_diff(spec.engine.kind, Path(rec.path), rec.num_speculative_tokens) != diff:
            continue
        drafted = sum(st.engine_metrics.get("spec_decode_draft_tokens_delta", 0.0) for s in sweeps for st in s.steps)
        accepted = sum(
            st.engine_metrics.get("spec_decode_accepted_tokens_delta", 0.0) for s in sweeps for st in s.steps
        )
        served = dict(rec.acceptance_served)
        if drafted:
            rate = accepted / drafted
            served |= {
                "source": "the harness's sweeps (engine /metrics deltas per step)",
                "draft_tokens": drafted,
                "accepted_tokens": accepted,
                "acceptance_rate": round(rate, 4),
                "acceptance_length": round(1.0 + rate * rec.num_speculative_tokens, 3),
            }
        memory.record_drafter(
            rec.model_copy(update={"verdict": verdict, "correctness": correctness, "acceptance_served": served})
        )
        return rec.drafter_id
    return None
