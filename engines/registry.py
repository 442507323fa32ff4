"""The one registry of engine adapters: ``engine.kind`` in the YAML -> adapter class.

Everything that needs engine knowledge (launch, rules, diagnosis, correctness, replay) asks the
adapter class found here; nothing else branches on engine names.
"""

from __future__ import annotations

from specs.config import EndpointSpec
from specs.engine_args import parse_args
from engines.base import EngineAdapter, EngineError
from engines.external import ExternalAdapter
from engines.sglang import SglangAdapter
from engines.transformers_serve import TransformersServeAdapter
from engines.vllm import VllmAdapter

ADAPTERS: dict[str, type[EngineAdapter]] = {
    cls.kind: cls for cls in (VllmAdapter, SglangAdapter, TransformersServeAdapter, ExternalAdapter)
}


def adapter_class(kind: str) -> type[EngineAdapter]:
    """The adapter class for an engine kind; EngineError naming the known kinds otherwise."""
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise EngineError(f"unknown engine kind {kind!r}; known: {', '.join(sorted(ADAPTERS))}") from None


def block_size_for(spec: EndpointSpec) -> int:
    """KV-cache block size the endpoint's engine uses (its block-size flag if set, else its default)."""
    vocab = adapter_class(spec.engine.kind).vocabulary
    return vocab.block_size(parse_args(list(spec.engine.args)), cpu=spec.hardware.gpu_type == "cpu")
