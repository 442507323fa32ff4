"""Dagster resources every endpoint's assets share."""

from __future__ import annotations

import dagster as dg

from assets.experiment import PIPES_CLIENT
from specs import paths
from assets.io_manager import TypedIOManager


def resources() -> dg.Definitions:
    """The typed IO manager (every asset value) and the experiment unit's launcher. The research
    memory is no resource: assets, the CLI and headless campaigns all open it at paths.memory_db_path()."""
    return dg.Definitions(
        resources={
            "io_manager": TypedIOManager(base_dir=str(paths.home() / "assets")),
            PIPES_CLIENT: dg.PipesSubprocessClient(),
        }
    )
