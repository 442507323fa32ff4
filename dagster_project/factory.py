"""One endpoint's asset group: every stage's definitions, and the sensors that start its jobs.

Each stage module in ``assets/`` exposes ``build(endpoint, definitions) -> dg.Definitions`` (its
assets and jobs); this factory only merges them, so adding a stage is adding a module to STAGES.
The ``Endpoint`` component type (dagster_project.lib) calls it for every endpoint's defs.yaml.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from assets import campaign as campaign_stage
from assets import drafter as drafter_stage
from assets import engine as engine_stage
from assets import experiment as experiment_stage
from assets import measurement as measurement_stage
from assets import pareto as pareto_stage
from assets import replay as replay_stage
from assets import research as research_stage
from assets.common import mark_unrunnable
from specs.config import DefinitionSet, EndpointSpec
from sensors import continuation as continuation_sensors
from sensors import drift as drift_sensors

STAGES = [
    engine_stage,
    replay_stage,
    measurement_stage,
    experiment_stage,
    research_stage,
    campaign_stage,
    pareto_stage,
    drafter_stage,
]


def endpoint_definitions(
    endpoint: EndpointSpec, definitions: DefinitionSet, reread: Callable[[], EndpointSpec]
) -> dg.Definitions:
    """``reread`` reads the endpoint's YAML afresh (the drift sensors compare it on every tick)."""
    stages = mark_unrunnable(dg.Definitions.merge(*(stage.build(endpoint, definitions) for stage in STAGES)), endpoint)
    jobs = {job.name: job for job in stages.jobs or []}
    sensors = [
        *drift_sensors.build(
            endpoint, reread, jobs[campaign_stage.job_name(endpoint)], campaign_stage.campaign_partitions(endpoint)
        ),
        *continuation_sensors.build(
            endpoint, definitions.campaign_of(endpoint.name), jobs[research_stage.round_job_name(endpoint)]
        ),
    ]
    return dg.Definitions.merge(stages, dg.Definitions(sensors=sensors))
