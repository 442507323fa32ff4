"""One measurement path: every engine start goes through ``engines.run_engine`` (docs/architecture.md,
"One measurement path"), so a crash is ``invalid``, with the engine log's tail, wherever it happens.

Each call site that starts an engine runs a real engine process here, and a real fault: the engine is
SIGKILLed by its PID while the call site uses it (a request of its is in flight), or, for
``autoresearch engine up``, while it starts. A real vLLM start costs a minute on this host, so the
engine is the simulated engine (``loadgen.simengine``) behind a toy adapter declared below, as in
``tests/test_toy_adapter.py``: its own process, over HTTP, with a log of its own. A thin wrapper around
it writes its pid and counts the generation requests it received (that is when the test kills it), and
holds each request a moment, so the kill lands while one is in flight.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from specs import paths
from specs.config import SLASpec
from engines.base import EngineAdapter, MetricsSnapshot
from engines.metrics import snapshot_from_text
from loadgen import simengine

# The engine: loadgen.simengine's server, its pid on file at start and each generation request counted
# (then held TOY_REQUEST_DELAY s); TOY_START_DELAY holds the start (before it listens).
WRAPPER = r"""
import asyncio, os, sys, time
from pathlib import Path
state = Path(os.environ["TOY_STATE"])
state.mkdir(parents=True, exist_ok=True)
print(f"toy engine {os.getpid()} starting", flush=True)
(state / "pid").write_text(str(os.getpid()))
time.sleep(float(os.environ.get("TOY_START_DELAY", "0")))
from loadgen import simengine
original = simengine._Server.generate
async def generate(self, body, writer):
    with open(state / "requests", "a") as f:
        f.write("r\n")
    print(f"toy engine: generation request {self.requests + 1}", flush=True)
    await asyncio.sleep(float(os.environ.get("TOY_REQUEST_DELAY", "0")))
    return await original(self, body, writer)
simengine._Server.generate = generate
print("toy engine serving", flush=True)
simengine.main(sys.argv[1:])
"""


class KillableToy(EngineAdapter):
    """The simulated engine as an engine kind, with a profiler (simengine answers 200 to its URLs)."""

    kind = "toy"
    # the drafter's data engine asks for prefix caching and a batch size (vLLM's names): taken, not used
    known_flags = frozenset({"--max-batch", "--max-num-seqs", "--enable-prefix-caching", "--no-enable-prefix-caching"})
    evidence = frozenset({"metrics", "profile", "prefix_cache_reset"})
    reset_prefix_cache_path = "/reset_prefix_cache"
    start_profile_path = "/start_profile"
    stop_profile_path = "/stop_profile"
    stop_grace_s = 2.0
    state_dir: Path = Path(".")
    env: dict[str, str] = {}

    def launch_command(self, model_dir: Path) -> list[str]:
        model = simengine.ServiceModel(run_jitter_cv=0.01, max_batch=4)
        return [
            self.engine_python(),
            "-c",
            WRAPPER,
            "--port",
            str(self.port),
            "--model-json",
            json.dumps(asdict(model)),
        ]

    def launch_env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(paths.REPO_ROOT), "TOY_STATE": str(self.state_dir), **self.env}

    def served_model_name(self, model_dir: Path) -> str:
        return simengine.SIM_MODEL

    def parse_metrics(self, text: str, timestamp: float) -> MetricsSnapshot:
        return snapshot_from_text(
            text,
            timestamp,
            {"requests_running": "sim:num_requests_running", "requests_waiting": "sim:num_requests_waiting"},
            "sim:",
        )


class Killer(threading.Thread):
    """SIGKILLs the engine by its PID once it has received ``after_requests`` generation requests (0: as
    soon as its process is up)."""

    def __init__(self, state: Path, after_requests: int, timeout_s: float = 180.0):
        super().__init__(daemon=True)
        self.state, self.after, self.timeout_s = state, after_requests, timeout_s
        self.killed: int | None = None
        self.done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        pid_file, requests = self.state / "pid", self.state / "requests"
        while time.monotonic() < deadline and not self.done.is_set():
            if pid_file.exists() and pid_file.read_text().strip():
                seen = len(requests.read_text().splitlines()) if requests.exists() else 0
                if seen >= self.after:
                    self.killed = int(pid_file.read_text())
                    os.kill(self.killed, signal.SIGKILL)
                    return
            time.sleep(0.02)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)


@pytest.fixture(scope="module")
def replay_pool(definitions):
    """tiny_random's replay pool, as the product builds it (in the real home: its tokenizer is cached)."""
    from autoresearch.workflows import load_pool

    return load_pool(definitions.endpoint("tiny_random"))


@pytest.fixture
def toy(monkeypatch, tmp_path, definitions, replay_pool):
    """The toy endpoint, in a fresh AUTORESEARCH_HOME holding its replay pool."""
    from autoresearch.workflows import pool_path
    from engines.registry import ADAPTERS

    monkeypatch.setenv("AUTORESEARCH_MODELS", str(paths.models_dir()))
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path / "home"))
    monkeypatch.setitem(ADAPTERS, "toy", KillableToy)
    monkeypatch.setattr(KillableToy, "state_dir", tmp_path / "engine_state")
    monkeypatch.setattr(KillableToy, "env", {"TOY_REQUEST_DELAY": "1.0"})
    base = definitions.endpoint("tiny_random")
    (tmp_path / "weights").mkdir()
    spec = base.model_copy(
        update={
            "name": "toy_endpoint",
            "engine": base.engine.model_copy(
                update={"kind": "toy", "args": ["--max-batch", "4"], "python": sys.executable, "env": {}}
            ),
            "model": base.model.model_copy(update={"path": str(tmp_path / "weights")}),
            "sla": SLASpec(ttft_ms=3000, itl_ms=500, max_error_rate=0.01),
            "sweep": base.sweep.model_copy(
                update=dict(
                    rates=[2.0, 4.0],
                    step_duration_s=3,
                    warmup_requests=2,
                    max_steps=3,
                    warm_prefix_groups=0,
                    min_requests=4,
                    repeats=2,
                )
            ),
        }
    )
    pool_path(spec).parent.mkdir(parents=True, exist_ok=True)
    replay_pool.write_parquet(pool_path(spec))
    return spec


def _dagster_failure(asset_key: str, spec) -> tuple[str, dict]:
    """Materialise one measurement asset of ``spec``; (the failure's description, its metadata)."""
    import dagster as dg

    from assets import measurement

    defs = measurement.build(spec)
    asset = next(a for a in defs.assets if a.key == dg.AssetKey([spec.name, asset_key]))
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([asset], instance=instance, raise_on_error=False)
    assert not result.success
    (failure,) = result.get_step_failure_events()
    data = failure.step_failure_data.user_failure_data
    assert data is not None, failure.step_failure_data.error  # a dg.Failure, not a traceback
    return data.description, {k: v.value for k, v in data.metadata.items()}


# Each call site: (requests the engine receives before it is killed, run it -> (invalid reason, log tail)).


def site_candidate(spec, pool, tmp_path):
    from research.harness import run_candidate

    active = tmp_path / "active_engine.json"
    result = run_candidate(
        spec, list(spec.engine.args), pool, None, 1, workdir=tmp_path / "cand", active_file=active, progress=print
    )
    assert not active.exists()  # the orphan guard's record goes with the stopped engine
    assert result.verdict == "invalid" and result.invalid_reason.startswith("engine failed: engine died mid-candidate")
    return result.invalid_reason, result.log_tail


def site_unit(spec, pool, tmp_path):
    from autoresearch.experiment_unit import run_unit
    from research.experiment import ExperimentResult, ExperimentSpec

    spec_file = ExperimentSpec.for_endpoint(spec, repeats=1, label="unit").write(tmp_path / "unit", pool)
    result = run_unit(spec_file, tmp_path / "out")
    assert ExperimentResult.read(tmp_path / "out").verdict == "invalid"  # result.json says so
    assert result.invalid_reason.startswith("engine failed: engine died mid-unit")
    return result.invalid_reason, result.candidate.log_tail


def site_sweep(spec, pool, tmp_path):
    from autoresearch.workflows import sweep_endpoint

    sweeps = sweep_endpoint(spec, progress=False, repeats=2)
    last = sweeps[-1]
    assert last.validity == "invalid" and len(sweeps) == 1  # no second repeat on a dead engine
    (tail,) = [n for n in last.notes if n.startswith("engine log (tail):")]
    return last.invalid_reason, tail


def site_baseline(spec, pool, tmp_path):
    description, metadata = _dagster_failure("baseline_runs", spec)
    assert description.startswith("baseline runs invalid: ") and "\n" not in description
    assert metadata["validity"] == "invalid" and metadata["invalid_reason"] in description
    return description, metadata["engine_log_tail"]


def site_replay(spec, pool, tmp_path):
    description, metadata = _dagster_failure("production_replay", spec)
    assert description.startswith("production replay invalid: engine died mid-replay") and "\n" not in description
    return description, metadata["engine_log_tail"]


def site_reference(spec, pool, tmp_path):
    from autoresearch.workflows import reference_outputs
    from engines import EngineRunInvalid

    with pytest.raises(EngineRunInvalid) as caught:
        reference_outputs(spec)
    assert not caught.value.launch_failed and caught.value.reason.startswith("engine died mid-reference")
    assert not list((paths.runs_dir() / "references").glob("*.json"))  # nothing cached from a dead engine
    return caught.value.reason, caught.value.log_tail


def site_profile(spec, pool, tmp_path):
    from research.loop import diagnose_step

    diagnosis = diagnose_step(spec, pool, [], profile_seconds=6, workdir=tmp_path / "diag", progress=print)
    (invalid,) = [n for n in diagnosis.notes if n.startswith("profile/workloads invalid: ")]
    (tail,) = [n for n in diagnosis.notes if n.startswith("engine log (tail): ")]
    assert "engine died mid-profile" in invalid
    return invalid, tail


def site_drafter(spec, pool, tmp_path):
    from research.drafter.data import collect
    from research.drafter.errors import DrafterError

    with pytest.raises(DrafterError) as caught:
        collect(spec, pool, tmp_path / "drafter" / "onpolicy.jsonl", examples=8, progress=print)
    message = str(caught.value)
    assert "engine run is invalid: engine died mid-drafter" in message
    reason, _, tail = message.partition("--- engine log (tail) ---")
    return reason, tail


def site_serve(spec, pool, tmp_path):
    from autoresearch.cli import describe_error
    from autoresearch.engine_control import _state_file, up
    from engines import EngineRunInvalid

    with pytest.raises(EngineRunInvalid) as caught:
        up(spec)
    assert caught.value.launch_failed and caught.value.reason.startswith("launch failed: ")
    assert not _state_file(spec).exists()  # nothing recorded as running
    message, _where, _hint, code = describe_error(caught.value)
    assert code == 2 and message.splitlines()[0] == caught.value.reason
    return caught.value.reason, caught.value.log_tail


def site_production(spec, pool, tmp_path):
    from research.production_check import production_check

    args = list(spec.engine.args)
    check = production_check(
        spec, pool, [("before", args), ("after", args)], workdir=tmp_path, seconds=4, progress=print
    )
    before, after = check.row("before"), check.row("after")
    assert before.validity == "invalid" and before.invalid_reason.startswith("engine died mid-replay")
    assert after.validity == "valid" and after.requests > 0  # its own engine: the other row still stands
    assert "invalid (engine died mid-replay" in check.summary()
    return before.invalid_reason, before.log_tail


SITES = {
    "candidate": (4, site_candidate),
    "unit": (4, site_unit),
    "sweep": (4, site_sweep),
    "baseline": (4, site_baseline),
    "replay": (2, site_replay),
    "production": (2, site_production),  # the campaign's production-shaped verification
    "reference": (1, site_reference),
    "profile": (3, site_profile),
    "drafter": (1, site_drafter),
    "serve": (0, site_serve),  # `engine up`: killed while it starts
}


@pytest.mark.parametrize("site", list(SITES))
def test_killing_the_engine_mid_step_is_invalid_with_the_log_tail(site, toy, replay_pool, tmp_path, monkeypatch):
    after, run = SITES[site]
    if site == "serve":
        monkeypatch.setattr(KillableToy, "env", {"TOY_START_DELAY": "30"})
    killer = Killer(KillableToy.state_dir, after)
    killer.start()
    try:
        reason, tail = run(toy, replay_pool, tmp_path)
    finally:
        killer.stop()
    assert killer.killed is not None, "the engine was never killed"
    assert "-9" in reason, reason  # the exit by SIGKILL, in one line
    assert tail and f"toy engine {killer.killed} starting" in tail, tail  # the engine's own log lines
    with pytest.raises(ProcessLookupError):
        os.kill(killer.killed, 0)  # reaped: nothing left running


def test_a_healthy_run_stops_its_engine_and_clears_the_orphan_record(toy, tmp_path):
    from engines import run_engine

    active = tmp_path / "active.json"
    with run_engine(toy, workdir=tmp_path / "ok", purpose="sweep", active_file=active) as engine:
        recorded = json.loads(active.read_text())
        assert recorded["pid"] == engine.pid and recorded["argv"]
        engine.check_alive()
    assert engine.process.poll() is not None and not active.exists()


def test_an_orphan_recorded_by_a_killed_run_is_stopped_before_the_next_start(toy, tmp_path):
    """A run killed with its engine running left the record: the next run_engine with that file stops it."""
    import subprocess

    from engines import run_engine

    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while b"sleep(120)" not in Path(f"/proc/{orphan.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        argv = [a.decode() for a in Path(f"/proc/{orphan.pid}/cmdline").read_bytes().split(b"\0") if a]
        active = tmp_path / "active.json"
        active.write_text(json.dumps({"pid": orphan.pid, "argv": argv}))
        with run_engine(toy, workdir=tmp_path / "next", purpose="candidate", active_file=active) as engine:
            assert orphan.wait(timeout=30) != 0  # stopped before this engine started
            assert json.loads(active.read_text())["pid"] == engine.pid
    finally:
        if orphan.poll() is None:
            os.killpg(orphan.pid, signal.SIGKILL)
            orphan.wait()


# ------------------------------------------------------------------------- one path, from the source
PRODUCT_PACKAGES = (
    "specs",
    "engines",
    "replay",
    "loadgen",
    "research",
    "memory_db",
    "launchers",
    "autoresearch",
    "assets",
    "sensors",
    "dagster_project",
)


def test_no_module_but_engines_session_calls_start_engine():
    """``start_engine`` is called only by ``engines.run_engine`` (and defined in ``engines/__init__``);
    tests may call it. Calls are found in the syntax tree, imports under another name included."""
    offenders = []
    for package in PRODUCT_PACKAGES:
        for file in sorted((paths.REPO_ROOT / package).rglob("*.py")):
            rel = file.relative_to(paths.REPO_ROOT).as_posix()
            if rel in ("engines/session.py", "engines/__init__.py"):
                continue
            tree = ast.parse(file.read_text(), filename=rel)
            aliases = {"start_engine"} | {
                a.asname
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)
                for a in node.names
                if a.name == "start_engine" and a.asname
            }
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and any(a.name == "start_engine" for a in node.names):
                    offenders.append(f"{rel}:{node.lineno}: imports start_engine")
                elif isinstance(node, ast.Call):
                    name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    if name in aliases:
                        offenders.append(f"{rel}:{node.lineno}: calls {name}")
    assert not offenders, "start an engine with engines.run_engine:\n" + "\n".join(offenders)


def test_the_engine_is_on_record_before_it_is_healthy(toy, tmp_path, monkeypatch):
    """A run killed while its engine starts (the long wait for health) leaves an orphan that the next run must
    find: run_engine records the engine the moment its process exists, not once it answers."""
    from engines import run_engine, stop_orphan

    monkeypatch.setattr(KillableToy, "env", {"TOY_START_DELAY": "8"})
    active = tmp_path / "active.json"
    seen: dict = {}

    def start() -> None:
        with run_engine(toy, workdir=tmp_path / "slow", purpose="sweep", active_file=active):
            pass

    starter = threading.Thread(target=start, daemon=True)
    starter.start()
    pid_file = KillableToy.state_dir / "pid"
    deadline = time.monotonic() + 120
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    engine_pid = int(pid_file.read_text())
    seen = json.loads(active.read_text())  # while the engine still holds its start (not yet listening)
    assert seen["pid"] == engine_pid and seen["argv"], seen
    # had this run been killed now, the next one would stop what it left: the record names a live process
    os.kill(engine_pid, 0)
    starter.join(timeout=120)
    assert not starter.is_alive() and not active.exists()  # a run that ended cleared its record
    assert stop_orphan(active) is False


def test_the_diagnosis_profile_holds_profile_seconds_not_min_requests(toy, replay_pool, tmp_path, monkeypatch):
    """The profiled step lasts the campaign's ``profile_seconds``: a profile is read per engine step, so one
    request suffices. It had stretched to ``min_requests`` / rate (24 s on the CPU default, whose 12-18 MB
    trace took a minute to write and parse). And the profiler starts with the step, after the warm-up burst
    (a trace of 18 s for a 6 s step took 43 s to write). Counted at the engine: the generation requests it
    received, in all and when the profiler started."""
    from engines import RunningEngine
    from loadgen import arrivals
    from loadgen.step import step_seed
    from research.loop import diagnose_step

    requests = KillableToy.state_dir / "requests"
    seen_at_start: list[int] = []
    real_start = RunningEngine.start_profile

    def start_profile(self, *args, **kwargs):
        seen_at_start.append(len(requests.read_text().splitlines()) if requests.exists() else 0)
        return real_start(self, *args, **kwargs)

    monkeypatch.setattr(RunningEngine, "start_profile", start_profile)

    cfg, rate = toy.sweep, 0.5  # the steady rate of a diagnosis with no sweep to go by

    def scheduled(seconds: float) -> int:
        return len(
            arrivals.schedule(cfg.arrival, rate, seconds, burstiness=cfg.burstiness, seed=step_seed(cfg.seed, rate))
        )

    held, stretched = scheduled(2.0), scheduled(cfg.min_requests / rate)  # 2 s against min_requests' 8 s
    assert held < stretched  # the two are told apart by what the engine receives
    diagnose_step(toy, replay_pool, [], profile_seconds=2, workdir=tmp_path / "diag", progress=print)
    received = len(requests.read_text().splitlines())
    assert received == cfg.warmup_requests + held, (received, held, stretched)
    assert seen_at_start == [cfg.warmup_requests]  # once, with the burst served and the step not begun
