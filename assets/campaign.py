"""Campaign stage: the whole research loop as one partitioned asset (one partition per campaign).

Partitions are added by hand in the UI, by ``autoresearch`` or by the drift sensors; each one
runs (or resumes) a campaign headless through research.campaign and records into memory.
"""

import dagster as dg

from assets.common import key, md_image, refuse_unrunnable, table
from autoresearch.config import DefinitionSet, EndpointSpec
from research.campaign import CampaignOutcome
from dagster_project.pools import campaign_for, pool_for


def campaign_partitions(endpoint: EndpointSpec) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=f"{endpoint.name}__campaigns")


def job_name(endpoint: EndpointSpec) -> str:
    """The job that runs one campaign partition (the drift sensors start it)."""
    return f"{endpoint.name}__campaign_job"


def build(endpoint: EndpointSpec, definitions: DefinitionSet) -> dg.Definitions:
    name = endpoint.name
    partitions = campaign_partitions(endpoint)
    settings = campaign_for(definitions, endpoint)
    campaign_key = key(name, "campaign")

    @dg.asset(key=campaign_key, group_name=name, partitions_def=partitions, pool=pool_for(endpoint),
              deps=[key(name, "replay_pool")], kinds={endpoint.engine.kind, "duckdb"},
              description=f"A research campaign on {name}: baseline and noise floor, diagnosis, proposals, "
              f"candidates with verdicts, confirmed baselines, review report (settings: {settings.name}). "
              "Resumable: a re-run skips finished experiments.")
    def campaign(context: dg.AssetExecutionContext) -> CampaignOutcome:
        refuse_unrunnable(endpoint)
        from autoresearch.workflows import run_campaign

        outcome = run_campaign(settings, endpoint, partition=context.partition_key, progress=context.log.info)
        metadata = {
            "end_reason": outcome.end_reason or "",
            "reference_capacity_rps": outcome.reference_capacity,
            "best_capacity_rps": outcome.best_capacity,
            "total_gain": outcome.total_gain,
            "best_engine_args": " ".join(outcome.best_args),
            "experiments": table([{"run": outcome.experiments_run, "skipped": outcome.experiments_skipped,
                                      "resumed": outcome.resumed, "gpu_hours": outcome.gpu_hours_used}]),
            "open_questions": dg.MetadataValue.md("\n".join(f"- {q}" for q in outcome.open_questions) or "none"),
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

    job = dg.define_asset_job(job_name(endpoint), selection=[campaign_key],
                              description=f"Run one campaign partition of {name}")
    return dg.Definitions(assets=[campaign], jobs=[job])
