"""Research stage, one experiment per partition: diagnosis -> proposals -> candidate_runs[p] ->
verdicts[p] -> confirmed_baseline -> review_report.

The same steps the headless campaign runs, laid out so the UI shows each experiment's lineage
from its diagnosis to its verdict. A confirmed baseline is written to the research memory, which
makes it the working baseline of the next round (see sensors/continuation.py).
"""

import dagster as dg

from assets.common import key, md_image, refuse_unrunnable, table
from specs import paths
from specs.config import DefinitionSet, EndpointSpec
from assets.pools import pool_for
from loadgen.results import NoiseFloor, SweepResult
from research.loop import Adoption, CandidateRun, CandidateVerdict, pick_winner
from research.proposals import Diagnosis, ProposalBatch


def candidate_partitions(endpoint: EndpointSpec) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"{endpoint.name}__candidates")


def round_job_name(endpoint: EndpointSpec) -> str:
    """The job that measures the working baseline again and proposes (the continuation sensor starts it)."""
    return f"{endpoint.name}__research_round"


def build(endpoint: EndpointSpec, definitions: DefinitionSet) -> dg.Definitions:
    name = endpoint.name
    settings = definitions.campaign_of(endpoint.name)
    candidates = candidate_partitions(endpoint)
    recipes = {r: definitions.recipes[r] for r in settings.recipes} if settings.recipes else dict(definitions.recipes)
    interactive_campaign = f"{name}-interactive"

    @dg.asset(
        key=key(name, "diagnosis"),
        group_name=name,
        pool=pool_for(endpoint),
        kinds={endpoint.engine.kind},
        ins={"baseline_runs": dg.AssetIn(key(name, "baseline_runs"))},
        deps=[key(name, "replay_pool")],
        description="Suspected bottlenecks with their evidence: request statistics, engine metrics over the "
        "sweeps, a torch-profiler breakdown under steady load, diagnostic workloads from recipes.",
    )
    def diagnosis(context: dg.AssetExecutionContext, baseline_runs: list[SweepResult]) -> Diagnosis:
        refuse_unrunnable(endpoint)
        from autoresearch.workflows import diagnose_endpoint, load_pool, working_spec

        spec = working_spec(endpoint)
        found = diagnose_endpoint(
            spec,
            load_pool(spec),
            baseline_runs,
            recipes,
            profile_seconds=settings.profile_seconds,
            progress=context.log.info,
        )
        metadata = {
            "bottlenecks": table(
                [
                    {"bottleneck": b.name, "severity": b.severity, "evidence": "; ".join(b.evidence)}
                    for b in found.bottlenecks
                ]
            ),
            "traits": table([{"trait": k, "value": v} for k, v in found.traits.items()]),
            "notes": "; ".join(found.notes) or "none",
        }
        if found.profile is not None:
            metadata["profile"] = table(
                [
                    {"category": k, "share": v}
                    for k, v in sorted(found.profile.category_share.items(), key=lambda kv: -kv[1])
                ]
            )
        context.add_output_metadata(metadata)
        return found

    @dg.asset(
        key=key(name, "proposals"),
        group_name=name,
        ins={"diagnosis": dg.AssetIn(key(name, "diagnosis")), "noise_floor": dg.AssetIn(key(name, "noise_floor"))},
        description=f"The orchestrator's questions and its {settings.subagents} subagents' proposals "
        "(explanation, exact intervention, prediction, falsification); each valid one becomes a candidate partition.",
    )
    def proposals(context: dg.AssetExecutionContext, diagnosis: Diagnosis, noise_floor: NoiseFloor) -> ProposalBatch:
        from autoresearch.workflows import propose_for, working_spec

        spec = working_spec(endpoint)
        batch = propose_for(
            spec,
            diagnosis,
            n=settings.subagents,
            mode=settings.proposer,
            baseline={"capacity_rps": noise_floor.capacity_mean, "noise_threshold": noise_floor.threshold},
            campaign_id=interactive_campaign,
        )
        keys = [p.proposal_id for p in batch.proposals]
        context.instance.add_dynamic_partitions(candidates.name, keys)
        context.add_output_metadata(
            {
                "source": batch.source,
                "candidate_partitions": ", ".join(keys) or "none",
                "proposals": table(
                    [
                        {
                            "id": p.proposal_id,
                            "bottleneck": p.bottleneck,
                            "change": p.intervention.describe(),
                            "lossy": p.intervention.lossy,
                            "prediction": p.prediction,
                            "falsification": p.falsification,
                        }
                        for p in batch.proposals
                    ]
                ),
                "rejected": table([r.model_dump(mode="json") for r in batch.rejected]),
                "drafter": dg.MetadataValue.md(_drafter_markdown(batch)),
            }
        )
        return batch

    @dg.asset(
        key=key(name, "candidate_runs"),
        group_name=name,
        partitions_def=candidates,
        pool=pool_for(endpoint),
        kinds={endpoint.engine.kind},
        ins={"proposals": dg.AssetIn(key(name, "proposals")), "noise_floor": dg.AssetIn(key(name, "noise_floor"))},
        description="One proposal's candidate through the shared harness: same pool, schedule and SLA as the "
        f"baseline, {settings.repeats} repeated sweeps, correctness check; skipped if memory already decided it.",
    )
    def candidate_runs(
        context: dg.AssetExecutionContext, proposals: ProposalBatch, noise_floor: NoiseFloor
    ) -> CandidateRun:
        refuse_unrunnable(endpoint)
        from autoresearch.workflows import load_pool, run_proposal, working_spec

        batch = proposals
        proposal = next((p for p in batch.proposals if p.proposal_id == context.partition_key), None)
        if proposal is None:
            raise dg.Failure(
                f"proposal {context.partition_key!r} is not in the latest {name}/proposals; "
                "re-materialize proposals or pick one of: " + ", ".join(p.proposal_id for p in batch.proposals)
            )
        spec = working_spec(endpoint)
        run = run_proposal(
            spec,
            proposal,
            load_pool(spec),
            noise_floor,
            repeats=settings.repeats,
            campaign_id=interactive_campaign,
            dagster_run_id=context.run.run_id,
            progress=context.log.info,
            extra_repeats=settings.extra_repeats,
        )
        result = run.result
        context.add_output_metadata(
            {
                "change": proposal.intervention.describe(),
                "skipped": run.skipped or "no",
                "verdict": result.verdict if result else "skipped",
                # why a run is invalid, named where the UI shows it (crash, client behind its schedule, ...)
                "invalid_reason": (result.invalid_reason or "") if result else "",
                "sweeps": table(
                    [
                        {
                            "repeat": s.label,
                            "capacity_rps": s.capacity_rps,
                            "validity": s.validity,
                            "reason": s.invalid_reason or "",
                            "send_lag_p99_ms": max((st.send_lag_ms.p99 or 0.0 for st in s.steps), default=None),
                        }
                        for s in (result.sweeps if result else [])
                    ]
                ),
                # held at its capacity before adoption (loadgen.soak): "none" when it was not to be adopted
                "soak": result.soak.summary() if result and result.soak else "none",
            }
        )
        return run

    @dg.asset(
        key=key(name, "verdicts"),
        group_name=name,
        partitions_def=candidates,
        ins={"candidate_runs": dg.AssetIn(key(name, "candidate_runs"))},
        description="better / same / worse / invalid against the noise floor, with the evidence.",
    )
    def verdicts(context: dg.AssetExecutionContext, candidate_runs: CandidateRun) -> CandidateVerdict:
        verdict = candidate_runs.verdict()
        context.add_output_metadata({k: dg.MetadataValue.text(str(v)) for k, v in verdict.model_dump().items()})
        return verdict

    @dg.asset(
        key=key(name, "confirmed_baseline"),
        group_name=name,
        ins={"proposals": dg.AssetIn(key(name, "proposals")), "verdicts": dg.AssetIn(key(name, "verdicts"))},
        description="The best confirmed lossless win whose outputs were checked becomes the working baseline "
        "(recorded in memory); lossy and unchecked wins wait for human review.",
    )
    def confirmed_baseline(
        context: dg.AssetExecutionContext, proposals: ProposalBatch, verdicts: dict[str, CandidateVerdict]
    ) -> Adoption:
        from memory_db.records import ConfirmationRecord
        from memory_db.store import MemoryStore

        # the latest proposals' verdicts (every partition's verdict is stored; older rounds' are not candidates)
        verdicts = {p.proposal_id: verdicts[p.proposal_id] for p in proposals.proposals if p.proposal_id in verdicts}

        winner = pick_winner(v.contender() for v in verdicts.values())
        best = verdicts[winner.id] if winner is not None else None
        if best is not None:
            MemoryStore(paths.memory_db_path()).record_confirmation(
                ConfirmationRecord(
                    experiment_id=best.experiment_id,
                    endpoint=name,
                    campaign_id=interactive_campaign,
                    engine_args=best.engine_args,
                    note=f"capacity x{best.capacity_ratio:.2f}",
                    dagster_run_id=context.run.run_id,
                )
            )
        adoption = Adoption(
            adopted=best is not None,
            best=best,
            review_needed=[
                v.proposal_id for v in verdicts.values() if v.confirmed and (v.lossy or v.correctness_unchecked)
            ],
        )
        context.add_output_metadata(
            {
                "adopted": best is not None,
                "new_engine_args": " ".join(best.engine_args) if best else "(unchanged)",
                "verdicts": table(
                    [
                        {
                            "proposal": k,
                            "verdict": v.verdict,
                            "confirmed": v.confirmed,
                            "ratio": v.capacity_ratio,
                            "lossy": v.lossy,
                            "outputs_checked": not v.correctness_unchecked,
                        }
                        for k, v in verdicts.items()
                    ]
                ),
            }
        )
        return adoption

    @dg.asset(
        key=key(name, "review_report"),
        group_name=name,
        ins={
            "candidate_runs": dg.AssetIn(key(name, "candidate_runs")),
            "confirmed_baseline": dg.AssetIn(key(name, "confirmed_baseline")),
            "baseline_runs": dg.AssetIn(key(name, "baseline_runs")),
            "noise_floor": dg.AssetIn(key(name, "noise_floor")),
        },
        description="For a person to approve: config diff, load curves before/after, noise floor, repeats, "
        "correctness evidence, lossy/lossless label, the command that reproduces it. Nothing is deployed.",
    )
    def review_report(
        context: dg.AssetExecutionContext,
        candidate_runs: dict[str, CandidateRun],
        confirmed_baseline: Adoption,
        baseline_runs: list[SweepResult],
        noise_floor: NoiseFloor,
    ) -> str:
        from research.interactive_review import interactive_report

        best = confirmed_baseline.best
        run = candidate_runs.get(best.proposal_id) if best else None
        text, plot = interactive_report(endpoint, best, run, baseline_runs, noise_floor)
        metadata = {"report": dg.MetadataValue.md(text)}
        if plot is not None:
            metadata["load_curves_before_after"] = md_image(plot, "before vs after")
        context.add_output_metadata(metadata)
        return text

    round_job = dg.define_asset_job(
        round_job_name(endpoint),
        selection=[key(name, k) for k in ("baseline_runs", "noise_floor", "load_curve", "diagnosis", "proposals")],
        description=f"Measure the working baseline of {name} again, diagnose it and propose the next candidates",
    )
    return dg.Definitions(
        assets=[diagnosis, proposals, candidate_runs, verdicts, confirmed_baseline, review_report], jobs=[round_job]
    )


def _drafter_markdown(batch: ProposalBatch) -> str:
    """The drafter rule's answer for this round: train one (why, at what acceptance it pays), or why not."""
    d = batch.drafter
    if d is None:
        return f"No drafter proposed: {batch.drafter_why_not or 'the rule did not apply'}."
    lines = [
        d.explanation,
        "",
        *[f"- {e}" for e in d.evidence],
        "",
        f"Break-even acceptance length: **{d.break_even_acceptance_length:.2f}** (k={d.k}).",
        f"Train one: `{d.command}` (or materialize the drafter assets).",
    ]
    return "\n".join(lines)
