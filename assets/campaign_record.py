"""What a campaign leaves in Dagster: the research assets it measured, recorded as materialisations.

A campaign runs the research loop headless (research.campaign: resume after a kill, deadline, budget)
inside one run of the endpoint's campaign job. So that the UI shows what it did, the campaign asset
records, in that run, a materialisation of each research asset it has a value for: the replay pool
with its fidelity check (when the campaign built it), the working baseline's runs, noise floor and
load curve, the confirmed baseline and the review report. Each value is stored where the IO manager
keeps that asset's value, so a later materialisation in the UI reads what the campaign measured. The
diagnosis, proposals, candidate runs and verdicts of every round are tables on the campaign's own
materialisation (the graph's per-proposal partitions belong to interactive rounds).

Each recorded materialisation names its campaign (``recorded_by_campaign``): the continuation sensor
leaves those alone, since a campaign runs its own rounds.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets.common import key, md_image, table
from assets.measurement import baseline_runs_metadata, load_curve_of, noise_floor_metadata
from specs.config import EndpointSpec
from assets.io_manager import TypedIOManager
from research.campaign import CampaignOutcome
from research.campaign.adoption import outputs_checked
from research.loop import Adoption, CandidateVerdict
from research.state import CampaignState, ExperimentState

RECORDED_BY = "recorded_by_campaign"


def record_pool_build(context: dg.AssetExecutionContext, endpoint: EndpointSpec, build, io: TypedIOManager) -> None:
    """The replay pool a campaign built before its first sweep, with its fidelity check."""
    from assets.replay import pool_build_events

    pool_key = key(endpoint.name, "replay_pool")
    metadata, check = pool_build_events(pool_key, build)
    stored = io.store(pool_key, None, str(build.pool_path))
    context.log_event(
        dg.AssetMaterialization(
            asset_key=pool_key,
            metadata={**metadata, RECORDED_BY: context.partition_key, "stored_at": dg.MetadataValue.path(str(stored))},
        )
    )
    context.log_event(check)


def record_campaign_assets(
    context: dg.AssetExecutionContext,
    endpoint: EndpointSpec,
    state: CampaignState | None,
    outcome: CampaignOutcome,
    io: TypedIOManager,
) -> dict:
    """Record the campaign's research assets in this run; return the tables for the campaign's own metadata."""
    if state is None:
        return {}
    name = endpoint.name
    by = {RECORDED_BY: context.partition_key, "campaign_id": state.campaign_id}

    def record(asset: str, value, metadata: dict) -> None:
        asset_key = key(name, asset)
        stored = io.store(asset_key, None, value)
        context.log_event(
            dg.AssetMaterialization(
                asset_key=asset_key, metadata={**metadata, **by, "stored_at": dg.MetadataValue.path(str(stored))}
            )
        )

    working = state.working or state.reference
    if working is not None and working.sweeps:
        record("baseline_runs", working.sweeps, baseline_runs_metadata(working.engine_args, working.sweeps))
        record("noise_floor", working.noise, noise_floor_metadata(working.noise))
        summary, metadata = load_curve_of(endpoint, working.sweeps, working.noise)
        record("load_curve", summary, metadata)
    experiments = list(state.experiments.values())
    adopted = [state.experiments[r.adopted] for r in state.rounds if r.adopted in state.experiments]
    if state.reference is not None:
        best = _verdict(adopted[-1]) if adopted else None
        adoption = Adoption(
            adopted=best is not None,
            best=best,
            review_needed=[
                e.proposal_ids[0] for e in experiments if e.confirmed and (e.lossy or not outputs_checked(e))
            ],
        )
        record(
            "confirmed_baseline",
            adoption,
            {
                "adopted": best is not None,
                "new_engine_args": " ".join(best.engine_args) if best else "(unchanged)",
                "verdicts": table(_verdict_rows(experiments)),
            },
        )
    if outcome.report_path:
        report = Path(outcome.report_path)
        metadata = {"report": dg.MetadataValue.md(report.read_text())}
        plots = sorted(report.parent.glob("*.png"))
        if plots:
            metadata["load_curves_before_after"] = md_image(plots[0], "before vs after")
        record("review_report", report.read_text(), metadata)
    return {
        "diagnosis": table(
            [
                {
                    "round": r.round,
                    "baseline": " ".join(r.baseline_args),
                    "bottlenecks": "; ".join(
                        f"{b.get('name')} ({b.get('severity')})" for b in r.diagnosis.get("bottlenecks", [])
                    ),
                }
                for r in state.rounds
            ]
        ),
        "proposals": table(
            [
                {
                    "round": r.round,
                    "id": p.proposal_id,
                    "change": p.title,
                    "bottleneck": p.bottleneck,
                    "lossy": p.lossy,
                    "prediction": p.prediction,
                    "falsification": p.falsification,
                }
                for r in state.rounds
                for p in r.proposals
            ]
        ),
        "candidate_runs": table(
            [
                {
                    "experiment": e.experiment_id,
                    "round": e.round,
                    "kind": e.kind,
                    "change": e.title,
                    "sweeps": len(e.sweeps),
                    "wall_s": round(e.wall_s, 1),
                    "reason": e.invalid_reason or e.skip_reason or "",
                }
                for e in experiments
            ]
        ),
        "verdicts": table(_verdict_rows(experiments)),
    }


def _verdict(e: ExperimentState) -> CandidateVerdict:
    c = e.comparison
    return CandidateVerdict(
        proposal_id=e.proposal_ids[0] if e.proposal_ids else e.experiment_id,
        verdict=e.verdict,
        confirmed=e.confirmed,
        capacity_ratio=c.capacity_ratio if c else None,
        capacities=[s.capacity_rps for s in e.sweeps],
        evidence=c.evidence if c else None,
        invalid_reason=e.invalid_reason,
        reason=e.skip_reason,
        correctness=e.correctness.reason if e.correctness else None,
        correctness_unchecked=not outputs_checked(e),
        lossy=e.lossy,
        engine_args=e.engine_args,
        baseline_args=e.baseline_args,
        experiment_id=e.experiment_id,
    )


def _verdict_rows(experiments: list[ExperimentState]) -> list[dict]:
    """One row per experiment: the verdict, its effect with the interval, and the smallest effect it could see."""
    rows = []
    for e in experiments:
        c = e.comparison
        rows.append(
            {
                "experiment": e.experiment_id,
                "round": e.round,
                "change": e.title,
                "verdict": e.verdict,
                "confirmed": e.confirmed,
                "effect": c.effect if c else None,
                "effect_low": c.effect_low if c else None,
                "effect_high": c.effect_high if c else None,
                "mde": c.mde if c else None,
                "capacity_ratio": c.capacity_ratio if c else None,
                "lossy": e.lossy,
                "reason": e.invalid_reason or e.skip_reason or "",
            }
        )
    return rows
