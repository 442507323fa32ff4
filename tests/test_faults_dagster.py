"""The fault matrix's Dagster row: a campaign run cancelled mid-experiment (docs/reliability.md).

Dagster cancels a run by interrupting the process that executes it: the run launcher asks the code
server, whose termination thread sends SIGINT to the run worker (``dagster._utils.start_termination_thread``),
and the step's code sees ``DagsterExecutionInterruptedError``. Here the campaign job of a tiny endpoint
runs in a process of its own against a real Dagster instance (a real engine, a real DuckDB memory) and
gets that SIGINT once its baseline is recorded and a candidate's engine is running. Then: no engine is
left running, the run is not reported a success, and the next run of the same partition resumes
without measuring the baseline again.
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

from tests.conftest import ResearchGraph

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


def test_a_cancelled_dagster_run_leaves_no_engine_and_the_next_run_resumes(tmp_path: Path, engine_slot):
    import dagster as dg

    engine_slot.release()  # one engine at a time on this machine
    graph = ResearchGraph(tmp_path)
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT)
    env = {**os.environ, **graph.env, "PYTHONPATH": str(REPO)}
    env.pop("AUTORESEARCH_LLM_MODEL", None)
    cmd = [sys.executable, str(script), str(graph.dagster_home)]
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    engine_pid, finished = None, None
    deadline = time.monotonic() + 1500  # a bound on a stuck run, not a timing assertion
    try:
        while time.monotonic() < deadline and first.poll() is None and engine_pid is None:
            time.sleep(0.5)
            for state_file in graph.home.glob("campaigns/**/*.state.json"):
                try:
                    state = json.loads(state_file.read_text())
                except ValueError:
                    continue
                actives = list(state_file.parent.glob("*.runs/active_engine*.json"))
                if state.get("reference") and actives:  # baseline recorded, a candidate's engine running
                    try:
                        engine_pid = json.loads(actives[0].read_text())["pid"]
                    except (FileNotFoundError, ValueError):
                        continue
                    finished = state["reference"]["sweeps"]
        assert engine_pid is not None, (tmp_path / "first.log").read_text()[-3000:]
        assert _alive(engine_pid)
        first.send_signal(signal.SIGINT)  # what Dagster's termination does to the run worker
        first.wait(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    out = (tmp_path / "first.log").read_text()
    assert "RUN" in out and "failed" in out.split("RUN", 1)[1], out[-3000:]
    stopped_by = time.monotonic() + 30
    while _alive(engine_pid) and time.monotonic() < stopped_by:
        time.sleep(0.5)
    assert not _alive(engine_pid), "the candidate's engine outlived the cancelled run"
    with dg.DagsterInstance.from_config(str(graph.dagster_home)) as instance:
        runs = instance.get_runs()
        assert len(runs) == 1 and runs[0].status != dg.DagsterRunStatus.SUCCESS

    second = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=1500)
    assert second.returncode == 0 and "success" in second.stdout, second.stdout[-3000:] + second.stderr[-3000:]
    state_file = next(graph.home.glob("campaigns/**/*.state.json"))
    after = json.loads(state_file.read_text())
    assert after["finished"] and after["resumes"] == 1
    assert after["reference"]["sweeps"] == finished  # the baseline was not measured again
    assert not list(state_file.parent.glob("*.runs/active_engine*.json"))
