"""What a campaign writes to the research memory (memory_db): the campaign, its runs, every
experiment with its proposal, the skips, the confirmations and the open questions.

A failed write is never only a warning: it is kept in the state (``CampaignState.unrecorded``), the
campaign stops at the end of its step with a non-zero exit, and the next run records the whole state again
(research.campaign.run.CampaignLoop.record_all; every record has an id, so writing it twice is harmless). A
failed read (a prior decision) warns and is left out. A campaign without a memory (``memory`` None: a GPU machine) records nothing here; its state folder is
recorded later on a host with the memory (research.campaign.run.record_campaign).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadgen.results import SweepResult
from research.campaign.context import CampaignContext, config_hash, ratio
from research.campaign.outcome import judged_gain, total_gain
from research.state import BaselineRecord, ExperimentState, ProposalRecord


class MemoryRecorder:
    """The campaign's writer to (and reader of prior decisions from) a memory_db.MemoryStore."""

    def __init__(self, ctx: CampaignContext, memory):
        self.ctx, self.memory = ctx, memory

    def guarded(self, what: str, fn: Callable[[], Any], *, write: bool = True) -> Any:
        """``fn()``, or None when there is no memory or it fails. A failed write is kept as the state's
        ``unrecorded`` (the first one: the next run records everything again), a failed read warns."""
        if self.memory is None:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - kept in the state and reported when the step ends
            error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if not write:
                self.ctx.progress(f"  warning: research memory ({what}) failed: {error}; left out")
                return None
            self.ctx.progress(f"  error: research memory ({what}) could not be written: {error}")
            state = self.ctx.state
            state.unrecorded = state.unrecorded or f"research memory ({what}) could not be written: {error}"
            return None

    def conditions(self):
        from research.loop import conditions

        state = self.ctx.state
        ident = state.reference.identity if state.reference else {}
        return conditions(self.ctx.endpoint, self.ctx.signature, ident.get("engine_version", "unknown"))

    def memory_id(self, record: ExperimentState) -> str:
        return f"{self.ctx.state.campaign_id}:{record.experiment_id}"

    # -- reading --------------------------------------------------------------------------------
    def prior(self, record: ExperimentState):
        """A decision in memory that makes this run pointless (same change, same conditions).

        A decision taken in *this* campaign on another baseline does not count: the baseline moved.
        """
        if self.memory is None:
            return None
        prior = self.guarded(
            "prior decision",
            lambda: self.memory.prior_decision(self.ctx.endpoint.name, record.diff, self.conditions()),
            write=False,
        )
        if prior is None or not prior.should_skip or prior.verdict not in ("same", "worse"):
            return None
        if prior.campaign_id == self.ctx.state.campaign_id:
            return None
        return prior

    # -- rows -----------------------------------------------------------------------------------
    def campaign_row(self, status: str):
        from memory_db.records import CampaignRecord

        state, endpoint = self.ctx.state, self.ctx.endpoint
        ref, best = state.reference, state.working
        judged = judged_gain(state)
        return CampaignRecord(
            campaign_id=state.campaign_id,
            campaign=self.ctx.campaign.name,
            endpoint=endpoint.name,
            status=status,
            stop_reason=state.end_reason,
            baseline_config_hash=config_hash(endpoint, ref.engine_args) if ref else None,
            baseline_engine_args=ref.engine_args if ref else [],
            baseline_capacity=ref.capacity if ref else None,
            best_config_hash=config_hash(endpoint, best.engine_args) if best else None,
            best_engine_args=best.engine_args if best else [],
            best_capacity=best.capacity if best else None,
            total_gain_ratio=total_gain(ref, best)[0],
            judged_gain=judged.gain if judged else None,
            judged_gain_low=judged.low if judged else None,
            judged_gain_high=judged.high if judged else None,
            judged_gain_confidence=judged.confidence if judged else None,
            dagster_run_ids=list(state.dagster_run_ids),
            notes="; ".join(state.open_questions[:5]),
        )

    def confirmation_row(self, best: ExperimentState):
        from memory_db.records import ConfirmationRecord

        return ConfirmationRecord(
            experiment_id=self.memory_id(best),
            endpoint=self.ctx.endpoint.name,
            campaign_id=self.ctx.state.campaign_id,
            new_config_hash=config_hash(self.ctx.endpoint, best.engine_args),
            engine_args=list(best.engine_args),
            note=f"{best.title}: {ratio(best)}",
        )

    # -- writing (a failure is kept: guarded) ------------------------------------------------------
    def campaign(self, status: str) -> None:
        self.guarded("campaign", lambda: self.memory.record_campaign(self.campaign_row(status)))

    def confirmation(self, best: ExperimentState) -> None:
        self.guarded("confirmation", lambda: self.memory.record_confirmation(self.confirmation_row(best)))

    def open_questions(self) -> None:
        state = self.ctx.state
        for q in state.open_questions if self.memory is not None else []:
            from memory_db.records import OpenQuestion

            self.guarded(
                "open question",
                lambda q=q: self.memory.record_question(
                    OpenQuestion(endpoint=self.ctx.endpoint.name, campaign_id=state.campaign_id, question=q)
                ),
            )

    def skip(self, record: ExperimentState, proposal: ProposalRecord, prior) -> None:
        """A proposal not run because of a prior decision in memory."""
        self.guarded(
            "skip",
            lambda: self.memory.record_skip(
                endpoint=self.ctx.endpoint.name,
                campaign_id=self.ctx.state.campaign_id,
                conditions=self.conditions(),
                technique=proposal.technique,
                change=record.diff,
                prior=prior,
            ),
        )

    def run(self, sweep: SweepResult, run_id: str, kind: str, experiment: str | None) -> None:
        if self.memory is None:  # no memory here (a GPU machine): recorded later by record_campaign
            return
        from memory_db.records import RunRecord

        self.guarded(
            "run",
            lambda: self.memory.record_run(
                RunRecord.from_sweep(
                    sweep,
                    run_id=run_id,
                    kind=kind,
                    campaign_id=self.ctx.state.campaign_id,
                    experiment_id=experiment,
                    price_per_gpu_hour_usd=self.ctx.endpoint.hardware.price_per_gpu_hour_usd,
                )
            ),
        )

    def evidence(self, source: str, engine_args: list[str], evidence) -> None:
        """A/A evidence (a floor's, or an experiment's repeats) the endpoint's later floors pool in."""
        if self.memory is None:
            return
        from research.campaign.steps import evidence_records

        ctx = self.ctx
        config = config_hash(ctx.endpoint, engine_args)
        for row in evidence_records(ctx.endpoint, ctx.state.campaign_id, source, config, evidence):
            self.guarded("noise evidence", lambda row=row: self.memory.record_aa_evidence(row))

    def floor(self, baseline: BaselineRecord) -> None:
        self.evidence(baseline.source_experiment or "reference", baseline.engine_args, baseline.noise.aa_evidence)

    def experiment(self, record: ExperimentState, proposal: ProposalRecord | None) -> None:
        if self.memory is None:
            return
        from memory_db.records import ExperimentRecord
        from research import drafter

        state, endpoint = self.ctx.state, self.ctx.endpoint
        c, corr = record.comparison, record.correctness
        noise = state.working.noise if state.working else None
        mem = ExperimentRecord(
            experiment_id=self.memory_id(record),
            endpoint=endpoint.name,
            campaign_id=state.campaign_id,
            conditions=self.conditions(),
            bottleneck=proposal.bottleneck if proposal else "combination",
            technique=proposal.technique if proposal else record.kind,
            change=record.diff,
            base_config_hash=config_hash(endpoint, record.baseline_args),
            candidate_config_hash=config_hash(endpoint, record.engine_args),
            hypothesis=proposal.explanation if proposal else record.title,
            prediction=proposal.prediction if proposal else "",
            falsification=proposal.falsification if proposal else "",
            verdict=record.verdict,
            invalid_reason=record.invalid_reason,
            capacity_ratio=c.capacity_ratio if c else None,
            baseline_capacity=c.baseline_capacity if c else None,
            candidate_capacity=record.capacity_mean,
            noise_threshold=c.threshold if c else None,
            noise_rel_spread=noise.capacity_rel_spread if noise else None,
            repeats=len(record.sweeps),
            effect=c.effect if c else None,
            effect_low=c.effect_low if c else None,
            effect_high=c.effect_high if c else None,
            mde=c.mde if c else None,
            lossless=not record.lossy,
            correctness=corr.model_dump(mode="json", exclude={"sequences"}) if corr else {},
            soak=record.soak.metadata() if record.soak else None,
            overlays=(record.identity or {}).get("overlays") or None,
            engine_patch=record.engine_patch,
            needs_review=bool(record.lossy or (corr and corr.flag_for_review)),
            evidence=(c.evidence if c else record.invalid_reason or ""),
            run_ids=[f"{self.memory_id(record)}-s{i}" for i in range(len(record.sweeps))],
        )
        self.guarded("experiment", lambda: self.memory.record_experiment(mem))
        if proposal is not None and proposal.technique == drafter.TECHNIQUE:
            self.guarded(
                "drafter verdict",
                lambda: drafter.record_judgement(
                    self.memory, endpoint, record.diff, record.verdict, corr.label if corr else None, record.sweeps
                ),
            )
        for i, sweep in enumerate(record.sweeps):
            self.run(sweep, f"{self.memory_id(record)}-s{i}", "candidate", self.memory_id(record))
        from loadgen.noise_prior import sweeps_evidence

        self.evidence(record.experiment_id, record.engine_args, sweeps_evidence(record.sweeps))
