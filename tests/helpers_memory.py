"""What the research-memory tests build again and again (tests/test_memory_*.py, tests/test_drafter*.py):
an empty memory, the experiment record every test varies, and the duckdb command line.

The ``store`` fixture (tests/conftest.py) is :func:`memory_store` on the test's tmp_path.
"""

from __future__ import annotations

import shutil
import sys
from datetime import datetime
from pathlib import Path

from memory_db import Conditions, ExperimentRecord, MemoryStore

T0 = datetime(2026, 11, 1, 12, 0, 0)
CONDITIONS = Conditions(model="smollm2-135m", engine="vllm", engine_version="0.32.0", workload_signature="wl")


def memory_store(folder: Path, *, timeout_s: float = 30.0) -> MemoryStore:
    """An empty research memory, ``folder/memory.duckdb`` (the constructor applies every migration)."""
    return MemoryStore(folder / "memory.duckdb", timeout_s=timeout_s)


def experiment(**fields) -> ExperimentRecord:
    """A decided experiment on the ``chat`` endpoint (``--max-num-seqs 64``, better by 1.2x); ``fields``
    replace any of it."""
    return ExperimentRecord(
        **{
            "endpoint": "chat",
            "campaign_id": "chat-c1",
            "conditions": CONDITIONS,
            "bottleneck": "queueing",
            "technique": "max_num_seqs",
            "change": {"--max-num-seqs": "64"},
            "verdict": "better",
            "capacity_ratio": 1.2,
            "noise_threshold": 0.05,
            **fields,
        }
    )


def duckdb_cli() -> str | None:
    """The duckdb command line, when installed (``pip install duckdb-cli`` puts it next to python)."""
    beside = Path(sys.executable).with_name("duckdb")
    return str(beside) if beside.exists() else shutil.which("duckdb")
