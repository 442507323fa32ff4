"""Campaign stage: the whole research loop as one partitioned asset (one partition per campaign).

Partitions are added by hand in the UI, by ``autoresearch campaign run`` (the partition is the
campaign's name; dagster_project.headless) or by the drift sensors; each one runs (or resumes) a
campaign headless through research.campaign, records into memory, and records the research assets
it measured in this run (assets/campaign_record.py), so the UI shows what the campaign did.
"""

import dagster as dg

from assets.campaign_record import record_campaign_assets, record_pool_build
from assets.common import key, md_image, refuse_unrunnable, table
from specs.config import DefinitionSet, EndpointSpec
from research.campaign import CampaignOutcome
from assets.pools import pool_for


class CampaignRun(dg.Config):
    """How to run the partition's campaign. The UI's defaults run the endpoint's declared campaign;
    ``autoresearch campaign run`` sets the rest from its options."""

    campaign: str | None = None  # a declared campaign of this endpoint (default: its first)
    proposer: str | None = None  # rules | llm (default: the campaign's)
    from_declared: bool = False  # start from the YAML configuration, not the last confirmed one
    stop_after_s: float | None = None  # pause (resumable) after this long
    echo: bool = False  # progress also on this process's stdout, as plain lines (the CLI)


def campaign_partitions(endpoint: EndpointSpec) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"{endpoint.name}__campaigns")


def job_name(endpoint: EndpointSpec) -> str:
    """The job that runs one campaign partition (the drift sensors start it)."""
    return f"{endpoint.name}__campaign_job"


def build(endpoint: EndpointSpec, definitions: DefinitionSet) -> dg.Definitions:
    name = endpoint.name
    partitions = campaign_partitions(endpoint)
    settings = definitions.campaign_of(endpoint.name)
    campaign_key = key(name, "campaign")

    @dg.asset(
        key=campaign_key,
        group_name=name,
        partitions_def=partitions,
        pool=pool_for(endpoint),
        required_resource_keys={"io_manager"},
        deps=[key(name, "replay_pool")],
        kinds={endpoint.engine.kind, "duckdb"},
        description=f"A research campaign on {name}: baseline and noise floor, diagnosis, proposals, "
        f"candidates with verdicts, confirmed baselines, review report (settings: {settings.name}). "
        "Resumable: a re-run skips finished experiments.",
    )
    def campaign(context: dg.AssetExecutionContext, config: CampaignRun) -> CampaignOutcome:
        refuse_unrunnable(endpoint)
        from autoresearch.workflows import build_replay_pool, campaign_dir, launch_campaign, pool_path
        from research.state import StateStore

        chosen = settings if config.campaign in (None, settings.name) else definitions.campaigns.get(config.campaign)
        if chosen is None or chosen.endpoint != name:
            raise dg.Failure(f"campaign {config.campaign!r} is not a declared campaign of {name}", allow_retries=False)

        def progress(message: str) -> None:
            if config.echo:
                print(message, flush=True)
            context.log.info(message)

        io = context.resources.io_manager
        if not pool_path(endpoint).exists():  # the campaign's first step: its pool
            progress(f"building the replay pool of {name}")
            build = build_replay_pool(endpoint)
            record_pool_build(context, endpoint, build, io)
        outcome = launch_campaign(
            chosen,
            endpoint,
            proposer=config.proposer,
            partition=context.partition_key,
            from_declared=config.from_declared,
            stop_after_s=config.stop_after_s,
            progress=progress,
            run_id=context.run.run_id,
        )
        state = StateStore(campaign_dir(chosen, context.partition_key), chosen.name).load()
        tables = record_campaign_assets(context, endpoint, state, outcome, io)
        from research.verdict_mde import console_line

        metadata = {
            "end_reason": outcome.end_reason or "",
            "reference_capacity_rps": outcome.reference_capacity,
            "best_capacity_rps": outcome.best_capacity,
            "total_gain": outcome.total_gain,
            "judged_gain": (
                outcome.judged_gain.describe()
                if outcome.judged_gain
                else "not stated: an adopted verdict has no interval"
                if outcome.adopted_experiments
                else "none adopted"
            ),
            # the campaign's headline MDE: the verdicts' median with its range, never a floor's
            "verdict_mde": console_line(outcome.verdict_mde) if outcome.verdict_mde else "not measured",
            "best_engine_args": " ".join(outcome.best_args),
            "experiments": table(
                [
                    {
                        "run": outcome.experiments_run,
                        "skipped": outcome.experiments_skipped,
                        "resumed": outcome.resumed,
                        "gpu_hours": outcome.gpu_hours_used,
                    }
                ]
            ),
            "open_questions": dg.MetadataValue.md("\n".join(f"- {q}" for q in outcome.open_questions) or "none"),
            "campaign": chosen.name,
            "campaign_id": outcome.campaign_id,
            "finished": outcome.finished,
            **tables,
        }
        if outcome.report_path:
            from pathlib import Path

            report = Path(outcome.report_path)
            metadata["review_report"] = dg.MetadataValue.path(str(report))
            plots = sorted(report.parent.glob("*.png"))
            if plots:
                metadata["load_curves_before_after"] = md_image(plots[0], "before vs after")
        context.add_output_metadata(metadata)
        return outcome

    job = dg.define_asset_job(
        job_name(endpoint), selection=[campaign_key], description=f"Run one campaign partition of {name}"
    )
    return dg.Definitions(assets=[campaign], jobs=[job])
