"""Turn the YAML definitions into Dagster definitions: one asset group per endpoint.

Each stage module in ``assets/`` exposes ``build(endpoint, definitions) -> dg.Definitions`` (its
assets and jobs); this factory only merges them per endpoint, so adding a stage is adding a module
to STAGES. Sensors are built per endpoint from ``sensors/`` and target the jobs the stages named.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets import campaign as campaign_stage
from assets import engine as engine_stage
from assets import experiment as experiment_stage
from assets import measurement as measurement_stage
from assets import pareto as pareto_stage
from assets import replay as replay_stage
from assets import research as research_stage
from autoresearch import paths
from autoresearch.config import DefinitionSet, EndpointSpec, load_definitions
from dagster_project.resources import ResearchMemory
from sensors import continuation as continuation_sensors
from sensors import drift as drift_sensors

STAGES = [engine_stage, replay_stage, measurement_stage, experiment_stage, research_stage, campaign_stage,
          pareto_stage]


def endpoint_definitions(endpoint: EndpointSpec, definitions: DefinitionSet, definitions_dir: Path) -> dg.Definitions:
    """One endpoint's asset group: every stage's definitions, and the sensors that start its jobs."""
    stages = dg.Definitions.merge(*(stage.build(endpoint, definitions) for stage in STAGES))
    jobs = {job.name: job for job in stages.jobs or []}
    sensors = [
        *drift_sensors.build(endpoint, definitions_dir, jobs[campaign_stage.job_name(endpoint)],
                             campaign_stage.campaign_partitions(endpoint)),
        *continuation_sensors.build(endpoint, campaign_stage.campaign_for(definitions, endpoint),
                                    jobs[research_stage.round_job_name(endpoint)]),
    ]
    return dg.Definitions.merge(stages, dg.Definitions(sensors=sensors))


def build_definitions(definitions_dir: Path | None = None) -> dg.Definitions:
    definitions_dir = Path(definitions_dir or paths.definitions_dir())
    definitions = load_definitions(definitions_dir)
    resources = dg.Definitions(resources={"memory": ResearchMemory(path=str(paths.memory_db_path())),
                                          experiment_stage.PIPES_CLIENT: dg.PipesSubprocessClient()})
    return dg.Definitions.merge(
        *(endpoint_definitions(endpoint, definitions, definitions_dir) for endpoint in definitions.endpoints.values()),
        resources)
