"""The fault matrix's Dagster row: a campaign run cancelled mid-experiment (docs/reliability.md).

Dagster cancels a run by interrupting the process that executes it: the run launcher asks the code
server, whose termination thread sends SIGINT to the run worker (``dagster._utils.start_termination_thread``),
and the step's code sees ``DagsterExecutionInterruptedError``. Here the campaign job of a tiny endpoint
runs in a process of its own against a real Dagster instance (a real engine, a real DuckDB memory) and
gets that SIGINT once its baseline is recorded and a candidate's engine is running. Then: no engine is
left running, the run is not reported a success, and the next run of the same partition resumes
without measuring the baseline again (it is cancelled the same way once its own candidate runs, which
keeps the test to a baseline, a diagnosis and two candidate starts).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ResearchGraph

pytestmark = [pytest.mark.engine, pytest.mark.timeout(2700)]

REPO = Path(__file__).resolve().parents[1]
RUN_SCRIPT = """\
import os, sys
from pathlib import Path
import dagster as dg
from dagster_project.definitions import build_definitions

defs = build_definitions(Path(os.environ["AUTORESEARCH_DEFINITIONS"]))
job = defs.get_job_def("quick__campaign_job")
with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
    instance.add_dynamic_partitions("quick__campaigns", ["cancelled"])
    result = job.execute_in_process(partition_key="cancelled", instance=instance, raise_on_error=False)
    print("RUN", result.run_id, "success" if result.success else "failed", flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def _wait_for_candidate_engine(
    graph: ResearchGraph, proc: subprocess.Popen, log: Path, resumes: int
) -> tuple[int, list]:
    """Wait until the campaign state has its baseline (after ``resumes`` resumes) and a candidate's engine
    runs; return that engine's pid and the baseline's sweeps."""
    deadline = time.monotonic() + 1500  # a bound on a stuck run, not a timing assertion
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        for state_file in graph.home.glob("campaigns/**/*.state.json"):
            try:
                state = json.loads(state_file.read_text())
            except ValueError:
                continue
            actives = list(state_file.parent.glob("*.runs/active_engine*.json"))
            if state.get("reference") and state.get("resumes", 0) == resumes and actives:
                try:
                    return json.loads(actives[0].read_text())["pid"], state["reference"]["sweeps"]
                except (FileNotFoundError, ValueError):
                    continue
    raise AssertionError("no candidate engine seen: " + log.read_text()[-3000:])


def _cancel(proc: subprocess.Popen, engine_pid: int, log: Path) -> str:
    """SIGINT to the run worker (what Dagster's termination sends); the engine must not outlive the run."""
    assert _alive(engine_pid)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped_by = time.monotonic() + 30
    while _alive(engine_pid) and time.monotonic() < stopped_by:
        time.sleep(0.5)
    assert not _alive(engine_pid), "the candidate's engine outlived the cancelled run"
    return log.read_text()


def test_a_cancelled_dagster_run_leaves_no_engine_and_the_next_run_resumes(tmp_path: Path, engine_slot):
    """Cancelled once with a candidate's engine running; the next run resumes without measuring the
    baseline again, and is cancelled the same way once its own candidate's engine runs."""
    import dagster as dg

    engine_slot.release()  # one engine at a time on this machine
    graph = ResearchGraph(tmp_path)
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT)
    env = {**os.environ, **graph.env, "PYTHONPATH": str(REPO)}
    env.pop("AUTORESEARCH_LLM_MODEL", None)
    cmd = [sys.executable, str(script), str(graph.dagster_home)]
    baseline = None
    for attempt in range(2):
        log = tmp_path / f"run{attempt}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
            try:
                engine_pid, sweeps = _wait_for_candidate_engine(graph, proc, log, resumes=attempt)
            except AssertionError:
                proc.kill()
                raise
            if attempt:
                assert sweeps == baseline  # resumed: the baseline was not measured again
                assert "resuming campaign" in log.read_text()
            baseline = sweeps
            text = _cancel(proc, engine_pid, log)
        assert "RUN" in text and "failed" in text.split("RUN", 1)[1], text[-3000:]
    with dg.DagsterInstance.from_config(str(graph.dagster_home)) as instance:
        runs = instance.get_runs()
        assert len(runs) == 2 and all(r.status != dg.DagsterRunStatus.SUCCESS for r in runs)
