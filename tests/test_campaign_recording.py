"""A research memory that cannot be written (or read for a floor) ends the campaign non-zero, losing nothing.

The memory is a real DuckDB file whose spool folder is replaced by a plain file mid-campaign (a real
filesystem fault: every write then fails with the OS's error, as on a full or read-only disk). The engine
is test_gpu_cap's stand-in server and the sweeps are its stubs of known capacity. The campaign stops after
the step in which the write failed, with the error in its outcome and exit code 74; its state keeps every
experiment, and once the fault is gone the next run records them all and finishes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from specs.config import CampaignSpec
from autoresearch.cli import campaign_exit
from memory_db import MemoryStore
from research.campaign import run_campaign
from research.state import StateStore
from test_campaign import pool
from test_gpu_cap import Recorder, _endpoint, _propose


def _run(tmp_path: Path, endpoint, memory: MemoryStore, propose, lines: list[str]):
    spec = CampaignSpec(
        name="rec", endpoint=endpoint.name, subagents=2, repeats=2, max_rounds=1, proposer="rules", gpu_hours=5
    )
    return run_campaign(
        spec,
        endpoint,
        state_dir=tmp_path / "state",
        pool=pool(),
        sweep_fn=Recorder(),
        diagnose_fn=lambda *a: {"bottlenecks": []},
        propose_fn=propose,
        progress=lines.append,
        memory=memory,
    )


def _experiments(memory: MemoryStore) -> set[str]:
    return set(memory.query("select experiment_id from experiments")["experiment_id"].to_list())


def test_a_failed_memory_write_ends_the_campaign_non_zero_and_the_next_run_records_it(
    tmp_path: Path, monkeypatch, capsys
):
    monkeypatch.setenv("AUTORESEARCH_GPUS", "")
    monkeypatch.setenv("AUTORESEARCH_GPU_LOCKS", str(tmp_path / "leases"))
    endpoint = _endpoint(tmp_path)
    memory = MemoryStore(tmp_path / "memory.duckdb")
    spool_tmp = memory.spool_dir / ".tmp"

    def propose_then_break(*args):  # after the baseline was recorded: the disk goes away
        shutil.rmtree(spool_tmp)
        spool_tmp.write_text("not a folder")
        return _propose(*args)

    lines: list[str] = []
    out = _run(tmp_path, endpoint, memory, propose_then_break, lines)
    state = StateStore(tmp_path / "state", "rec").load()

    # stopped after the round, not finished, the failed write named; non-zero, one line, no traceback
    assert not out.finished and not state.finished and out.unrecorded == state.unrecorded
    assert "research memory (experiment) could not be written" in out.unrecorded
    assert out.failure and "not all recorded" in out.failure
    assert campaign_exit(out) == 74
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: campaign rec stopped: research memory (experiment)")
    assert "autoresearch campaign run rec` again" in err[0] and "Traceback" not in err[0]
    assert any(line.startswith("  error: research memory (experiment)") for line in lines)
    # nothing measured is lost: the state holds every experiment, the memory none of them yet
    measured = {e for e, r in state.experiments.items() if r.verdict != "skipped"}
    assert len(measured) == 2 and state.rounds[0].finished
    assert not _experiments(memory)

    # the fault is gone: the next run records the whole state, then goes on to its end
    spool_tmp.unlink()
    spool_tmp.mkdir()
    lines.clear()
    again = _run(tmp_path, endpoint, memory, _propose, lines)
    assert again.finished and again.unrecorded is None and again.failure is None, again
    assert campaign_exit(again) == 0
    assert any("recording what the last run could not" in line for line in lines)
    assert _experiments(memory) == {f"{state.campaign_id}:{e}" for e in measured}
    status = memory.query("select status from campaigns where campaign_id = ?", [state.campaign_id])["status"]
    assert status.to_list() == ["finished"]
    assert StateStore(tmp_path / "state", "rec").load().unrecorded is None


def test_a_review_that_cannot_be_written_fails_the_campaign_and_is_written_on_the_next_run(
    tmp_path: Path, monkeypatch, capsys
):
    monkeypatch.setenv("AUTORESEARCH_GPUS", "")
    monkeypatch.setenv("AUTORESEARCH_GPU_LOCKS", str(tmp_path / "leases"))
    endpoint = _endpoint(tmp_path)
    memory = MemoryStore(tmp_path / "memory.duckdb")
    review_dir = tmp_path / "state" / "rec.review"
    review_dir.parent.mkdir(parents=True)
    review_dir.write_text("a file where the review's folder goes")  # a real fault: the folder cannot be made

    out = _run(tmp_path, endpoint, memory, _propose, [])
    assert out.finished and out.unrecorded and "review report" in out.unrecorded and out.report_path is None
    assert campaign_exit(out) == 74 and "review report" in capsys.readouterr().err
    state = StateStore(tmp_path / "state", "rec").load()
    assert state.finished and state.unrecorded  # kept: launch_campaign resumes it rather than archive it

    review_dir.unlink()
    again = _run(tmp_path, endpoint, memory, _propose, [])
    assert again.failure is None and again.report_path and Path(again.report_path).exists()
    assert campaign_exit(again) == 0
    status = memory.query("select status from campaigns where campaign_id = ?", [state.campaign_id])["status"]
    assert status.to_list() == ["finished"]


def test_a_memory_the_floor_cannot_read_stops_the_campaign_before_its_floor(tmp_path: Path, monkeypatch, capsys):
    """The baseline's floor pools the endpoint's history from the memory: a memory file that is not one
    (overwritten with junk) stops the campaign there, non-zero, rather than build the floor without it."""
    monkeypatch.setenv("AUTORESEARCH_GPUS", "")
    monkeypatch.setenv("AUTORESEARCH_GPU_LOCKS", str(tmp_path / "leases"))
    endpoint = _endpoint(tmp_path)
    memory = MemoryStore(tmp_path / "memory.duckdb")
    memory.path.write_bytes(b"junk, not a DuckDB file" * 100)

    out = _run(tmp_path, endpoint, memory, _propose, [])
    assert not out.finished and out.reference_capacity is None
    assert out.unrecorded and "endpoint noise history" in out.unrecorded
    assert campaign_exit(out) == 74 and "endpoint noise history" in capsys.readouterr().err
    state = StateStore(tmp_path / "state", "rec").load()
    assert state.reference is None and not state.finished  # no floor was built without the history
