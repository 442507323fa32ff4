"""Whole campaigns on real vLLM CPU servers.

- Resume: a campaign process killed with SIGKILL after its first experiment is recorded is
  started again; it stops the engine its predecessor left running, does not re-run the finished
  experiment, and ends normally (tiny random model, short steps).
- A whole campaign from a poor baseline to a confirmed, checked, lossless gain of at least x1.5 on a
  real engine is the research graph's (tests/test_dagster_pipeline.py); the 27-minute SmolLM2 campaign
  that showed it on the embedded default is the main job's own run, not a test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specs.paths import REPO_ROOT
from research.state import StateStore

pytestmark = pytest.mark.engine

# The sample traffic sends tools with tool_choice "auto": vLLM needs a tool parser for that.
TOOL_ARGS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]

RESUME_SCRIPT = textwrap.dedent("""
    import sys
    from specs.config import CampaignSpec
    from dagster_project.lib import load_definitions
    from specs.paths import definitions_dir
    from research.campaign import run_campaign

    spec = load_definitions(definitions_dir()).endpoint("tiny_random")
    args = ["--max-num-seqs", "2", "--max-model-len", "4096", "--enforce-eager", "--dtype", "float32",
            "--no-enable-prefix-caching", {tool_args}]
    spec = spec.with_engine_args(args).model_copy(update={{"sweep": spec.sweep.model_copy(update=dict(
        rates=[2.0, 6.0], step_duration_s=3, warmup_requests=1, repeats=2, max_steps=2))}})
    campaign = CampaignSpec(name="resume_test", endpoint="tiny_random", deadline_minutes=30, gpu_hours=1,
                            subagents=2, repeats=1, max_rounds=1, proposer="rules", profile_seconds=0,
                            extra_repeats=0, production_check_s=5)
    out = run_campaign(campaign, spec, state_dir=sys.argv[1], progress=lambda m: print(m, flush=True))
    print("OUTCOME", out.model_dump_json())
""").format(tool_args=", ".join(repr(a) for a in TOOL_ARGS))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


# Four engine starts: a few minutes on a quiet 2-core host, up to 25 on a slow one (each start then
# takes 2-3 minutes): more than the suite's 900 s default.
@pytest.mark.timeout(2700)
def test_killed_campaign_resumes_without_rerunning_finished_experiments(tmp_path: Path, engine_slot):
    engine_slot.release()  # one engine at a time on this machine
    script = tmp_path / "run.py"
    script.write_text(RESUME_SCRIPT)
    state_dir = tmp_path / "state"
    cmd = [sys.executable, str(script), str(state_dir)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    log1 = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(cmd, stdout=log1, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
    state_file = state_dir / "resume_test.state.json"
    runs = state_dir / "resume_test.runs"  # active_engine.<label>.json: one per running engine
    finished_id, orphan_pid = None, None
    deadline = time.monotonic() + 1500  # a bound on a stuck run, not a timing assertion
    try:
        while time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.5)
            if not state_file.exists():
                continue
            try:
                state = json.loads(state_file.read_text())
            except ValueError:
                continue
            done = [e for e in state["experiments"].values() if e["verdict"] != "skipped" and e["sweeps"]]
            active = sorted(runs.glob("active_engine*.json"))
            if done and active:  # first experiment recorded and the next engine is running
                try:
                    orphan_pid = json.loads(active[0].read_text())["pid"]
                except (FileNotFoundError, ValueError):  # that engine just stopped: look again
                    continue
                finished_id = done[0]["experiment_id"]
                break
            if done and finished_id is None:
                finished_id = done[0]["experiment_id"]
        assert finished_id is not None, (tmp_path / "first.log").read_text()[-3000:]
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
        log1.close()
    before = StateStore(state_dir, "resume_test").load()
    recorded = before.experiments[finished_id]

    second = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=1100)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    out = second.stdout
    assert "resuming campaign resume_test" in out
    assert f"experiment {finished_id}" not in out  # the finished experiment was not run again
    if orphan_pid is not None:
        assert "left running by an interrupted run" in out
        assert not _alive(orphan_pid)
    after = StateStore(state_dir, "resume_test").load()
    assert after.finished and after.resumes == 1
    kept = after.experiments[finished_id]
    assert kept.started_at == recorded.started_at and kept.sweeps == recorded.sweeps
    assert len(after.experiments) >= 2  # the rest of the round ran after the restart
    assert after.reference.sweeps == before.reference.sweeps  # the baseline was not re-measured either
    assert not list(runs.glob("active_engine*.json"))
    # an adopted change is replayed in production shape beside the reference, once, at the end
    check = after.production_check
    if after.working.engine_args != after.reference.engine_args:
        assert check and [r["label"] for r in check["rows"]] == ["before", "after"], check
        assert all(r["validity"] == "valid" and r["requests"] > 0 for r in check["rows"]), check
        assert {r["requests"] for r in check["rows"]} == {check["rows"][0]["requests"]}  # one schedule for both
        assert all(r["gpu_s_per_1k"] is None for r in check["rows"])  # no GPU here: unmeasured, not 0
        assert "production-shaped replay (after)" in out
        review = next(state_dir.glob("*.review/review.md")).read_text()
        assert "## Production-shaped verification" in review and "unmeasured (no GPU)" in review
    else:
        assert check is None  # nothing adopted: nothing to verify
