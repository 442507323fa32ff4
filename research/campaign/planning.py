"""Planning a round: diagnose the working baseline (once per baseline), ask the proposer, drop what was
tried already, fall back to the previous round's alternatives, and order proposals by what the
harness can see (the minimum detectable effect)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from specs.engine_args import apply_diff
from research.campaign.context import CampaignContext
from research.campaign.steps import DiagnoseFn, ProposeFn, proposal_record
from research.state import BaselineRecord, ProposalRecord, RoundRecord


def below_mde(proposals: list, working: BaselineRecord, subagents: int, question: Callable[[str], None]) -> list:
    """Order proposals so that those the harness can see run first: a proposal predicted to gain less
    than the floor's minimum detectable effect (the best case of a verdict on it: research.verdict_mde)
    goes after them, and when the round has no slot left for it (``subagents``) it waits, as an open question with the reason (a `same` for it would
    say nothing). A slot the visible proposals leave free still runs it: a prediction is a guess (prefix
    caching was predicted +46% on the CPU default and measured x4), and the verdict's interval says how
    little it could see."""
    mde = working.noise.mde
    if mde is None:
        return proposals
    visible = [p for p in proposals if p.predicted_capacity_ratio is None or p.predicted_capacity_ratio - 1 >= mde]
    below = sorted((p for p in proposals if p not in visible), key=lambda p: -(p.predicted_capacity_ratio or 0))
    slots = max(0, subagents - len(visible))
    for p in below[slots:]:
        question(
            f"{p.title} is predicted to gain {p.predicted_capacity_ratio - 1:+.1%}, below the "
            f"working floor's minimum detectable effect {mde:.1%} (the best a verdict on it can see): queued "
            "until the harness can see it (more repeats, longer steps, a quieter host)"
        )
    return visible + below[:slots]


class Planner:
    """Opens the campaign's rounds: the diagnosis and the proposals each round runs."""

    def __init__(self, ctx: CampaignContext, diagnose_fn: DiagnoseFn, propose_fn: ProposeFn):
        self.ctx, self.diagnose_fn, self.propose_fn = ctx, diagnose_fn, propose_fn

    def current_round(self) -> RoundRecord | str:
        """The unfinished round, or a new one (diagnosis + proposals); a string = why the campaign ends."""
        ctx, campaign = self.ctx, self.ctx.campaign
        rounds = ctx.state.rounds
        if rounds and not rounds[-1].finished:
            return rounds[-1]
        if len(rounds) >= campaign.max_rounds:
            return f"max rounds: {campaign.max_rounds} rounds done"
        working = ctx.state.working
        previous = rounds[-1] if rounds else None
        tried = sorted(
            {
                json.dumps(e.diff, sort_keys=True)
                for e in ctx.state.experiments.values()
                if e.baseline_args == working.engine_args
            }
            | {
                json.dumps(p.engine_arg_diff, sort_keys=True)
                for r in rounds
                if r.baseline_args == working.engine_args
                for p in r.proposals
            }
        )
        diagnosis_s = 0.0
        if previous is not None and previous.baseline_args == working.engine_args:
            diagnosis = previous.diagnosis  # same baseline: the diagnosis stands
        else:
            ctx.progress(f"round {len(rounds) + 1}: diagnosing {' '.join(working.engine_args)}")
            began = time.monotonic()
            diagnosis = self.diagnose_fn(ctx.endpoint, working, ctx.pool, ctx.state)
            diagnosis_s = time.monotonic() - began
            for b in diagnosis.get("bottlenecks", [])[:4]:
                ctx.progress(f"  bottleneck {b.get('name')} (severity {b.get('severity', 0):.2f})")
            ctx.progress(f"  diagnosed in {diagnosis_s:.0f} s")
        offered = self.propose_fn(ctx.endpoint, diagnosis, ctx.state, campaign.subagents, tried)
        proposals = [p for p in offered if not self._already_tried(p, working.engine_args)]
        if not proposals and previous is not None and previous.baseline_args == working.engine_args:
            proposals = [p for p in self._alternatives(previous) if not self._already_tried(p, working.engine_args)]
        proposals = below_mde(proposals, working, campaign.subagents, ctx.question)
        record = RoundRecord(
            round=len(rounds) + 1,
            baseline_args=list(working.engine_args),
            diagnosis=diagnosis,
            proposals=proposals[: campaign.subagents],
            diagnosis_s=round(diagnosis_s, 1),
        )
        if not proposals:  # the round is kept: the review shows what was diagnosed and why nothing ran
            named = ", ".join(b.get("name", "?") for b in diagnosis.get("bottlenecks", [])) or "no bottleneck"
            record.finished = True
            record.outcome = f"no experiment to run: diagnosed {named}; " + (
                f"all {len(offered)} proposal(s) for this baseline were tried already"
                if offered
                else f"no technique of the {ctx.endpoint.engine.kind} engine addresses it (or every one was tried)"
            )
            rounds.append(record)
            ctx.save()
            ctx.progress(f"  {record.outcome}")
            return "no supported experiment remains: " + record.outcome
        rounds.append(record)
        ctx.save()
        for p in record.proposals:
            ctx.progress(f"  proposal {p.proposal_id}: {p.title}" + (" [lossy]" if p.lossy else ""))
        return record

    def _alternatives(self, previous: RoundRecord) -> list[ProposalRecord]:
        from research.proposals import Proposal

        out = []
        for p in previous.proposals:
            try:
                proposal = Proposal.model_validate(p.raw)
            except Exception:  # noqa: BLE001 - a record without a full proposal has no alternatives
                continue
            for i, alt in enumerate(proposal.alternatives):
                out.append(
                    proposal_record(
                        proposal.model_copy(
                            update={
                                "proposal_id": f"{proposal.proposal_id}-alt{i + 1}",
                                "intervention": alt,
                                "alternatives": [],
                            }
                        )
                    )
                )
        return out

    def _already_tried(self, proposal: ProposalRecord, base: list[str]) -> bool:
        after = apply_diff(base, proposal.engine_arg_diff)
        if proposal.engine_patch:  # a patch is a change even with no flag: named by its overlay
            from engines.authored import named_args

            after = named_args(self.ctx.endpoint, after, proposal.engine_patch)
        return after == base or any(
            e.baseline_args == base and e.engine_args == after for e in self.ctx.state.experiments.values()
        )
