"""Shared test fixtures: the shipped definitions and real vLLM CPU servers.

Engines are expensive (3.5 GiB, ~25 s to start, both cores), so at most ONE runs at a time:
:class:`EngineSlot` (session scope) keeps the current engine while consecutive tests ask for the
same one and stops it before starting another. ``tiny_engine`` / ``smollm_engine`` hand out the
slot's engine; tests that need an engine of their own call ``engine_slot.release()`` first.
Models are built once into the real AUTORESEARCH_HOME cache (never a temp home).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specs.config import DefinitionSet, EndpointSpec
from dagster_project.lib import load_definitions
from dagster_project.lib.migrate import write_declarations
from specs.engine_args import REMOVE, apply_diff
from specs.paths import definitions_dir
from engines import RunningEngine, start_engine

# SmolLM2 as declared in support_smollm, but with prefix caching on and cached-token counts in
# `usage` (tests of cache reset need both; everything else is the shipped configuration).
SMOLLM_TEST_DIFF = {
    "--no-enable-prefix-caching": REMOVE,
    "--enable-prefix-caching": None,
    "--enable-prompt-tokens-details": None,
}


class EngineSlot:
    """Holds at most one running engine for the whole session."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.engine: RunningEngine | None = None

    def get(self, spec: EndpointSpec, args: list[str] | None = None) -> RunningEngine:
        key = (spec.name, tuple(args) if args is not None else None, tuple(sorted(spec.engine.env.items())))
        if self.engine is not None and self.key == key:
            if self.engine.process is not None and self.engine.process.poll() is None:
                return self.engine
        self.release()
        self.engine = start_engine(spec, args_override=args)
        self.key = key
        return self.engine

    def release(self) -> None:
        if self.engine is not None:
            self.engine.stop()
        self.engine, self.key = None, None


# Every process this test session starts inherits this marker, so the guard below can tell the
# session's own leftovers from anything else on the host (it never signals a process without it).
SESSION_MARK = f"{__import__('os').getpid()}-{__import__('time').time_ns()}"
__import__("os").environ["AUTORESEARCH_TEST_SESSION"] = SESSION_MARK


def _session_processes() -> dict[int, str]:
    """pid -> command line of live processes (not this one) started under this test session: every
    one, whatever its name (vLLM renames its engine core ``VLLM::EngineCore``; a pattern missed it)."""
    import os
    from pathlib import Path

    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            env = (proc / "environ").read_bytes()
            if f"AUTORESEARCH_TEST_SESSION={SESSION_MARK}".encode() not in env:
                continue
            if "zombie" in (proc / "status").read_text().lower():
                continue
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found[int(proc.name)] = cmd
    return found


@pytest.fixture(scope="module", autouse=True)
def no_leaked_processes(request, engine_slot):
    """After each test module: engines, webservers and load senders it left running are stopped and
    reported. A leftover engine on a 2-core host steals the CPU that later measurements need (the
    research-graph tests turned `invalid` in full suites while such processes ran)."""
    import os
    import signal
    import warnings

    yield
    from engines.process import group_members

    # the slot's engine runs in a session of its own: its process group is the engine and its workers
    keep = (
        set(group_members(engine_slot.engine.pid))
        if engine_slot.engine is not None and engine_slot.engine.pid
        else set()
    )
    leaked = {pid: cmd for pid, cmd in _session_processes().items() if pid not in keep}
    for pid in leaked:
        try:
            os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _report_exhaustion(request.module.__name__)
    if leaked:
        reporter = _reporter()
        if reporter is not None:
            reporter.write_line(
                f"\n[leak] {request.module.__name__} left {len(leaked)} process(es) running: "
                + "; ".join(cmd[:80] for cmd in list(leaked.values())[:3])
            )
        warnings.warn(
            f"{request.module.__name__} left {len(leaked)} process(es) running (stopped now): "
            + "; ".join(f"{pid}: {cmd[:120]}" for pid, cmd in list(leaked.items())[:5]),
            stacklevel=1,
        )


@pytest.fixture(scope="session")
def definitions() -> DefinitionSet:
    """The shipped defs folder (definitions), loaded and validated."""
    return load_definitions(definitions_dir())


@pytest.fixture(scope="session")
def engine_slot() -> Iterator[EngineSlot]:
    slot = EngineSlot()
    try:
        yield slot
    finally:
        slot.release()


@pytest.fixture
def tiny_engine(engine_slot: EngineSlot, definitions: DefinitionSet) -> RunningEngine:
    """vLLM serving the tiny random model exactly as definitions/endpoints/tiny_random/defs.yaml says."""
    return engine_slot.get(definitions.endpoint("tiny_random"))


@pytest.fixture
def smollm_spec(definitions: DefinitionSet) -> EndpointSpec:
    """support_smollm with SMOLLM_TEST_DIFF applied (prefix caching on, cached-token usage)."""
    spec = definitions.endpoint("support_smollm")
    return spec.with_engine_args(apply_diff(spec.engine.args, SMOLLM_TEST_DIFF))


@pytest.fixture
def smollm_engine(engine_slot: EngineSlot, smollm_spec: EndpointSpec) -> RunningEngine:
    """vLLM serving the real SmolLM2-135M-Instruct (support_smollm + SMOLLM_TEST_DIFF)."""
    return engine_slot.get(smollm_spec)


@pytest.fixture
def store(tmp_path):
    """An empty research memory of the test's own (tests/helpers_memory.py: memory_store)."""
    from helpers_memory import memory_store

    return memory_store(tmp_path, timeout_s=10)


# --- the research graph, materialised once (tests/test_dagster_pipeline.py, tests/test_ui_browser.py)

QUICK_ENDPOINT = """\
# A deliberately poor tiny-model endpoint (one sequence at a time) for the asset-graph tests.
endpoint:
  name: quick
  model: {path: "builtin:tiny-random", served_name: tiny-random, revision: seed-0}
  engine:
    kind: vllm
    startup_timeout_s: 900
    args: ["--max-num-seqs", "1", "--max-model-len", "4096", "--enforce-eager", "--dtype", "float32",
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    env: {VLLM_CPU_KVCACHE_SPACE: "1", VLLM_CPU_OMP_THREADS_BIND: "0"}
  sla: {ttft_ms: 1000, itl_ms: 300, max_error_rate: 0.01}
  traffic: {kind: sample, seed: 3, limit: 200}
  sweep: {rates: [1, 2, 4, 8], step_duration_s: 4, warmup_requests: 2, repeats: 2, max_send_lag_ms: 1000,
          min_rate_ratio: 0.9}
  soak: {hold_s: 0}  # the soak has its own tests (tests/test_soak*.py)
campaign:
  name: quick_campaign
  endpoint: quick
  subagents: 1
  repeats: 1
  # one candidate sweep decides a clear case (x4-5 here); a sweep disturbed by this shared 2-core host once
  # gave x1.29, an interval that straddles: the sequential rule then adds sweeps instead of judging 'same'
  extra_repeats: 2
  profile_seconds: 0  # the profiler is covered by tests/test_profile.py on a real trace; here it once hung
                      # vLLM's worker (stop failed on a decode error, then the worker grew until OOM)
"""
QUICK_STAGES = ["replay_pool", "baseline_runs", "noise_floor", "load_curve", "diagnosis", "proposals"]


class ResearchGraph:
    """Where the materialised graph lives: definitions, state root and Dagster home."""

    def __init__(self, root):
        import shutil

        self.definitions_dir = root / "definitions"
        shutil.copytree(definitions_dir(), self.definitions_dir)
        write_declarations(self.definitions_dir, QUICK_ENDPOINT)
        self.home = root / "autoresearch_home"
        self.dagster_home = root / "dagster_home"
        self.dagster_home.mkdir()
        (self.dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        self.errors: list[str] = []

    @property
    def env(self) -> dict[str, str]:
        from specs.paths import models_dir

        return {
            "AUTORESEARCH_DEFINITIONS": str(self.definitions_dir),
            "AUTORESEARCH_HOME": str(self.home),
            "AUTORESEARCH_MODELS": str(models_dir()),
        }

    def instance(self):
        import dagster as dg

        return dg.DagsterInstance.from_config(str(self.dagster_home))


def _materialize(defs, instance, names: list[str], partition: str | None = None) -> None:
    import dagster as dg

    keys = [dg.AssetKey(["quick", n]) for n in names]
    graph = defs.resolve_asset_graph()
    upstream = {k for k in graph.get_all_asset_keys() if k.path[0] == "quick" and graph.get(k).is_materializable}
    result = dg.materialize(
        [defs.get_assets_def(k) for k in sorted(upstream)],
        instance=instance,
        partition_key=partition,
        resources=defs.resources,
        selection=keys,
    )
    assert result.success, f"materialising {names} failed"


@pytest.fixture(scope="session")
def research_graph(tmp_path_factory, engine_slot: EngineSlot) -> Iterator[ResearchGraph]:
    """The quick endpoint's whole research graph materialised in-process (real engines, real DuckDB):
    replay pool -> baseline sweeps -> noise floor -> load curve -> diagnosis -> proposals ->
    candidate run + verdict (one dynamic partition) -> confirmed baseline -> review report -> Pareto front."""
    engine_slot.release()  # the graph starts its own engines: keep one server at a time
    graph = ResearchGraph(tmp_path_factory.mktemp("research_graph"))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in graph.env.items():
            patch.setenv(name, value)
        patch.delenv("AUTORESEARCH_LLM_MODEL", raising=False)  # the rule-based proposer
        from dagster_project.definitions import build_definitions

        defs = build_definitions(graph.definitions_dir)
        with graph.instance() as instance:
            _materialize(defs, instance, QUICK_STAGES)
            for partition in instance.get_dynamic_partitions("quick__candidates"):
                _materialize(defs, instance, ["candidate_runs", "verdicts"], partition=partition)
            _materialize(defs, instance, ["confirmed_baseline", "review_report", "pareto_front"])
    yield graph  # the environment is restored: later tests see their own state root


def pytest_collection_modifyitems(session, config, items):
    """The fast definitions snapshot runs first: a broken definition fails CI in seconds."""
    items.sort(key=lambda item: 0 if item.nodeid.startswith("tests/test_definitions_snapshot.py") else 1)


# --- what CI shows even when it runs out of time ----------------------------------------------
# CI keeps only the tail of the output, and pytest prints its failure summary at the very end: a run
# cut off by CI's limit would say nothing about why. Each failure, and each test over a minute, is
# therefore written as one line the moment it ends, and the header says how fast this host is.

_SLOW_TEST_S = 60.0


def pytest_sessionstart(session):
    """The host's speed as the first line (``-q`` hides pytest's own header)."""
    import time

    start = time.perf_counter()
    total = 0
    for i in range(3_000_000):
        total += i
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"host speed: a 3M-step Python loop took {time.perf_counter() - start:.2f} s (about 0.15 s on a quick core)"
        )


def pytest_runtest_logreport(report):
    reporter = _reporter()
    if reporter is None:
        return
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        reason = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1:]
        reason = " ".join(str(reason).split())[:300]
        reporter.write_line(f"\n[{report.when} failed after {report.duration:.0f} s] {report.nodeid}: {reason}")
    elif report.duration > _SLOW_TEST_S:
        reporter.write_line(f"\n[{report.when} took {report.duration:.0f} s] {report.nodeid}")


def pytest_configure(config):
    global _CONFIG
    _CONFIG = config


_CONFIG = None


def _reporter():
    return _CONFIG.pluginmanager.get_plugin("terminalreporter") if _CONFIG is not None else None


def _report_exhaustion(module: str) -> None:
    """One line when this process holds many files or threads, or the host runs low on memory: the
    failures such a state causes show up in unrelated tests later."""
    import os
    import threading

    fds = len(os.listdir("/proc/self/fd"))
    available = next(
        (int(line.split()[1]) // 1024 for line in open("/proc/meminfo") if line.startswith("MemAvailable")), None
    )
    if fds > 500 or threading.active_count() > 50 or (available is not None and available < 3072):
        reporter = _reporter()
        if reporter is not None:
            reporter.write_line(
                f"\n[after {module}] open files {fds}, threads {threading.active_count()}, "
                f"memory available {available} MiB"
            )
