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

from autoresearch.config import DefinitionSet, EndpointSpec
from dagster_project.lib import load_definitions
from dagster_project.lib.migrate import write_declarations
from autoresearch.engine_args import REMOVE, apply_diff
from autoresearch.paths import definitions_dir
from engines import RunningEngine, start_engine

# SmolLM2 as declared in support_smollm, but with prefix caching on and cached-token counts in
# `usage` (tests of cache reset need both; everything else is the shipped configuration).
SMOLLM_TEST_DIFF = {"--no-enable-prefix-caching": REMOVE, "--enable-prefix-caching": None,
                    "--enable-prompt-tokens-details": None}


class EngineSlot:
    """Holds at most one running engine for the whole session."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.engine: RunningEngine | None = None

    def get(self, spec: EndpointSpec, args: list[str] | None = None) -> RunningEngine:
        key = (spec.name, tuple(args) if args is not None else None)
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


# Relation tests that need long, quiet measurement (minutes of sweeps on a 2-core host whose
# scheduler stalls every process now and then): opt in with AUTORESEARCH_LONG_TESTS=1.
long_measurement = pytest.mark.skipif(
    __import__("os").environ.get("AUTORESEARCH_LONG_TESTS") != "1",
    reason="long measurement relation test: set AUTORESEARCH_LONG_TESTS=1 (needs a quiet machine, 15-30 min)")


@pytest.fixture(scope="session")
def definitions() -> DefinitionSet:
    """The shipped defs folder (dagster_project/defs), loaded and validated."""
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
    """vLLM serving the tiny random model exactly as dagster_project/defs/endpoints/tiny_random/defs.yaml says."""
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


# --- the research graph, materialised once (tests/test_dagster_pipeline.py, tests/test_ui_browser.py)

QUICK_ENDPOINT = """\
# A deliberately poor tiny-model endpoint (one sequence at a time) for the asset-graph tests.
endpoint:
  name: quick
  model: {path: "builtin:tiny-random", served_name: tiny-random, revision: seed-0}
  engine:
    kind: vllm
    args: ["--max-num-seqs", "1", "--max-model-len", "4096", "--enforce-eager", "--dtype", "float32",
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    env: {VLLM_CPU_KVCACHE_SPACE: "1", VLLM_CPU_OMP_THREADS_BIND: "0"}
  sla: {ttft_ms: 1000, itl_ms: 300, max_error_rate: 0.01}
  traffic: {kind: sample, seed: 3, limit: 200}
  sweep: {rates: [1, 2, 4, 8], step_duration_s: 4, warmup_requests: 2, repeats: 2, max_send_lag_ms: 1000,
          min_rate_ratio: 0.9}
campaign:
  name: quick_campaign
  endpoint: quick
  subagents: 1
  repeats: 1
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
        from autoresearch.paths import models_dir

        return {"AUTORESEARCH_DEFINITIONS": str(self.definitions_dir), "AUTORESEARCH_HOME": str(self.home),
                "AUTORESEARCH_MODELS": str(models_dir())}

    def instance(self):
        import dagster as dg

        return dg.DagsterInstance.from_config(str(self.dagster_home))


def _materialize(defs, instance, names: list[str], partition: str | None = None) -> None:
    import dagster as dg

    keys = [dg.AssetKey(["quick", n]) for n in names]
    graph = defs.resolve_asset_graph()
    upstream = {k for k in graph.get_all_asset_keys() if k.path[0] == "quick" and graph.get(k).is_materializable}
    result = dg.materialize([defs.get_assets_def(k) for k in sorted(upstream)], instance=instance,
                            partition_key=partition, resources=defs.resources, selection=keys)
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
