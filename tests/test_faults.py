"""The fault matrix (docs/reliability.md): each fault injected for real, and what is kept.

A full disk is a real tmpfs filled to the last byte; a kill is a real SIGKILL of a process inside a
DuckDB transaction; a hung engine, 500s and broken SSE come from the simulated engine
(loadgen.simengine, the harness's measuring instrument) over real sockets, measured by the real
open-loop client and sweep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from specs.config import SLASpec
from loadgen import simengine
from memory_db import MemoryStore
from memory_db.records import FindingRecord
from memory_db.store import MemoryWriteError

REPO = Path(__file__).resolve().parents[1]


def _finding(i: int) -> FindingRecord:
    return FindingRecord(finding_id=f"f{i:03d}", endpoint="faults", bottleneck="none", text=f"finding number {i}")


def _findings(path: Path) -> pl.DataFrame:
    return MemoryStore(path).query("SELECT finding_id, text FROM findings ORDER BY finding_id")


# --- a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 8 MiB tmpfs (root only: CI and these machines run tests as root)."""
    if os.geteuid() != 0:
        pytest.fail("the full-disk fault needs root to mount a tmpfs (CI and this project's machines run as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_refuses_the_write_keeps_the_memory_readable_and_leaves_nothing_half_written(small_disk: Path):
    from research.state import CampaignState, StateStore

    db = small_disk / "memory.duckdb"
    MemoryStore(db).record(_finding(0))
    states = StateStore(small_disk / "campaign", "faults")
    states.save(CampaignState(campaign="faults", endpoint="faults", campaign_id="faults-1"))
    before_state = states.path.read_bytes()
    filler = _fill(small_disk)

    with pytest.raises(MemoryWriteError, match="No space left on device; nothing of it was kept"):
        MemoryStore(db).record(_finding(1))
    with pytest.raises(OSError):
        states.save(CampaignState(campaign="faults", endpoint="faults", campaign_id="faults-2"))
    assert states.path.read_bytes() == before_state  # the last good state, whole
    # StateStore's temp files start with a dot; the spool's live in memory.duckdb.spool/.tmp
    leftovers = [p for p in small_disk.rglob("*") if p.is_file() and (p.name.startswith(".") or p.suffix == ".tmp")]
    spool_tmp = [p for p in (small_disk / "memory.duckdb.spool").rglob("*") if p.is_file()]
    assert leftovers == [] and spool_tmp == []  # no half-written record or state file
    assert _findings(db)["finding_id"].to_list() == ["f000"]  # the memory stays readable

    filler.unlink()  # space again: the same write goes through
    MemoryStore(db).record(_finding(1))
    assert _findings(db)["finding_id"].to_list() == ["f000", "f001"]


def test_a_full_disk_during_a_sweep_makes_the_step_invalid_and_leaves_no_half_written_records(
    small_disk: Path, definitions
):
    """The sweep's request records go to a full file system: the step is invalid with the cause (its
    evidence cannot be kept), and no partial Parquet file is left behind."""
    from loadgen.sweep import run_sweep

    spec = definitions.endpoint("tiny_random")
    spec = spec.model_copy(
        update={
            "sla": SLA,
            "sweep": spec.sweep.model_copy(
                update={
                    "rates": [4.0],
                    "step_duration_s": 2.0,
                    "refine_steps": 0,
                    "warmup_requests": 0,
                    "warm_prefix_groups": 0,
                    "drain_s": 2.0,
                    "repeats": 1,
                }
            ),
        }
    )
    pool = pl.DataFrame({"request_id": [str(i) for i in range(20)], "body": [json.dumps(BODIES[0])] * 20})
    records = small_disk / "records"
    records.mkdir()
    _fill(small_disk)
    with simengine.start(simengine.ServiceModel()) as engine:
        result = run_sweep(engine, pool, spec, repeats_label="full", check_client=False, records_dir=records)
    assert result.validity == "invalid"
    step = result.steps[0]
    assert step.validity == "invalid" and "request records could not be written" in step.invalid_reason
    assert "No space left on device" in step.invalid_reason, step.invalid_reason
    assert step.records_path is None and list(records.iterdir()) == []


# --- a SIGKILL inside a memory write -----------------------------------------------------------------

WRITER = """
import os, sys, time
sys.path[:0] = [{repo!r}, {tests!r}]
import memory_db.store as store
from test_faults import _finding
kill_at = int(os.environ.get("KILL_AT", "-1"))
upsert, writes = store._upsert, [0]
def slow_upsert(con, table, id_column, rows):
    upsert(con, table, id_column, rows)
    writes[0] += 1
    if writes[0] == kill_at:  # inside BEGIN ... COMMIT: the row is written, not committed
        open(os.environ["MARKER"], "w").close()
        time.sleep(60)
store._upsert = slow_upsert
memory = store.MemoryStore(sys.argv[1])
for i in range(int(sys.argv[2])):
    memory.record(_finding(i))
"""


def test_a_sigkill_inside_a_memory_write_keeps_every_earlier_record_and_the_rerun_writes_no_duplicate(tmp_path):
    db, marker, script = tmp_path / "memory.duckdb", tmp_path / "inside-the-transaction", tmp_path / "writer.py"
    script.write_text(WRITER.format(repo=str(REPO), tests=str(REPO / "tests")))
    env = {**os.environ, "KILL_AT": "6", "MARKER": str(marker)}
    writer = subprocess.Popen([sys.executable, str(script), str(db), "10"], env=env)
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert writer.poll() is None and time.monotonic() < deadline, "the writer never reached its sixth write"
        time.sleep(0.05)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)

    # The sixth record's transaction died uncommitted, but the record was durable in the spool before
    # it began: the next reader ingests it, and the database opens with all six, each once.
    assert MemoryStore(db).pending() == 1
    kept = _findings(db)
    assert kept["finding_id"].to_list() == [f"f{i:03d}" for i in range(6)]
    rerun = subprocess.run([sys.executable, str(script), str(db), "10"], env={**os.environ}, timeout=240)
    assert rerun.returncode == 0
    after = _findings(db)
    assert after["finding_id"].to_list() == [f"f{i:03d}" for i in range(10)]  # each once
    assert after.filter(pl.col("finding_id") <= "f005")["text"].to_list() == kept["text"].to_list()
    assert MemoryStore(db).pending() == 0


# --- engines that hang, err or stream nonsense ---------------------------------------------------

SLA = SLASpec(ttft_ms=500, itl_ms=200, max_error_rate=0.01)
BODIES = [{"messages": [{"role": "user", "content": "x" * 64}], "max_tokens": 8}]


def test_errors_and_broken_streams_are_counted_exactly_and_the_step_breaks_the_error_limit():
    from loadgen.runner import run_open_loop
    from loadgen.stats import summarize

    n = 70
    with simengine.start(simengine.ServiceModel(error_every=5, malformed_every=7)) as engine:
        outcome = run_open_loop(
            engine.base_url, engine.served_model, BODIES, np.arange(n) / 10.0, timeout_s=30, isolate=True
        )
    expected_500 = n // 5
    expected_broken = sum(1 for k in range(1, n + 1) if k % 7 == 0 and k % 5 != 0)
    statuses = [r.status for r in outcome.records]
    assert statuses.count(500) == expected_500
    broken = [r for r in outcome.records if r.status == 200 and r.error]
    assert len(broken) == expected_broken and all("malformed SSE" in r.error for r in broken)
    assert sum(1 for r in outcome.records if r.error) == expected_500 + expected_broken
    step = summarize(outcome, SLA, target_rate=10.0)
    assert step.errors == expected_500 + expected_broken
    assert step.error_rate == pytest.approx((expected_500 + expected_broken) / n)
    assert not step.within_sla and any("error" in v for v in step.sla_violations)  # 31% against 1%


def test_an_engine_that_accepts_connections_but_never_answers_ends_the_step_at_its_deadline(definitions):
    from loadgen.sweep import run_sweep

    spec = definitions.endpoint("tiny_random")
    spec = spec.model_copy(
        update={
            "sla": SLA,
            "sweep": spec.sweep.model_copy(
                update={
                    "rates": [2.0],
                    "step_duration_s": 3.0,
                    "refine_steps": 0,
                    "warmup_requests": 0,
                    "warm_prefix_groups": 0,
                    "drain_s": 2.0,
                    "repeats": 1,
                }
            ),
        }
    )
    pool = pl.DataFrame({"request_id": [str(i) for i in range(20)], "body": [json.dumps(BODIES[0])] * 20})
    began = time.monotonic()
    with simengine.start(simengine.ServiceModel(hang=True)) as engine:
        result = run_sweep(engine, pool, spec, repeats_label="hung", check_client=False)
        pid = engine.pid
    took = time.monotonic() - began
    (step,) = result.steps  # the sweep stops at the first such step: no halving towards a capacity of 0
    assert step.requests > 0 and step.cut_before_first_token == step.requests  # each cut at the deadline
    assert step.validity == "invalid" and "accepts connections but does not serve" in step.invalid_reason
    assert result.validity == "invalid" and "does not serve" in result.invalid_reason
    assert took < 120  # a bound on a stuck run (3 s step + 2 s drain), not a timing assertion
    with pytest.raises(ProcessLookupError):  # the engine process is gone
        os.kill(pid, 0)


# --- a corrupt memory file -------------------------------------------------------------------------


def test_a_corrupt_memory_is_refused_naming_its_last_good_copy_which_keeps_every_record(tmp_path):
    """Bytes of the database overwritten (a disk fault, a foreign writer): the CLI refuses it in one
    line naming the last good copy, which holds every record written before."""
    home = tmp_path / "home"
    home.mkdir()
    db = home / "memory.duckdb"
    store = MemoryStore(db)
    for i in range(3):
        store.record_finding(_finding(i))
    assert len(_findings(db)) == 3
    backup = db.with_name(db.name + ".last-good")
    assert backup.is_file()
    with open(db, "r+b") as handle:  # the header and the first blocks: DuckDB can no longer read it
        handle.write(os.urandom(64 * 1024))
    env = {**os.environ, "AUTORESEARCH_HOME": str(home)}
    env.pop("AUTORESEARCH_MEMORY_DB", None)
    result = subprocess.run(
        [str(REPO / ".venv" / "bin" / "autoresearch"), "memory", "query", "select count(*) as n from findings"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"research memory {db}" in result.stderr
    assert f"its last good copy is {backup}" in result.stderr, result.stderr
    os.replace(db, db.with_name("memory.duckdb.damaged"))
    (db.parent / backup.name).rename(db)  # what the hint says to do (move aside, copy back)
    assert _findings(db)["finding_id"].to_list() == ["f000", "f001", "f002"]


def test_a_sweep_that_runs_no_step_is_invalid_not_a_capacity_of_zero(definitions, monkeypatch):
    """The client's calibration refuses the first probed rate (beyond what this host's client holds): no step
    runs, and the sweep says it measured nothing instead of reporting a capacity of 0 req/s."""
    import loadgen.sweep as sweep_module
    from loadgen.results import CalibrationResult

    calibration = CalibrationResult(
        max_rate=0.01,
        senders=1,
        lag_p99_ms_bound=20,
        rate_ratio_bound=0.95,
        duration_s=10,
        points=[],
        host="test",
        cpus=2,
        measured_at=time.time(),
    )
    monkeypatch.setattr("loadgen.calibrate.client_limit", lambda: calibration)
    spec = definitions.endpoint("tiny_random")
    spec = spec.model_copy(
        update={
            "sla": SLA,
            "sweep": spec.sweep.model_copy(
                update={
                    "rates": None,
                    "step_duration_s": 2.0,
                    "refine_steps": 0,
                    "warmup_requests": 2,
                    "warm_prefix_groups": 0,
                }
            ),
        }
    )
    pool = pl.DataFrame({"request_id": [str(i) for i in range(20)], "body": [json.dumps(BODIES[0])] * 20})
    with simengine.start(simengine.ServiceModel()) as engine:  # the automatic ladder: a probe picks the first rate
        result = sweep_module.run_sweep(engine, pool, spec, repeats_label="refused", max_steps=3)
    assert result.steps == [] and result.validity == "invalid"
    assert "no step was run" in result.invalid_reason and "calibrated client limit" in result.invalid_reason


def test_a_sender_whose_parent_is_gone_exits_quietly():
    """A sender process (``python -m loadgen.runner``) whose caller was killed finds its result pipe
    closed: it exits without a traceback on the terminal (nobody is left to read one)."""
    import subprocess
    import sys

    sender = subprocess.Popen(
        [sys.executable, "-m", "loadgen.runner"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    sender.stdout.close()  # the caller is gone: nothing reads the results
    sender.stdin.write(b"\x05\x00\x00\x00\x00\x00\x00\x00junk!")  # a frame that is no config: the error path
    sender.stdin.close()
    assert sender.wait(timeout=60) == 0
    stderr = sender.stderr.read().decode()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
