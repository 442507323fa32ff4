"""Cross-process coordination for one DuckDB file: a sidecar flock and lock-aware connects.

DuckDB lets one process open a file read-write, or many open it read-only, never both. Our
processes take an advisory ``fcntl.flock`` on ``<db>.lock`` first (exclusive to write, shared to
read), so they queue instead of failing. Processes outside the product (the ``duckdb`` CLI,
polars, a notebook) do not take that lock, so connects still retry DuckDB's own lock error
until a deadline.
"""

from __future__ import annotations

import fcntl
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb


class MemoryBusyError(TimeoutError):
    """The research memory stayed locked by someone else for longer than the timeout."""


class LockTimeout(MemoryBusyError):
    """The sidecar flock was not free in time (raised before anything was done under it)."""


@contextmanager
def file_lock(path: Path, *, exclusive: bool, timeout_s: float) -> Iterator[None]:
    """Hold an advisory flock on ``path``; poll with jitter so a timeout is possible."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        deadline = time.monotonic() + timeout_s
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, mode)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    kind = "write" if exclusive else "read"
                    raise LockTimeout(f"could not take the {kind} lock {path} within {timeout_s:.0f}s") from None
                time.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _is_lock_conflict(exc: Exception) -> bool:
    text = str(exc).lower()
    return "lock" in text or "conflicting" in text


def connect(path: Path, *, read_only: bool, timeout_s: float, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """Open the database, retrying while another process (e.g. an analyst's CLI) holds DuckDB's lock.

    ``threads=1`` suits the short write transactions: less start-up work on a busy host.
    """
    config = {"threads": threads} if threads else {}
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.IOException as exc:
            if not _is_lock_conflict(exc) or time.monotonic() >= deadline:
                if _is_lock_conflict(exc):
                    raise MemoryBusyError(
                        f"{path} is held open by another process ({exc}); analysts should open it with "
                        "`duckdb -readonly` so the product can keep writing"
                    ) from exc
                raise
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 0.2)


def readers_waiting(path: Path) -> bool:
    """True while some process holds the reader-intent lock ``path`` (see MemoryStore.connect)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
