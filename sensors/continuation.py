"""Continuation: a newly confirmed baseline requests the next research round while budget remains.

The round re-measures the new working baseline (read from the research memory), diagnoses it
and proposes the next candidates; ``max_rounds`` of the endpoint's campaign settings bounds it.
A confirmed baseline recorded by a campaign (assets/campaign_record.py) starts nothing: the
campaign runs its own rounds, and a second loop beside it would measure on the same host.
"""

import dagster as dg

from assets.campaign_record import RECORDED_BY
from assets.common import key
from specs.config import CampaignSpec, EndpointSpec


def build(endpoint: EndpointSpec, settings: CampaignSpec, round_job) -> list:
    name = endpoint.name

    @dg.asset_sensor(
        asset_key=key(name, "confirmed_baseline"),
        job=round_job,
        name=f"{name}__continuation",
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"After {name}/confirmed_baseline adopts a change, start the next research round "
        f"(at most {settings.max_rounds} rounds).",
    )
    def continuation(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry):
        materialization = asset_event.asset_materialization
        if materialization and RECORDED_BY in materialization.metadata:  # a campaign runs its own rounds
            return dg.SkipReason(
                f"recorded by campaign {materialization.metadata[RECORDED_BY].value}, which "
                "continues by itself: no interactive round is started beside it"
            )
        adopted = materialization.metadata.get("adopted") if materialization else None
        if not (adopted and adopted.value):
            return dg.SkipReason("the latest confirmed_baseline adopted nothing: the loop rests until new evidence")
        adopted_rounds = sum(
            1
            for record in context.instance.fetch_materializations(key(name, "confirmed_baseline"), limit=1000).records
            if (m := record.asset_materialization)
            and m.metadata.get("adopted")
            and m.metadata["adopted"].value
            and RECORDED_BY not in m.metadata
        )
        if adopted_rounds >= settings.max_rounds:
            return dg.SkipReason(f"{adopted_rounds} rounds adopted a change: max_rounds={settings.max_rounds} reached")
        return dg.RunRequest(
            run_key=f"round-after-{asset_event.storage_id}",
            tags={"autoresearch/trigger": "continuation", "autoresearch/round": str(adopted_rounds + 1)},
        )

    return [continuation]
