"""Turn the YAML definitions into Dagster definitions: one asset group per endpoint.

Each stage module in ``assets/`` exposes ``build(endpoint) -> list`` of assets/checks; this
factory only loops over endpoints and stages, so adding a stage is adding a module here.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets import engine as engine_stage
from assets import measurement as measurement_stage
from assets import replay as replay_stage
from autoresearch import paths
from autoresearch.config import DefinitionSet, load_definitions
from dagster_project.resources import ResearchMemory

STAGES = [engine_stage, replay_stage, measurement_stage]


def endpoint_definitions(definitions: DefinitionSet) -> list:
    built: list = []
    for endpoint in definitions.endpoints.values():
        for stage in STAGES:
            built.extend(stage.build(endpoint))
    return built


def build_definitions(definitions_dir: Path | None = None) -> dg.Definitions:
    definitions = load_definitions(definitions_dir or paths.definitions_dir())
    built = endpoint_definitions(definitions)
    checks = [d for d in built if isinstance(d, dg.AssetChecksDefinition)]
    assets = [d for d in built if isinstance(d, (dg.AssetsDefinition, dg.AssetSpec)) and d not in checks]
    jobs = [d for d in built if type(d).__name__ in ("JobDefinition", "UnresolvedAssetJobDefinition")]
    sensors = [d for d in built if isinstance(d, dg.SensorDefinition)]
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        sensors=sensors,
        resources={"memory": ResearchMemory(path=str(paths.memory_db_path()))},
    )
