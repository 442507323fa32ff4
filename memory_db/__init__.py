"""The shared research memory in DuckDB: schema, migrations, safe writes, queries (no Dagster imports).

Start with :class:`MemoryStore` (writes and loop queries), :func:`query` (analyst SQL -> polars)
and :mod:`memory_db.export` (markdown pages). Design and views: docs/memory.md.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from memory_db.guard import SecretInRecordError, check_no_secrets
from memory_db.locking import MemoryBusyError
from memory_db.queries import ConfirmedImprovement, PriorResult
from memory_db.records import (
    CampaignRecord,
    Conditions,
    ConfirmationRecord,
    DrafterRecord,
    EndpointRecord,
    ExperimentRecord,
    FindingRecord,
    OpenQuestion,
    RecipeResult,
    RunRecord,
    SkipRecord,
    change_signature,
    stable_id,
)
from memory_db.store import MemoryStore


def query(sql: str, path: str | Path | None = None, params: list | None = None) -> pl.DataFrame:
    """Read-only SQL over the research memory (default file: specs.paths.memory_db_path())."""
    return MemoryStore(path).query(sql, params)


__all__ = [
    "CampaignRecord",
    "Conditions",
    "ConfirmationRecord",
    "ConfirmedImprovement",
    "DrafterRecord",
    "EndpointRecord",
    "ExperimentRecord",
    "FindingRecord",
    "MemoryBusyError",
    "MemoryStore",
    "OpenQuestion",
    "PriorResult",
    "RecipeResult",
    "RunRecord",
    "SecretInRecordError",
    "SkipRecord",
    "change_signature",
    "check_no_secrets",
    "query",
    "stable_id",
]
