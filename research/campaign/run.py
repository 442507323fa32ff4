"""One call of a campaign: load (or start) its state, wire its collaborators, and run its loop
(baseline, then rounds of planning, scheduling and adoption) until it ends or pauses."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TypedDict, Unpack

import polars as pl

from specs.config import CampaignSpec, EndpointSpec
from research.campaign.adoption import Adoption
from research.campaign.bench import Bench
from research.campaign.budget import Budget, Limits, Paused, budget_problem
from research.campaign.context import CampaignContext, config_hash, load_pool
from research.campaign.outcome import (
    CampaignOutcome,
    review_path,
    summarize,
    write_best_config,
    write_outcome,
    write_review,
)
from research.campaign.planning import Planner
from research.campaign.recording import MemoryRecorder
from research.campaign.scheduler import Scheduler, concurrent_engines
from research.campaign.steps import (
    CompareFn,
    DiagnoseFn,
    MemoryUnreadable,
    NoiseFn,
    ProposeFn,
    default_compare,
    default_diagnose,
    endpoint_noise,
    default_propose,
)
from research.correctness import CorrectnessThresholds
from research.harness import Progress, SweepFn, stop_orphan
from research.state import BaselineRecord, CampaignState, RoundRecord, StateStore


class LoopOptions(TypedDict, total=False):
    """How a campaign call runs; every option has the real default.

    ``memory``: a memory_db.MemoryStore (None = no shared memory). ``proposer``: "auto" (the campaign's
    setting), "rules" or "llm". ``stop_after_s``: this call's time window: the campaign pauses (saved,
    not finished) before an experiment that would not end within it, so a campaign can be split across
    short calls (a GPU machine lent for 10 minutes at a time) and resumed by calling again. The rest
    replace parts of the loop (tests, alternative measurement)."""

    memory: object | None
    proposer: str
    progress: Progress
    pool: pl.DataFrame | None
    sweep_fn: SweepFn | None
    noise_fn: NoiseFn | None
    compare_fn: CompareFn | None
    diagnose_fn: DiagnoseFn | None
    propose_fn: ProposeFn | None
    thresholds: CorrectnessThresholds | None
    stop_after_s: float | None


class CampaignLoop:
    """A campaign loaded from its state file (or new), with the collaborators that run it."""

    def __init__(
        self, campaign: CampaignSpec, endpoint: EndpointSpec, state_dir: Path | str, **options: Unpack[LoopOptions]
    ):
        o = options
        call_started = time.monotonic()
        state_dir = Path(state_dir)
        progress = o.get("progress") or print
        self.campaign, self.endpoint, self.progress = campaign, endpoint, progress
        store = StateStore(state_dir, campaign.name)
        limits = Limits.of(campaign, endpoint)
        concurrent = concurrent_engines(campaign, endpoint, progress)
        workdir = state_dir / f"{campaign.name}.runs"  # CampaignContext.workdir
        diagnose_fn = o.get("diagnose_fn") or default_diagnose(campaign, workdir, progress)
        proposer = o.get("proposer", "auto")
        kind = proposer if proposer != "auto" else campaign.proposer
        propose_fn = o.get("propose_fn")
        if propose_fn is None and kind == "llm":  # fail before the baseline, not after it
            from research.llm_agents import Orchestrator

            Orchestrator.from_env("llm")
        propose_fn = propose_fn or default_propose(kind, o.get("memory"), campaign.authored_patches)
        state = store.load()
        if state is not None:
            state.resumes += 1
            progress(
                f"resuming campaign {campaign.name} ({len(state.experiments)} experiments recorded, "
                f"{state.active_seconds / 60:.1f} min used)"
            )
        else:
            state = CampaignState(
                campaign=campaign.name,
                endpoint=endpoint.name,
                campaign_id=f"{campaign.name}-{time.strftime('%Y%m%dT%H%M%S')}",
            )
        self.state = state
        pool = o.get("pool")
        if pool is None:
            pool = load_pool(campaign, endpoint, state_dir, progress)
        self.ctx = ctx = CampaignContext(campaign, endpoint, state_dir, store, state, pool, progress)
        self.measures_engines = o.get("sweep_fn") is None  # an injected sweep_fn runs no engine of ours
        self.budget = Budget(ctx, limits, o.get("stop_after_s"), call_started, production_check=self.measures_engines)
        self.recorder = MemoryRecorder(ctx, o.get("memory"))
        self.noise_fn = o.get("noise_fn") or endpoint_noise(
            state, endpoint, o.get("memory"), progress, candidate_rounds=campaign.repeats + campaign.extra_repeats
        )
        self.bench = Bench(
            ctx,
            self.budget,
            self.recorder,
            sweep_fn=o.get("sweep_fn"),
            compare_fn=o.get("compare_fn") or default_compare,
            thresholds=o.get("thresholds"),
        )
        self.planner = Planner(ctx, diagnose_fn, propose_fn)
        self.scheduler = Scheduler(ctx, self.budget, self.bench, self.recorder, concurrent)
        self.adoption = Adoption(ctx, self.budget, self.bench, self.recorder, self.noise_fn)

    # -- steps --------------------------------------------------------------------------------
    def baseline(self) -> str | None:
        """Measure the starting configuration (reference) once; return an end reason on failure."""
        ctx, state = self.ctx, self.state
        if state.reference is not None:
            return None
        args = list(self.endpoint.engine.args)
        problem = self.budget.check(self.budget.estimate(ctx.baseline_repeats))
        if problem:
            return problem
        self.progress(f"baseline: {' '.join(args)} ({ctx.baseline_repeats} sweeps)")
        result = self.bench.measure(args, ctx.baseline_repeats, noise=None, capture=True)
        self.budget.charge(result)
        if result.verdict == "invalid" or result.reference is None:
            state.failed_baseline = result.model_dump(mode="json", exclude={"reference"})
            ctx.save()
            return f"baseline invalid: {result.invalid_reason or 'no reference outputs'}"
        sweeps, noise, wall, notes = self.bench.tighten(args, result.sweeps, self.noise_fn, result.wall_s)
        record = BaselineRecord(
            engine_args=args,
            sweeps=sweeps,
            noise=noise,
            identity=result.identity,
            wall_s=wall,
            soak=result.soak,
            notes=notes,
        )
        state.reference = state.working = record
        state.baselines.append(record)
        state.reference_outputs[config_hash(self.endpoint, args)] = result.reference
        self.progress(
            f"baseline capacity {noise.capacity_mean:.3g} req/s (spread {noise.capacity_rel_spread:.1%} "
            f"over {noise.repeats} sweeps: {noise.capacities})"
        )
        self.recorder.campaign("running")
        for i, sweep in enumerate(sweeps):
            self.recorder.run(sweep, f"{state.campaign_id}-baseline-{i}", "baseline", None)
        self.recorder.floor(record)
        ctx.save()
        return None

    def run_round(self, rnd: RoundRecord) -> str | None:
        """Run the round's proposals, then combinations; adopt the best win. Returns an end reason or None.

        A round cut short by the deadline or budget still adopts the wins it confirmed (measuring
        nothing more), so the campaign ends on its best confirmed configuration."""
        working = self.state.working
        cut = self.scheduler.run_proposals(rnd, working)
        reason = self.adoption.settle(rnd, working, measure=cut is None) or cut
        if reason:
            return reason
        rnd.finished = True
        self.ctx.save()
        return None

    # -- ending ---------------------------------------------------------------------------------
    def finish(self, reason: str) -> CampaignOutcome:
        self.verify_in_production()
        self.state.finished, self.state.end_reason = True, reason
        self.progress(f"campaign ends: {reason}")
        self.ctx.save()
        return self.outcome(write=True)

    def verify_in_production(self) -> None:
        """Before and after in production shape (research.production_check), once, when a change was
        adopted and the campaign declares ``production_check_s``; within the deadline and budget, else
        the state says why it was not run. A campaign measuring through an injected ``sweep_fn`` runs no
        engine of its own, so none is started for this either."""
        state, seconds = self.state, self.campaign.production_check_s
        if seconds <= 0 or state.production_check is not None or state.reference is None or state.working is None:
            return
        if state.working.engine_args == state.reference.engine_args or not self.measures_engines:
            return
        from research.production_check import production_check

        problem = budget_problem(
            state, self.ctx.store, self.budget.limits, self.budget.production_check_s(), what="the verification"
        )
        if problem is not None:
            state.production_check = {"not_run": problem}
            self.progress(f"production-shaped verification not run: {problem}")
            return
        check = production_check(
            self.endpoint,
            self.ctx.pool,
            [("before", list(state.reference.engine_args)), ("after", list(state.working.engine_args))],
            workdir=self.ctx.workdir,
            seconds=seconds,
            active_file=self.ctx.workdir / "active_engine.production.json",
            progress=self.progress,
        )
        state.production_check = check.model_dump(mode="json")
        self.ctx.save()

    def outcome(self, write: bool = False) -> CampaignOutcome:
        """The outcome; with ``write``, also the best configuration, the review report, the memory's
        campaign record with its open questions, and ``<campaign>.outcome.json``."""
        if not write:
            return summarize(self.ctx)
        best_path = write_best_config(self.ctx)
        report_path = write_review(self.ctx)
        if not self.state.unrecorded:  # a failing memory is not asked again: the next run records it all
            self.recorder.open_questions()
            self.recorder.campaign("finished" if self.state.finished else "stopped")
        if self.state.unrecorded:
            self.ctx.save()
        out = summarize(self.ctx, report_path, best_path)
        write_outcome(self.ctx, out)
        return out

    def record_all(self) -> None:
        """Write the whole state to the research memory: the campaign, the reference's runs, every
        experiment with its proposal and runs, every floor's evidence and the adopted changes. For a
        state whose write failed (run again), or one measured elsewhere (record_campaign); a record
        written twice is harmless, since each has an id."""
        rec, s = self.recorder, self.state
        rec.campaign("running")
        for i, sweep in enumerate(s.reference.sweeps if s.reference else []):
            rec.run(sweep, f"{s.campaign_id}-baseline-{i}", "baseline", None)
        proposals = {p.proposal_id: p for r in s.rounds for p in r.proposals}
        for record in s.experiments.values():
            if record.verdict != "skipped":
                rec.experiment(record, proposals.get(record.proposal_ids[0]) if record.kind == "candidate" else None)
        for b in s.baselines:
            rec.floor(b)
        for b in s.baselines[1:]:
            best = s.experiments.get(b.source_experiment or "")
            if best is not None:
                rec.confirmation(best)

    def stopped(self) -> CampaignOutcome:
        """A memory or review write failed: the campaign stops after its step, not finished (unless it
        was), its state kept so that the next run records everything and resumes."""
        s = self.state
        self.progress(f"campaign stops: {s.unrecorded}; its state is kept: run it again to record it and resume")
        if not s.finished:
            s.end_reason = f"stopped: {s.unrecorded}"
        self.ctx.save()
        return self.outcome(write=True)

    def record_missed(self) -> CampaignOutcome | None:
        """The last run could not record everything: record the whole state now. Returns the outcome
        when the campaign stops (the memory still fails) or was already finished, else None (go on)."""
        s = self.state
        self.progress(f"recording what the last run could not ({s.unrecorded})")
        s.unrecorded = None
        self.record_all()
        if s.unrecorded:
            return self.stopped()
        self.ctx.save()
        return self.outcome(write=True) if s.finished else None

    def finished_outcome(self) -> CampaignOutcome:
        """A finished campaign run again: its outcome with the files it wrote, so that a new run (of the
        campaign job, say, after one killed while it recorded) shows the same review. A report missing
        (killed between saving the state and writing it) is written now; the memory is not touched."""
        ctx = self.ctx
        report = review_path(ctx)
        if not report.exists():
            report = write_review(ctx)
        best = ctx.state_dir / f"{self.state.campaign}.best.json"
        if not best.exists():
            best = write_best_config(ctx)
        if self.state.unrecorded:  # the report failed again: kept, so the next run tries once more
            ctx.save()
        return summarize(ctx, report, best)

    def run(self) -> CampaignOutcome:
        if self.state.unrecorded and (done := self.record_missed()) is not None:
            return done
        if self.state.finished:
            self.progress(f"campaign {self.campaign.name} already finished: {self.state.end_reason}")
            return self.finished_outcome()
        for active in sorted(self.ctx.workdir.glob("active_engine*.json")):
            stop_orphan(active, self.progress)
        self.ctx.save()
        try:
            reason = self.baseline()
            while reason is None and not self.state.unrecorded:  # a failed write stops it after its step
                rnd = self.planner.current_round()
                if isinstance(rnd, str):
                    reason = rnd
                    break
                reason = self.run_round(rnd)
        except Paused as pause:
            self.state.end_reason = str(pause)
            self.progress(str(pause))
            self.ctx.save()
            return self.outcome(write=True)
        except MemoryUnreadable as exc:  # mid-step: the last saved state stands, and the step runs again
            self.progress(f"campaign stops: {exc}; its saved state is kept: run it again to resume")
            return summarize(self.ctx).model_copy(update={"finished": False, "unrecorded": str(exc)})
        if self.state.unrecorded:
            return self.stopped()
        return self.finish(reason)


def run_campaign(
    campaign: CampaignSpec,
    endpoint: EndpointSpec,
    *,
    state_dir: Path | str,
    run_id: str | None = None,
    **options: Unpack[LoopOptions],
) -> CampaignOutcome:
    """Run (or resume) ``campaign`` on ``endpoint`` headless until it ends; return its outcome.

    ``run_id``: the Dagster run this call is (the memory's campaign record lists every run of it).
    ``state_dir`` holds the state file, the replay pool, engine logs, the best configuration and
    the review report. ``options``: see :class:`LoopOptions` (memory, proposer, the call's time window,
    and the parts of the loop that tests or an alternative measurement replace).
    """
    if campaign.endpoint != endpoint.name:
        raise ValueError(f"campaign {campaign.name!r} targets endpoint {campaign.endpoint!r}, not {endpoint.name!r}")
    c = CampaignLoop(campaign, endpoint, Path(state_dir), **options)
    if run_id and run_id not in c.state.dagster_run_ids:
        c.state.dagster_run_ids.append(run_id)
    return c.run()


def record_campaign(
    campaign: CampaignSpec, endpoint: EndpointSpec, *, state_dir: Path | str, memory, pool: pl.DataFrame
) -> CampaignOutcome:
    """Record a campaign measured elsewhere (its state folder brought back from a GPU machine) into
    this host's research memory: the campaign, baseline runs, every experiment with its proposal,
    the adopted changes and the open questions, exactly as the campaign would have recorded them."""
    c = CampaignLoop(
        campaign,
        endpoint,
        Path(state_dir),
        memory=memory,
        proposer="rules",
        progress=lambda message: None,
        pool=pool,
        propose_fn=lambda *a: [],
    )
    s = c.state
    s.resumes = max(0, s.resumes - 1)  # loading it here is not a resume
    if s.reference is None:
        raise ValueError(f"{state_dir}: campaign {campaign.name} has no measured baseline to record")
    c.record_all()
    if s.unrecorded:
        raise RuntimeError(f"{state_dir}: campaign {campaign.name}: {s.unrecorded}")
    return c.outcome(write=True)
