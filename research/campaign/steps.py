"""The loop's replaceable steps: the noise floor, the comparison, the diagnosis and the proposer, with
their real defaults (a caller such as a test replaces them through run_campaign's arguments)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from specs.config import CampaignSpec, EndpointSpec
from loadgen.results import Comparison, NoiseFloor, SweepResult
from research.harness import CompareFn as CompareFn, Progress  # CompareFn: re-exported for the campaign
from research.state import BaselineRecord, CampaignState, ProposalRecord

NoiseFn = Callable[[list[SweepResult]], NoiseFloor]
#: (endpoint, working baseline, pool, state) -> diagnosis as a plain dict (the Diagnosis model dump)
DiagnoseFn = Callable[[EndpointSpec, BaselineRecord, pl.DataFrame, CampaignState], dict[str, Any]]
#: (endpoint, diagnosis dict, state, how many, diff signatures already tried on this baseline) -> proposals
ProposeFn = Callable[[EndpointSpec, dict[str, Any], CampaignState, int, list[str]], list[ProposalRecord]]


def default_noise(sweeps: list[SweepResult]) -> NoiseFloor:
    from loadgen.noise import noise_floor

    return noise_floor(sweeps)


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
