"""The loop's replaceable steps: the noise floor, the comparison, the diagnosis and the proposer, with
their real defaults (a caller such as a test replaces them through run_campaign's arguments)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from specs.config import CampaignSpec, EndpointSpec
from loadgen.noise_prior import NoisePrior
from loadgen.results import AAEvidence, Comparison, NoiseFloor, SweepResult
from research.harness import CompareFn as CompareFn, Progress  # CompareFn: re-exported for the campaign
from research.state import BaselineRecord, CampaignState, ProposalRecord

NoiseFn = Callable[[list[SweepResult]], NoiseFloor]
#: (endpoint, working baseline, pool, state) -> diagnosis as a plain dict (the Diagnosis model dump)
DiagnoseFn = Callable[[EndpointSpec, BaselineRecord, pl.DataFrame, CampaignState], dict[str, Any]]
#: (endpoint, diagnosis dict, state, how many, diff signatures already tried on this baseline) -> proposals
ProposeFn = Callable[[EndpointSpec, dict[str, Any], CampaignState, int, list[str]], list[ProposalRecord]]


def default_noise(sweeps: list[SweepResult]) -> NoiseFloor:
    """The floor with the default prior (no endpoint history)."""
    from loadgen.noise import noise_floor

    return noise_floor(sweeps)


def protocol_key(endpoint: EndpointSpec) -> str:
    """What makes two floors' between-run noise comparable: the hardware and every sweep setting (a
    longer step or another estimator starts a new history)."""
    import hashlib
    import json

    hw = endpoint.hardware
    key = {"hardware": [hw.gpu_type, hw.gpu_count], "sweep": endpoint.sweep.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


class MemoryUnreadable(RuntimeError):
    """The research memory failed a read a campaign's floor needs: the campaign stops rather than build
    its floor without the endpoint's history (research.campaign.run)."""


def run_hardware(endpoint: EndpointSpec) -> str:
    """The hardware a run of ``endpoint`` measures on, as a calibration records it: its GPUs, or for a CPU
    engine the cores this host gives it (a 2-core VM's noise says nothing of a 16-core host's)."""
    import os

    hw = endpoint.hardware
    if hw.gpu_type.lower() != "cpu" and hw.gpu_count:
        return f"{hw.gpu_type} x {hw.gpu_count}"
    return f"cpu x {len(os.sched_getaffinity(0))}"


def calibration_mismatch(calibration, endpoint: EndpointSpec, hardware: str) -> str | None:
    """Why a declared calibration cannot speak for this run's verdicts, or None when it can."""
    if calibration.scope != "between_launches":
        return "it is within-launch evidence, and a verdict compares two launches"
    if calibration.hardware != hardware:
        return f"measured on {calibration.hardware}, this run is {hardware}"
    differs = calibration.protocol.differences(endpoint.sweep)
    return f"measured with {', '.join(differs)}" if differs else None


def endpoint_prior(
    endpoint: EndpointSpec,
    memory,
    *,
    exclude_campaign: str | None = None,
    own: dict[str, list[AAEvidence]] | None = None,
    progress: Progress = print,
    strict: bool = False,
    hardware: str | None = None,
) -> NoisePrior:
    """The between-run noise a new floor of ``endpoint`` starts from: the default pooled with ``own``
    evidence (a campaign's, by source: :func:`campaign_evidence`), the endpoint's declared calibration
    (``noise_calibration``: between-launch noise measured before any campaign, where its hardware and
    protocol are this run's, ``hardware`` as :func:`run_hardware` says; no floor of its class is narrower
    than it) and the endpoint's other campaigns' under the same protocol in the research memory (when
    there is one; a failing memory is left out with a warning, or with ``strict`` raises MemoryUnreadable).
    A calibration that does not apply is left out, and the prior's source says why."""
    sources = dict(own or {})
    here = hardware or run_hardware(endpoint)
    bounds, notes = [], []
    for c in endpoint.noise_calibration:
        why = calibration_mismatch(c, endpoint, here)
        if why:
            notes.append(f"declared calibration ignored ({c.source}): {why}")
            continue
        ev = AAEvidence(estimator=c.estimator, sum_sq=c.sd**2 * c.df, df=c.df, limiting=c.limiting)
        sources.setdefault(f"calibration: {c.source}", []).append(ev)
        bounds.append(ev)
    if memory is not None:
        try:
            rows = memory.aa_evidence(endpoint.name, protocol_key(endpoint), exclude_campaign=exclude_campaign)
        except Exception as exc:  # noqa: BLE001 - strict: a campaign stops; else left out, with a warning
            if strict:
                raise MemoryUnreadable(f"research memory (endpoint noise history) could not be read: {exc}") from exc
            progress(f"  warning: research memory (endpoint noise) failed: {exc!r}; its history is left out")
            rows = []
        for r in rows:
            sources.setdefault(f"{r.campaign_id}/{r.source}", []).append(
                AAEvidence(estimator=r.estimator, sum_sq=r.sum_sq, df=r.df, sweeps=r.sweeps, limiting=r.limiting)
            )
    evidence = [ev for evs in sources.values() for ev in evs if ev.df]
    used = sum(1 for evs in sources.values() if any(ev.df for ev in evs))
    where = "repeated configurations of the endpoint"
    if bounds:
        where += " or its declared calibration"
    return NoisePrior.from_history(evidence, used, where, bounds=bounds, notes=notes)


def campaign_evidence(state: CampaignState, exclude: list[SweepResult] = ()) -> dict[str, list[AAEvidence]]:
    """This campaign's A/A evidence by source: every experiment's repeats and every floor's (a floor
    adopted from an experiment holds its sweeps and more, so it replaces the experiment's). An experiment
    with a sweep in ``exclude`` (the floor being built from it) is left out: its evidence is that floor's."""
    from loadgen.noise_prior import sweeps_evidence

    def shared(rec) -> bool:
        return any(s is x or (s.started_at and s.started_at == x.started_at) for s in rec.sweeps for x in exclude)

    out = {rec.experiment_id: sweeps_evidence(rec.sweeps) for rec in state.experiments.values() if not shared(rec)}
    for b in state.baselines:
        out[b.source_experiment or "reference"] = b.noise.aa_evidence
    return {k: v for k, v in out.items() if v}


def endpoint_noise(
    state: CampaignState, endpoint: EndpointSpec, memory, progress: Progress, candidate_rounds: int | None = None
) -> NoiseFn:
    """The campaign's floors, each starting from the endpoint's prior (:func:`endpoint_prior`); their MDE
    is that of a candidate of at most ``candidate_rounds`` sweeps (the campaign's repeats and extra ones)."""
    from loadgen.noise import noise_floor

    def noise(sweeps: list[SweepResult]) -> NoiseFloor:
        own = campaign_evidence(state, exclude=sweeps)
        prior = endpoint_prior(
            endpoint, memory, exclude_campaign=state.campaign_id, own=own, progress=progress, strict=True
        )
        return noise_floor(sweeps, prior=prior, candidate_rounds=candidate_rounds)

    return noise


def evidence_records(
    endpoint: EndpointSpec, campaign_id: str | None, source: str, config: str, evidence: list[AAEvidence]
) -> list:
    """The research-memory rows (memory_db ``aa_evidence``) of one source's A/A evidence."""
    from memory_db.records import AAEvidenceRecord

    return [
        AAEvidenceRecord(
            endpoint=endpoint.name,
            campaign_id=campaign_id,
            source=source,
            config_hash=config,
            protocol=protocol_key(endpoint),
            estimator=ev.estimator,
            sweeps=ev.sweeps,
            df=ev.df,
            sum_sq=ev.sum_sq,
            limiting=ev.limiting,
        )
        for ev in evidence
        if ev.df
    ]


def default_compare(noise: NoiseFloor, sweeps: list[SweepResult], *, final: bool = True) -> Comparison:
    from loadgen.compare import compare

    return compare(noise, sweeps, final=final)


def default_diagnose(campaign: CampaignSpec, workdir: Path, progress: Progress) -> DiagnoseFn:
    """research.loop.diagnose_step on the working baseline's own sweeps and the pool."""

    def diagnose(
        endpoint: EndpointSpec, baseline: BaselineRecord, pool: pl.DataFrame, state: CampaignState
    ) -> dict[str, Any]:
        from research.loop import diagnose_step

        spec = endpoint.with_engine_args(list(baseline.engine_args))
        found = diagnose_step(
            spec,
            pool,
            baseline.sweeps,
            profile_seconds=campaign.profile_seconds,
            workdir=workdir / f"diagnosis-{len(state.rounds) + 1}",
            progress=progress,
            sustained_failure=(
                "; ".join(baseline.soak.reasons) if baseline.soak and baseline.soak.outcome == "unstable" else None
            ),
        )
        return found.model_dump(mode="json")

    return diagnose


def proposal_record(proposal: Any) -> ProposalRecord:
    """Reduce a research.proposals.Proposal to what the campaign stores."""
    iv = proposal.intervention
    return ProposalRecord(
        proposal_id=proposal.proposal_id,
        title=iv.describe(),
        technique=iv.technique,
        bottleneck=proposal.bottleneck,
        engine_arg_diff=dict(iv.engine_arg_diff),
        engine_patch=iv.engine_patch,
        lossy=iv.lossy,
        explanation=proposal.explanation,
        prediction=proposal.prediction,
        falsification=proposal.falsification,
        source=proposal.source,
        raw=proposal.model_dump(mode="json"),
    )


def default_propose(mode: str, memory=None, authored_patches: bool = False) -> ProposeFn:
    """The orchestrator (research.loop.propose_step): LLM subagents when configured, rules otherwise."""

    def propose(
        endpoint: EndpointSpec, diagnosis: dict[str, Any], state: CampaignState, n: int, skip: list[str]
    ) -> list[ProposalRecord]:
        from research.loop import propose_step
        from research.proposals import Diagnosis

        working = state.working
        batch = propose_step(
            endpoint.with_engine_args(list(working.engine_args)),
            Diagnosis.model_validate(diagnosis),
            n=n,
            mode=mode,
            campaign_id=state.campaign_id,
            experiment_id=f"round-{len(state.rounds) + 1}",
            memory=memory,
            skip=skip,
            authored_patches=authored_patches,
            baseline={
                "capacity_rps": working.capacity,
                "noise_threshold": working.noise.threshold,
                "capacities": working.noise.capacities,
            },
        )
        return [proposal_record(p) for p in batch.proposals]

    return propose
