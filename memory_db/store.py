"""MemoryStore: the one way the product writes to and reads from the research memory.

Writes never fail because another process is writing (see docs/memory.md, "Safe writes"):
1. ``record(...)`` validates the record, refuses secrets, and writes it as one JSON file into
   the spool directory ``<db>.spool/`` (temp file + fsync + atomic rename). From then on it is durable.
2. It then ingests the spool: under an exclusive flock on ``<db>.lock`` it opens the database
   read-write, upserts every spooled record by its id in one transaction (the newer write wins),
   closes the database and deletes the ingested files. If the lock or the database stays busy
   (e.g. an analyst holds the file read-write), the record simply waits in the spool; the next
   writer or reader ingests it.
3. Readers ingest first, then open the file read-only under a shared flock, briefly.
The database is closed between operations, so the plain ``duckdb -readonly`` CLI and polars can
read it while the product runs. Re-ingesting a file is harmless: ids make every write idempotent.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from specs.paths import memory_db_path
from memory_db import queries
from memory_db.guard import check_no_secrets
from memory_db.locking import LockTimeout, MemoryBusyError, connect, file_lock, readers_waiting
from memory_db.migrate import apply_migrations, current_version, latest_version
from memory_db.records import (
    RECORD_TYPES,
    AAEvidenceRecord,
    CampaignRecord,
    Conditions,
    ConfirmationRecord,
    DrafterRecord,
    EndpointRecord,
    ExperimentRecord,
    FindingRecord,
    OpenQuestion,
    RecipeResult,
    Record,
    RunRecord,
    SkipRecord,
    change_signature,
)

log = logging.getLogger(__name__)

MAX_BATCH = 2000  # spool files per transaction


class MemoryWriteError(OSError):
    """A record could not be made durable (the disk is full, the folder is read-only)."""


def last_good_path(path: str | Path) -> Path:
    """Where the copy of the memory as of its last successful write lives (``<file>.last-good``)."""
    path = Path(path)
    return path.with_name(path.name + ".last-good")


class MemoryStore:
    """The research memory in one DuckDB file (default :func:`specs.paths.memory_db_path`)."""

    def __init__(self, path: str | Path | None = None, *, timeout_s: float = 30.0):
        self.path = Path(memory_db_path() if path is None else path).expanduser().resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.spool_dir = self.path.with_name(self.path.name + ".spool")
        self.read_intent_path = self.path.with_name(self.path.name + ".readers")
        self._tmp_dir = self.spool_dir / ".tmp"
        self._rejected_dir = self.spool_dir / "rejected"
        self._tmp_dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        try:
            if self.schema_version() < latest_version():
                self.ensure_schema()
        except MemoryBusyError as exc:
            if not self.path.exists():
                raise
            log.warning("research memory busy; its schema is checked again at the next ingest: %s", exc)

    # ----------------------------------------------------------------- schema
    def schema_version(self) -> int:
        """Version of the schema in the file (0 when the file does not exist yet)."""
        if not self.path.exists():
            return 0
        with file_lock(self.lock_path, exclusive=False, timeout_s=self.timeout_s):
            con = connect(self.path, read_only=True, timeout_s=self.timeout_s)
            try:
                return current_version(con)
            finally:
                con.close()

    def ensure_schema(self) -> list[int]:
        """Create the file and apply pending migrations (under the write lock)."""
        with file_lock(self.lock_path, exclusive=True, timeout_s=self.timeout_s):
            con = connect(self.path, read_only=False, timeout_s=self.timeout_s)
            try:
                return apply_migrations(con)
            finally:
                con.close()

    # ----------------------------------------------------------------- writes
    def record(self, record: Record, *, ingest: bool = True) -> str:
        """Store one record durably (spool) and try to ingest it now; return its id.

        Never raises because the database is busy: the record then stays in the spool.
        Raises :class:`memory_db.guard.SecretInRecordError` if a field looks like a credential.
        """
        if record.TABLE not in RECORD_TYPES:
            raise TypeError(f"{type(record).__name__} is not a research-memory record")
        data = record.model_dump(mode="json")
        check_no_secrets(data, where=f"{record.TABLE}[{record.record_id}]")
        written_at_ns = time.time_ns()
        envelope = {"table": record.TABLE, "id": record.record_id, "written_at_ns": written_at_ns, "record": data}
        name = f"{written_at_ns:020d}-{os.getpid()}-{threading.get_ident() % 100000:05d}-{uuid.uuid4().hex[:12]}.json"
        tmp, spooled = self._tmp_dir / name, self.spool_dir / name
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(envelope, handle, separators=(",", ":"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, spooled)
        except OSError as exc:  # a full disk, a read-only folder: nothing half-written stays behind
            tmp.unlink(missing_ok=True)
            raise MemoryWriteError(
                f"research memory: {record.TABLE}[{record.record_id}] could not be written to {self.spool_dir}: "
                f"{exc.strerror or exc}; nothing of it was kept and the memory is unchanged. Free space there "
                "(or point AUTORESEARCH_HOME elsewhere) and run again"
            ) from exc
        if ingest:
            try:
                self.flush([spooled])
            except MemoryBusyError as exc:
                log.warning(
                    "research memory busy; record %s stays in the spool until the next ingest: %s",
                    record.record_id,
                    exc,
                )
        return record.record_id

    def record_endpoint(self, rec: EndpointRecord) -> str:
        return self.record(rec)

    def record_campaign(self, rec: CampaignRecord) -> str:
        return self.record(rec)

    def record_experiment(self, rec: ExperimentRecord) -> str:
        return self.record(rec)

    def record_confirmation(self, rec: ConfirmationRecord) -> str:
        return self.record(rec)

    def record_finding(self, rec: FindingRecord) -> str:
        return self.record(rec)

    def record_question(self, rec: OpenQuestion) -> str:
        return self.record(rec)

    def record_recipe_result(self, rec: RecipeResult) -> str:
        return self.record(rec)

    def record_run(self, rec: RunRecord) -> str:
        return self.record(rec)

    def record_aa_evidence(self, rec: AAEvidenceRecord) -> str:
        return self.record(rec)

    def record_drafter(self, rec: DrafterRecord) -> str:
        return self.record(rec)

    def drafters(self, endpoint: str | None = None) -> list[DrafterRecord]:
        """Drafters recorded for ``endpoint`` (every endpoint when None), newest first."""
        where, params = ("WHERE endpoint = ?", [endpoint]) if endpoint else ("", [])
        with self.connect() as con:
            result = con.execute(f"SELECT * FROM drafters {where} ORDER BY created_at DESC", params)
            cols = [d[0] for d in result.description]
            return [DrafterRecord.from_row(dict(zip(cols, row))) for row in result.fetchall()]

    def mark_drafters_stale(
        self, endpoint: str, model_signature: str | None = None, *, reason: str | None = None
    ) -> list[str]:
        """Mark stale the fresh drafters of ``endpoint`` that no longer hold: trained on another model
        than ``model_signature`` (model drift), or all of them with ``reason`` (traffic drift: their
        acceptance was measured on other traffic). Returns their ids."""
        marked = []
        for rec in self.drafters(endpoint):
            if rec.status != "fresh":
                continue
            if model_signature is not None and rec.model_signature != model_signature:
                why = f"model changed: {rec.model_signature} -> {model_signature}"
            elif model_signature is None and reason:
                why = reason
            else:
                continue
            self.record(rec.model_copy(update={"status": "stale", "stale_reason": why}))
            marked.append(rec.drafter_id)
        return marked

    def record_skip(
        self,
        *,
        endpoint: str,
        campaign_id: str,
        conditions: Conditions,
        technique: str,
        change: str | dict[str, str | None],
        prior: queries.PriorResult | None = None,
        reason: str | None = None,
        dagster_run_id: str | None = None,
    ) -> SkipRecord:
        """Record that a candidate was not run, and why (``reason`` defaults to the prior's)."""
        if reason is None and prior is None:
            raise ValueError("record_skip needs a reason or the prior result that justifies the skip")
        signature = change if isinstance(change, str) else change_signature(change)
        skip = SkipRecord(
            endpoint=endpoint,
            campaign_id=campaign_id,
            conditions=conditions,
            technique=technique,
            change_signature=signature,
            reason=reason or prior.reason,
            prior_experiment_id=prior.experiment_id if prior else None,
            prior_verdict=prior.verdict if prior else None,
            dagster_run_id=dagster_run_id,
        )
        self.record(skip)
        return skip

    def answer_question(
        self, question: OpenQuestion, answer: str, *, campaign_id: str | None = None, status: str = "answered"
    ) -> str:
        """Close an open question (same id, newer write wins)."""
        return self.record(
            question.model_copy(update={"status": status, "answer": answer, "answered_by_campaign_id": campaign_id})
        )

    # ---------------------------------------------------------------- ingest
    def pending(self) -> int:
        """Records waiting in the spool."""
        return sum(1 for _ in self.spool_dir.glob("*.json"))

    def ingest(self, timeout_s: float | None = None, *, lock_timeout_s: float | None = None) -> int:
        """Move the records spooled so far into the database; return how many files were ingested.

        One pass over what is in the spool when the lock is taken (in batches of MAX_BATCH), so a
        lock holder is never kept busy by writers that keep adding files.
        """
        timeout = self.timeout_s if timeout_s is None else timeout_s
        with file_lock(self.lock_path, exclusive=True, timeout_s=timeout if lock_timeout_s is None else lock_timeout_s):
            files = sorted(self.spool_dir.glob("*.json"))
            for start in range(0, len(files), MAX_BATCH):
                self._ingest_batch(files[start : start + MAX_BATCH], timeout)
            if files:
                self._keep_last_good()
            return len(files)

    @property
    def last_good_path(self) -> Path:
        return last_good_path(self.path)

    def _keep_last_good(self) -> None:
        """Copy the database, just written and closed (under the write lock, so whole), to its
        last-good copy: a file later corrupted (a disk fault, a foreign writer) loses nothing
        ingested before. Written beside it and renamed, so a copy is never half-written; a copy
        that cannot be made (a full disk) is logged and leaves the previous one in place."""
        target = self.last_good_path
        partial = target.with_name(target.name + ".partial")
        try:
            import shutil

            shutil.copyfile(self.path, partial)
            os.replace(partial, target)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            log.warning("research memory: last-good copy %s not refreshed: %s", target, exc)

    def flush(self, spooled: list[Path] | None = None) -> None:
        """Make sure the given spool files (default: all spooled so far) are in the database.

        Ingests them, or waits until another process's ingest has taken them, whichever comes
        first: a writer never queues for the lock only to find its record already stored by the
        lock holder's batch (with eight writers that shrank every batch to one record).
        Raises :class:`MemoryBusyError` after ``timeout_s``.
        """
        waiting = sorted(self.spool_dir.glob("*.json")) if spooled is None else list(spooled)
        deadline = time.monotonic() + self.timeout_s
        delay = 0.002
        while any(path.exists() for path in waiting):
            try:
                if spooled is not None and readers_waiting(self.read_intent_path):
                    raise LockTimeout("a reader is waiting; let it go first")  # readers ingest for us
                self.ingest(lock_timeout_s=0)
                return
            except LockTimeout:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 0.05)

    def _ingest_batch(self, files: list[Path], timeout_s: float) -> None:
        latest: dict[tuple[str, str], tuple[Path, dict[str, Any]]] = {}  # (table, id) -> newest write
        for path in files:
            try:
                envelope = json.loads(path.read_text(encoding="utf-8"))
                cls = RECORD_TYPES[envelope["table"]]
                row = cls.model_validate(envelope["record"]).to_row()
                row["written_at_ns"] = int(envelope["written_at_ns"])
            except Exception as exc:  # a corrupt or foreign file must not block the others
                self._reject(path, f"{type(exc).__name__}: {exc}")
                continue
            key = (cls.TABLE, row[cls.ID_FIELD])
            if key not in latest or row["written_at_ns"] >= latest[key][1]["written_at_ns"]:
                latest[key] = (path, row)
        if latest:
            con = connect(self.path, read_only=False, timeout_s=timeout_s, threads=1)
            try:
                apply_migrations(con)
                try:
                    _write_rows(con, [(table, row) for (table, _), (_, row) in latest.items()])
                except duckdb.Error:
                    # One bad row must not block the spool forever: write one by one, reject the failures.
                    for (table, _), (path, row) in latest.items():
                        try:
                            _write_rows(con, [(table, row)])
                        except duckdb.Error as exc:
                            self._reject(path, f"{type(exc).__name__}: {exc}")
            finally:
                con.close()
        for path in files:
            path.unlink(missing_ok=True)  # superseded duplicates too: the newest write is stored

    def _reject(self, path: Path, why: str) -> None:
        """Move a spool file that cannot be stored aside for a person to inspect."""
        self._rejected_dir.mkdir(exist_ok=True)
        os.replace(path, self._rejected_dir / path.name)
        log.error("research memory: spool file %s rejected (moved to %s): %s", path.name, self._rejected_dir, why)

    # ------------------------------------------------------------------ reads
    @contextmanager
    def connect(self, *, ingest: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived read-only connection (after ingesting pending records, if possible).

        While it waits, the reader holds a shared "reader intent" flock; writers that see it stop
        competing for the write lock (the reader ingests their records anyway), so a read is not
        starved by a stream of writes.
        """
        with ExitStack() as stack:
            with file_lock(self.read_intent_path, exclusive=False, timeout_s=self.timeout_s):
                if ingest:
                    try:
                        self.flush()
                    except MemoryBusyError as exc:
                        log.warning(
                            "research memory busy; reading without the %d pending records: %s", self.pending(), exc
                        )
                stack.enter_context(file_lock(self.lock_path, exclusive=False, timeout_s=self.timeout_s))
            con = connect(self.path, read_only=True, timeout_s=self.timeout_s)
            try:
                yield con
            finally:
                con.close()

    def query(self, sql: str, params: list[Any] | None = None) -> pl.DataFrame:
        """Run read-only SQL and return a polars DataFrame (empty frame for statements without rows)."""
        with self.connect() as con:
            result = con.execute(sql, params or [])
            if result.description is None:
                return pl.DataFrame()
            return result.pl()

    # -------------------------------------------------------- loop queries
    def prior_decision(
        self,
        endpoint: str,
        change: str | dict[str, str | None],
        conditions: Conditions,
        *,
        same_endpoint_only: bool = False,
    ) -> queries.PriorResult | None:
        with self.connect() as con:
            return queries.prior_decision(con, endpoint, change, conditions, same_endpoint_only=same_endpoint_only)

    def confirmed_improvements(self, endpoint: str) -> list[queries.ConfirmedImprovement]:
        with self.connect() as con:
            return queries.confirmed_improvements(con, endpoint)

    def latest_confirmed_engine_args(self, endpoint: str) -> list[str] | None:
        with self.connect() as con:
            return queries.latest_confirmed_engine_args(con, endpoint)

    def open_questions(self, endpoint: str, status: str = "open") -> list[OpenQuestion]:
        with self.connect() as con:
            return queries.open_questions(con, endpoint, status=status)

    def findings_for_bottleneck(self, bottleneck: str, exclude_endpoint: str | None = None) -> list[FindingRecord]:
        with self.connect() as con:
            return queries.findings_for_bottleneck(con, bottleneck, exclude_endpoint=exclude_endpoint)

    def technique_outcomes(self, bottleneck: str, exclude_endpoint: str | None = None) -> pl.DataFrame:
        with self.connect() as con:
            return queries.technique_outcomes(con, bottleneck, exclude_endpoint=exclude_endpoint)

    def experiments(self, endpoint: str | None = None, campaign_id: str | None = None) -> list[ExperimentRecord]:
        with self.connect() as con:
            return queries.experiments(con, endpoint=endpoint, campaign_id=campaign_id)

    def skips(self, campaign_id: str) -> list[SkipRecord]:
        with self.connect() as con:
            return queries.skips(con, campaign_id)

    def aa_evidence(self, endpoint: str, protocol: str, exclude_campaign: str | None = None) -> list[AAEvidenceRecord]:
        with self.connect() as con:
            return queries.aa_evidence(con, endpoint, protocol, exclude_campaign)


def _write_rows(con: duckdb.DuckDBPyConnection, rows: list[tuple[str, dict[str, Any]]]) -> None:
    """Upsert ``(table, row)`` pairs in one transaction."""
    by_table: dict[str, list[dict[str, Any]]] = {}
    for table, row in rows:
        by_table.setdefault(table, []).append(row)
    con.execute("BEGIN TRANSACTION")
    try:
        for table, table_rows in by_table.items():
            _upsert(con, table, RECORD_TYPES[table].ID_FIELD, table_rows)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


def _upsert(con: duckdb.DuckDBPyConnection, table: str, id_column: str, rows: list[dict[str, Any]]) -> None:
    """Insert rows; an existing id is replaced only by a write at least as new (idempotent re-ingest).

    Rows go in as one registered polars frame (one statement; DuckDB's executemany costs ~20 ms a row).
    """
    types = dict(
        con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_name = ?",
            [table],
        ).fetchall()
    )
    columns = list(rows[0])
    unknown = [c for c in columns if c not in types]
    if unknown:
        raise RuntimeError(f"table {table} has no columns {unknown}; is a migration missing?")
    frame = pl.DataFrame(rows, infer_schema_length=None)
    names = ", ".join(f'"{c}"' for c in columns)
    select = ", ".join(f'CAST("{c}" AS {types[c]})' for c in columns)
    updates = ", ".join(f'"{c}" = excluded."{c}"' for c in columns if c != id_column)
    con.register("incoming_records", frame)
    try:
        con.execute(
            f"INSERT INTO {table} ({names}) SELECT {select} FROM incoming_records "
            f'ON CONFLICT ("{id_column}") DO UPDATE SET {updates} '
            f"WHERE excluded.written_at_ns >= {table}.written_at_ns"
        )
    finally:
        con.unregister("incoming_records")
