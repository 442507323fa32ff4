"""Ending a round: its confirmed lossless wins, their combination with ablations (the combination minus
each member), the winner by the adoption rule (research.loop.pick_winner), and the winner becoming the
working baseline. Lossy wins, and wins whose outputs were never compared with the reference's, are never
adopted automatically: they become open questions for a person."""

from __future__ import annotations

import time

from specs.engine_args import apply_diff, diff_args
from research.correctness import RANDOM_WEIGHTS_REVIEW
from research.campaign.bench import Bench
from research.campaign.budget import Budget
from research.campaign.context import CampaignContext, ratio
from research.campaign.outcome import judged_gain, total_gain
from research.campaign.recording import MemoryRecorder
from research.campaign.steps import NoiseFn
from research.loop import Contender, pick_winner
from research.state import BaselineRecord, ExperimentState, RoundRecord, experiment_id


def contender(record: ExperimentState) -> Contender:
    """An experiment record as the adoption rule (research.loop.pick_winner) sees it."""
    return Contender(
        id=record.experiment_id,
        confirmed=record.confirmed,
        lossy=record.lossy,
        capacity=record.capacity_mean,
        change_size=len(record.diff),
        checked=outputs_checked(record),
    )


def outputs_checked(record: ExperimentState) -> bool:
    """Whether a correctness check compared the experiment's outputs with the reference's."""
    return record.correctness is not None and record.correctness.checked


class Adoption:
    """Picks a round's winner (after combining the winners) and adopts it as the working baseline."""

    def __init__(self, ctx: CampaignContext, budget: Budget, bench: Bench, recorder: MemoryRecorder, noise_fn: NoiseFn):
        self.ctx, self.budget, self.bench, self.recorder, self.noise_fn = ctx, budget, bench, recorder, noise_fn

    def settle(self, rnd: RoundRecord, working: BaselineRecord, *, measure: bool = True) -> str | None:
        """After the round's proposals ran: combine two or more confirmed lossless wins, raise the lossy
        wins as questions, adopt the winner (or say why none). Returns an end reason or None.

        A win confirmed before the deadline (or budget) ran out is still adopted: ``measure=False`` (the
        round was cut short) and a combination refused by the budget skip what would need another
        engine, and the winner is judged among what was measured."""
        experiments = self.ctx.state.experiments
        winners = [
            experiments[e]
            for e in rnd.experiment_ids
            if experiments[e].confirmed
            and not experiments[e].lossy
            and outputs_checked(experiments[e])
            and experiments[e].kind == "candidate"
        ]
        winners.sort(key=lambda e: -(e.capacity_mean or 0))
        candidates = list(winners)
        end_reason: str | None = None
        if len(winners) >= 2 and measure:
            combo, end_reason = self._combination(rnd, winners[:3], working)
            if combo is not None and combo.confirmed:
                candidates.append(combo)
        for e in (experiments[e] for e in rnd.experiment_ids):
            if e.confirmed and e.lossy:
                review = (
                    f": {RANDOM_WEIGHTS_REVIEW} (check its quality on trained weights of the same family before it "
                    "is used)."
                    if self.ctx.endpoint.model.weights == "random"
                    else "; a person must review its correctness evidence before it is used."
                )
                self.ctx.question(f"Lossy change {e.title} beat the noise floor ({ratio(e)}){review}")
            elif e.confirmed and not outputs_checked(e):
                why = e.correctness.reason if e.correctness is not None else "no correctness check ran"
                self.ctx.question(
                    f"{e.title} beat the noise floor ({ratio(e)}) but its outputs were never compared with the "
                    f"reference's ({why}); it was not adopted: a person must check its outputs before it is used."
                )
        winner = pick_winner(contender(e) for e in candidates)
        if winner is not None:
            end_reason = self.adopt(rnd, experiments[winner.id], measure=measure and end_reason is None) or end_reason
        else:
            verdicts = [experiments[e].verdict for e in rnd.experiment_ids]
            rnd.outcome = (
                "no lossless change with checked outputs beat the noise floor in every repeat (verdicts: "
                + (", ".join(verdicts) or "none")
                + ")"
            )
        return end_reason

    def _combination(
        self, rnd: RoundRecord, winners: list[ExperimentState], working: BaselineRecord
    ) -> tuple[ExperimentState | None, str | None]:
        """Run the winners together, with ablations (the combination minus each member)."""
        base = working.engine_args
        merged: dict[str, str | None] = {}
        members: list[ExperimentState] = []
        for w in winners:
            if any(flag in merged and merged[flag] != value for flag, value in w.diff.items()):
                self.ctx.question(
                    f"{w.title} conflicts with another winning change on the same flag; "
                    f"only the better one was combined."
                )
                continue
            merged.update(w.diff)
            members.append(w)
        if len(members) < 2:
            return None, None
        combo_args = apply_diff(base, merged)
        combo = self._run_extra(
            rnd,
            "combination",
            combo_args,
            [m.experiment_id for m in members],
            " + ".join(m.title for m in members),
            working,
        )
        if isinstance(combo, str):
            return None, combo
        for m in members:  # ablation: the combination without member m
            rest = {f: v for o in members if o is not m for f, v in o.diff.items()}
            ablated_args = apply_diff(base, rest)
            same = next(
                (
                    e
                    for e in self.ctx.state.experiments.values()
                    if e.baseline_args == base and e.engine_args == ablated_args and e.verdict != "skipped"
                ),
                None,
            )
            if same is None:
                ablation = self._run_extra(
                    rnd, "ablation", ablated_args, [m.experiment_id], f"combination without {m.title}", working
                )
                if isinstance(ablation, str):
                    return combo, ablation
                same = ablation
            combo.notes.append(
                f"ablation without {m.title}: experiment {same.experiment_id}, "
                f"capacity {same.capacity_mean} req/s, verdict {same.verdict}"
            )
        combo.notes.append(
            f"control: the working baseline's {len(working.sweeps)} sweeps "
            f"(capacity {working.capacity:.3g} req/s, spread {working.noise.capacity_rel_spread:.1%})"
        )
        best_single = max(m.capacity_mean or 0 for m in members)
        if combo.capacity_mean is not None and combo.capacity_mean <= best_single:
            self.ctx.question(
                f"Combining {' + '.join(m.title for m in members)} gave {combo.capacity_mean:.3g} req/s, "
                f"not more than the best single change ({best_single:.3g}): do they compete for one resource?"
            )
        self.ctx.save()
        return combo, None

    def _run_extra(
        self, rnd: RoundRecord, kind: str, args: list[str], members: list[str], title: str, working: BaselineRecord
    ) -> ExperimentState | str:
        """Measure a combination or an ablation (once: a resumed campaign finds it in the state)."""
        state, repeats = self.ctx.state, self.ctx.repeats
        base = working.engine_args
        eid = experiment_id(kind, base, args, repeats)
        if eid in state.experiments:
            return state.experiments[eid]
        problem = self.budget.check(self.budget.estimate(repeats))
        if problem:
            return problem
        lossy = any(state.experiments[m].lossy for m in members if m in state.experiments)
        self.ctx.progress(f"{kind} {eid}: {title}")
        record = ExperimentState(
            experiment_id=eid,
            round=rnd.round,
            kind=kind,
            proposal_ids=members,
            title=title,
            baseline_args=list(base),
            engine_args=list(args),
            diff=diff_args(base, args),
            lossy=lossy,
            verdict="skipped",
            started_at=time.time(),
        )
        self.bench.fill(record, self.bench.measure(args, repeats, noise=working.noise, lossy=lossy))
        self.bench.finish(rnd, record, None)
        return record

    def adopt(self, rnd: RoundRecord, best: ExperimentState, *, measure: bool = True) -> str | None:
        """``best`` becomes the working baseline; its noise floor comes from its own sweeps (plus more
        if needed). When no more can be measured (``measure=False``, or the budget refuses them) it is
        adopted on its own sweeps, the campaign ends with the budget's reason, and the floor says so."""
        state = self.ctx.state
        sweeps = list(best.sweeps)
        wall = best.wall_s
        more = max(0, self.ctx.baseline_repeats - len(sweeps))
        problem: str | None = None
        if more:
            problem = self.budget.check(self.budget.estimate(more)) if measure else "the round was cut short"
        if problem:
            best.notes.append(
                f"adopted on its own {len(sweeps)} sweep(s): no further baseline sweep fits ({problem}); "
                f"the campaign ends here, so no verdict is judged against this floor"
            )
        elif more:
            self.ctx.progress(f"re-measuring the new baseline: {more} more sweep(s)")
            extra = self.bench.measure(best.engine_args, more, noise=None, check=False)
            self.budget.charge(extra)
            if extra.verdict == "invalid":
                self.ctx.question(
                    f"{best.title} won its repeats but failed its extra baseline sweeps "
                    f"({extra.invalid_reason}); not adopted."
                )
                return None
            sweeps += extra.sweeps
            wall += extra.wall_s
        if problem:  # nothing more is measured: the floor of what there is
            noise, notes = self.noise_fn(sweeps), []
        else:
            sweeps, noise, wall, notes = self.bench.tighten(best.engine_args, sweeps, self.noise_fn, wall)
        record = BaselineRecord(
            engine_args=list(best.engine_args),
            sweeps=sweeps,
            noise=noise,
            source_experiment=best.experiment_id,
            identity=best.identity,
            wall_s=wall,
            soak=best.soak,
            notes=notes,
        )
        state.working = record
        state.baselines.append(record)
        self.recorder.floor(record)
        rnd.adopted = best.experiment_id
        gain, bound = total_gain(state.reference, record)
        judged = judged_gain(state)
        self.ctx.progress(
            f"adopted {best.title}: capacity {record.capacity:.3g} req/s "
            + (f"(vs the campaign's reference: {judged.describe()})" if judged else "")
            + (f" (capacity ratio x{'>=' if bound else ''}{gain:.2f})" if gain else "")
        )
        self.recorder.confirmation(best)
        return problem if measure else None
