"""Turn the YAML definitions into Dagster definitions: one asset group per endpoint.

Each stage module in ``assets/`` exposes ``build(endpoint, definitions) -> list`` of assets,
checks and jobs; this factory only loops over endpoints and stages, so adding a stage is adding
a module to STAGES. Sensors are built per endpoint from ``sensors/``.
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
from autoresearch.config import DefinitionSet, load_definitions
from dagster_project.resources import ResearchMemory
from sensors import continuation as continuation_sensors
from sensors import drift as drift_sensors

STAGES = [engine_stage, replay_stage, measurement_stage, experiment_stage, research_stage, campaign_stage,
          pareto_stage]


def endpoint_definitions(definitions: DefinitionSet, definitions_dir: Path) -> list:
    built: list = []
    for endpoint in definitions.endpoints.values():
        for stage in STAGES:
            built.extend(stage.build(endpoint, definitions))
        jobs = {d.name: d for d in built if type(d).__name__ in ("JobDefinition", "UnresolvedAssetJobDefinition")}
        built.extend(drift_sensors.build(endpoint, definitions_dir, jobs[f"{endpoint.name}__campaign_job"],
                                         campaign_stage.campaign_partitions(endpoint)))
        built.extend(continuation_sensors.build(endpoint, campaign_stage.campaign_for(definitions, endpoint),
                                                jobs[f"{endpoint.name}__research_round"]))
    return built


def build_definitions(definitions_dir: Path | None = None) -> dg.Definitions:
    definitions_dir = Path(definitions_dir or paths.definitions_dir())
    built = endpoint_definitions(load_definitions(definitions_dir), definitions_dir)
    checks = [d for d in built if isinstance(d, dg.AssetChecksDefinition)]
    assets = [d for d in built if isinstance(d, (dg.AssetsDefinition, dg.AssetSpec)) and d not in checks]
    jobs = [d for d in built if type(d).__name__ in ("JobDefinition", "UnresolvedAssetJobDefinition")]
    sensors = [d for d in built if isinstance(d, dg.SensorDefinition)]
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        sensors=sensors,
        resources={"memory": ResearchMemory(path=str(paths.memory_db_path())),
                   experiment_stage.PIPES_CLIENT: dg.PipesSubprocessClient()},
    )
