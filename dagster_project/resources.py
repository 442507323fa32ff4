"""Dagster resources: thin configurable handles onto the plain modules."""

from __future__ import annotations

import dagster as dg


class ResearchMemory(dg.ConfigurableResource):
    """The shared research memory (a DuckDB file; see memory_db)."""

    path: str

    def store(self):
        from memory_db.store import MemoryStore

        return MemoryStore(self.path)
