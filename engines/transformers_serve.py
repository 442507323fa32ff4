"""``transformers serve`` adapter: the serving engine on the GPU machine (no vLLM there).

Started as ``python -m transformers.cli.transformers serve MODEL_DIR --host 127.0.0.1 --port P``
plus engine.args (``--continuous-batching``, ``--cb-*`` ...). It answers ``/health`` and the
OpenAI routes, but exports NO ``/metrics``, has no prefix-cache reset and no profiler
endpoint: snapshots are empty (timestamp only) and reset/profile raise EngineError.
Clients must send the model directory as ``model`` (the server names models by path).
"""

from __future__ import annotations

from pathlib import Path

from engines.base import EngineAdapter, MetricsSnapshot
from engines.vllm import validate_against

# Options of `transformers serve` (transformers 5.x, typer: booleans also have --no-X).
TRANSFORMERS_SERVE_FLAGS = frozenset({
    "--continuous-batching", "--no-continuous-batching", "--attn-implementation", "--compile", "--no-compile",
    "--quantization", "--reasoning", "--chat-template-kwargs", "--device", "--dtype",
    "--trust-remote-code", "--no-trust-remote-code", "--model-timeout", "--cb-block-size", "--cb-num-blocks",
    "--cb-max-batch-tokens", "--cb-max-memory-percent", "--cb-use-cuda-graph", "--no-cb-use-cuda-graph",
    "--host", "--port", "--enable-cors", "--no-enable-cors", "--log-level", "--default-seed",
})
RESERVED_FLAGS = frozenset({"--host", "--port"})


class TransformersServeAdapter(EngineAdapter):
    kind = "transformers"
    known_flags = TRANSFORMERS_SERVE_FLAGS
    version_distributions = ("transformers",)
    health_path = "/health"
    metrics_path = ""  # none exported
    reset_prefix_cache_path = None
    start_profile_path = None
    stop_profile_path = None

    def launch_command(self, model_dir: Path) -> list[str]:
        return [
            self.engine_python(), "-m", "transformers.cli.transformers", "serve", str(model_dir),
            "--host", "127.0.0.1", "--port", str(self.port),
            *self.spec.engine.args,
        ]

    def served_model_name(self, model_dir: Path) -> str:
        return str(model_dir)

    def parse_metrics(self, text: str, timestamp: float) -> MetricsSnapshot:
        return MetricsSnapshot(timestamp=timestamp)

    def validate_flags(self, args: list[str]) -> list[str]:
        return validate_against(args, self.known_flags, self.kind, RESERVED_FLAGS)
