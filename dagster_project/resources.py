"""Dagster resources: thin configurable handles onto the plain modules."""

from __future__ import annotations

import dagster as dg

from assets.experiment import PIPES_CLIENT
from autoresearch import paths
from dagster_project.io_manager import TypedIOManager


class ResearchMemory(dg.ConfigurableResource):
    """The shared research memory (a DuckDB file; see memory_db)."""

    path: str

    def store(self):
        from memory_db.store import MemoryStore

        return MemoryStore(self.path)


def resources() -> dg.Definitions:
    """The resources every endpoint's assets share: the typed IO manager, the research memory and the
    experiment unit's launcher."""
    return dg.Definitions(resources={"io_manager": TypedIOManager(base_dir=str(paths.home() / "assets")),
                                     "memory": ResearchMemory(path=str(paths.memory_db_path())),
                                     PIPES_CLIENT: dg.PipesSubprocessClient()})
