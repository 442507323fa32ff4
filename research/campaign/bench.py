"""Measuring one configuration through the harness (research.harness.run_candidate) and booking the
result into the campaign's state: the experiment's verdict and evidence, its cost, its record in memory."""

from __future__ import annotations

import time

from loadgen.results import NoiseFloor, SweepResult
from research.campaign.budget import Budget, Paused
from research.campaign.context import CampaignContext, config_hash
from research.campaign.recording import MemoryRecorder
from research.campaign.steps import CompareFn, NoiseFn
from research.correctness import CorrectnessThresholds
from research.harness import CandidateResult, Progress, SweepFn, run_candidate
from research.state import ExperimentState, ProposalRecord, RoundRecord, experiment_id


class Bench:
    """Runs configurations and books experiments; what the scheduler, the baseline and adoption measure with."""

    def __init__(
        self,
        ctx: CampaignContext,
        budget: Budget,
        recorder: MemoryRecorder,
        *,
        sweep_fn: SweepFn | None,
        compare_fn: CompareFn,
        thresholds: CorrectnessThresholds | None,
    ):
        self.ctx, self.budget, self.recorder = ctx, budget, recorder
        self.sweep_fn, self.compare_fn, self.thresholds = sweep_fn, compare_fn, thresholds

    def active_file(self, label: str):
        """Where the engine of the run ``label`` records itself while it runs (see stop_orphan)."""
        return self.ctx.workdir / f"active_engine.{label}.json"

    def measure(
        self,
        args: list[str],
        repeats: int,
        *,
        noise: NoiseFloor | None,
        lossy: bool = False,
        capture: bool = False,
        check: bool = True,
        progress: Progress | None = None,
    ) -> CandidateResult:
        """Start the engine with ``args``, check (or capture) correctness, run ``repeats`` sweeps, stop it."""
        state, endpoint = self.ctx.state, self.ctx.endpoint
        reference = None
        if check and not capture and state.reference is not None:
            reference = state.reference_outputs.get(config_hash(endpoint, state.reference.engine_args))
        label = (
            "baseline"
            if capture
            else experiment_id("run", state.working.engine_args if state.working else [], args, repeats)
        )
        workdir = self.ctx.workdir / f"{label}-{len(state.experiments)}-{int(time.time())}"
        # one active file per engine: parallel experiments each record their own (see stop_orphan)
        return run_candidate(
            endpoint,
            args,
            self.ctx.pool,
            noise,
            repeats,
            lossy=lossy,
            reference=reference,
            capture=capture,
            thresholds=self.thresholds,
            workdir=workdir,
            active_file=self.active_file(label),
            sweep_fn=self.sweep_fn,
            compare_fn=self.compare_fn,
            progress=progress or self.ctx.progress,
            extra_repeats=self.ctx.campaign.extra_repeats,
            baseline_sustained=_sustained_rate(state.working),
            deadline=self.budget.window_end(),
        )

    def tighten(
        self, args: list[str], sweeps: list[SweepResult], noise_fn: NoiseFn, wall_s: float
    ) -> tuple[list[SweepResult], NoiseFloor, float, list[str]]:
        """The floor of ``sweeps`` (``noise_fn``), then the sequential rule applied to it: while its MDE is over the campaign's
        ``floor_target_mde``, one more sweep of ``args`` on a fresh engine (the candidates run on engines
        of their own, so the floor's spread should hold a launch's too), up to ``floor_max_sweeps`` and as
        the budget allows, and only while one more could bring it under the target (``mde_next_best``: a
        floor whose pairs moved too much for any one sweep to fix gives its time to the experiments). The
        floor's MDE is an input to the verdicts; the campaign's target is their median (``target_mde``). Returns (sweeps, floor, wall seconds, notes for the review)."""
        campaign, notes, noise = self.ctx.campaign, [], noise_fn(sweeps)
        target = campaign.floor_target_mde

        def note(text: str) -> None:
            notes.append(text)
            self.ctx.progress(f"  floor: {text}")

        if target is None:
            return sweeps, noise, wall_s, notes
        sweeps = list(sweeps)
        while noise.mde is not None and noise.mde > target:
            over = f"MDE {noise.mde:.1%} over the {target:.0%} floor target"
            if len(sweeps) >= campaign.floor_max_sweeps:
                note(f"{over} after {len(sweeps)} sweeps (the most)")
                break
            if noise.mde_next_best is not None and noise.mde_next_best > target:
                # futile: even a sweep that moved nothing would leave the floor over its target
                note(
                    f"{over} after {len(sweeps)} sweeps; one more could reach {noise.mde_next_best:.1%} at best "
                    "(a sweep adds a df, and no spread at most): none taken, the time goes to experiments"
                )
                break
            try:
                problem = self.budget.check(self.budget.estimate(1))
            except Paused:
                problem = "this call's time window"
            if problem:
                note(f"{over}; no sweep more fits ({problem})")
                break
            note(f"{over} after {len(sweeps)} sweeps: one more sweep")
            extra = self.measure(args, 1, noise=None, check=False)
            self.budget.charge(extra)
            if extra.verdict == "invalid":
                note(f"the extra sweep was invalid ({extra.invalid_reason}); the floor keeps {len(sweeps)}")
                break
            sweeps += extra.sweeps
            wall_s += extra.wall_s
            noise = noise_fn(sweeps)
            if noise.mde is not None:
                note(f"MDE {noise.mde:.1%} over {len(sweeps)} sweeps")
        return sweeps, noise, wall_s, notes

    def fill(self, record: ExperimentState, result: CandidateResult) -> None:
        """Copy a measurement into its experiment record and charge it to the budget."""
        record.verdict, record.confirmed = result.verdict, result.confirmed
        record.invalid_reason, record.sweeps = result.invalid_reason, result.sweeps
        record.comparison, record.correctness = result.comparison, result.correctness
        record.identity, record.log_tail, record.wall_s = result.identity, result.log_tail, result.wall_s
        record.soak = result.soak
        record.cost_hours = self.budget.cost_hours(result.wall_s)
        record.finished_at = time.time()
        reference = self.ctx.state.reference
        if reference is not None and record.capacity_mean is not None:
            from loadgen.noise import reference_capacity

            ref = reference_capacity(reference.noise)[0]
            record.capacity_ratio_vs_reference = record.capacity_mean / ref if ref > 0 else None
        self.budget.charge(result)

    def finish(
        self, rnd: RoundRecord, record: ExperimentState, proposal: ProposalRecord | None, memory: bool = True
    ) -> None:
        """Book a finished (or rejected, or skipped) experiment into the state and the round, record it
        in memory (``memory``), and save."""
        record.finished_at = record.finished_at or time.time()
        self.ctx.state.experiments[record.experiment_id] = record
        if record.experiment_id not in rnd.experiment_ids:
            rnd.experiment_ids.append(record.experiment_id)
        if record.verdict == "invalid" and record.invalid_reason and not record.invalid_reason.startswith("rejected"):
            self.ctx.question(
                f"{record.title} was invalid ({record.invalid_reason.splitlines()[0][:200]}): "
                f"fix or rule out the cause before trying it again."
            )
        split = split_question(record)
        if split:
            self.ctx.question(split)
        if memory and record.verdict != "skipped":
            self.recorder.experiment(record, proposal)
        self.ctx.save()


def split_question(record: ExperimentState) -> str | None:
    """An open question where the two estimators split (loadgen.judge): the engine served more (or less)
    but the SLA crossing did not follow, which a person, not the harness, resolves."""
    split = record.comparison.disagreement if record.comparison is not None else None
    if not split:
        return None
    return (
        f"{record.title} was judged {record.verdict} by the SLA crossing, yet {split}. Decide whether the SLA "
        f"should move, or try a change aimed at that latency."
    )


def _sustained_rate(working) -> float | None:
    """What the working baseline held in its soak: its rate when stable, 0 when it died or broke there
    (it sustains none of its short-step capacity), None when it had no soak."""
    if working is None or working.soak is None or working.soak.outcome == "unmeasured":
        return None
    return 0.0 if working.soak.outcome == "unstable" else working.soak.sustained_rate
