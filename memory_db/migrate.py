"""Versioned schema migrations: ``migrations/NNN_name.sql`` applied in order, recorded in ``schema_version``.

A migration is applied once, inside one transaction, by whichever process holds the write lock
first; the others see its version and skip it. Never edit an applied migration: add the next one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path


def migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise ValueError(f"{path}: migration files must be named NNN_name.sql (lower case)")
        found.append(Migration(int(match.group(1)), match.group(2), path))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"{directory}: two migrations share a version number: {versions}")
    return found


def latest_version(directory: Path = MIGRATIONS_DIR) -> int:
    return max((m.version for m in migrations(directory)), default=0)


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main' AND table_name = 'schema_version'"
    ).fetchone()[0]
    if not exists:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]


def apply_migrations(con: duckdb.DuckDBPyConnection, directory: Path = MIGRATIONS_DIR) -> list[int]:
    """Apply every migration newer than the database's version; return the versions applied.

    The caller holds the write lock. Raises if the database is newer than this code.
    """
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )
    have = current_version(con)
    known = migrations(directory)
    newest = max((m.version for m in known), default=0)
    if have > newest:
        raise RuntimeError(
            f"research memory schema version {have} is newer than this code knows ({newest}); "
            "upgrade autoresearch before writing to it"
        )
    applied: list[int] = []
    for migration in known:
        if migration.version <= have:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(migration.path.read_text())
            con.execute(
                "INSERT INTO schema_version VALUES (?, ?, now()::TIMESTAMP)", [migration.version, migration.name]
            )
            con.execute("COMMIT")
        except Exception as exc:
            con.execute("ROLLBACK")
            raise RuntimeError(f"migration {migration.path.name} failed: {exc}") from exc
        applied.append(migration.version)
    return applied
