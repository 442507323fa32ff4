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

from autoresearch.config import DefinitionSet, EndpointSpec, load_definitions
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


@pytest.fixture(scope="session")
def definitions() -> DefinitionSet:
    """The shipped definitions/ folder, loaded and validated."""
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
    """vLLM serving the tiny random model exactly as definitions/endpoints/tiny_random.yaml says."""
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
