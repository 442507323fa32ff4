"""``transformers serve`` adapter: the serving engine on the GPU machine (no vLLM there).

Started as ``python -m transformers.cli.transformers serve MODEL_DIR --host 127.0.0.1 --port P``
plus engine.args (``--continuous-batching``, ``--cb-*`` ...). It answers ``/health`` and the
OpenAI routes, but exports NO ``/metrics``, has no prefix-cache reset and no profiler
endpoint: snapshots are empty (timestamp only) and reset/profile raise EngineError.
Clients must send the model directory as ``model`` (the server names models by path).
"""

from __future__ import annotations

from pathlib import Path

from engines import value_checks as vc
from engines.base import EngineAdapter, Knob, MetricsSnapshot, Vocabulary
from engines.internals import InternalSetting
from engines.vllm import validate_against

# Options of `transformers serve` (transformers 5.x, typer: booleans also have --no-X).
TRANSFORMERS_SERVE_FLAGS = frozenset(
    {
        "--continuous-batching",
        "--no-continuous-batching",
        "--attn-implementation",
        "--compile",
        "--no-compile",
        "--quantization",
        "--reasoning",
        "--chat-template-kwargs",
        "--device",
        "--dtype",
        "--trust-remote-code",
        "--no-trust-remote-code",
        "--model-timeout",
        "--cb-block-size",
        "--cb-num-blocks",
        "--cb-max-batch-tokens",
        "--cb-max-memory-percent",
        "--cb-use-cuda-graph",
        "--no-cb-use-cuda-graph",
        "--host",
        "--port",
        "--enable-cors",
        "--no-enable-cors",
        "--log-level",
        "--default-seed",
    }
)
RESERVED_FLAGS = frozenset({"--host", "--port"})


# transformers 5.17-5.19: --cb-max-batch-tokens defaults to 8192 on an H200 (measured), the KV cache to
# about 90% of free memory. Graphs and compile need a GPU; on a CPU host eager is what runs.
TRANSFORMERS_VOCABULARY = Vocabulary(
    token_budget=Knob("--cb-max-batch-tokens", 8192, 2048),
    kv_blocks=Knob("--cb-num-blocks", 4096, 1024),
    kv_memory_fraction=("--cb-max-memory-percent", 0.9, 0.95),
    cache_block_size_gpu=256,
    cache_block_size_cpu=256,
    block_size_flag="--cb-block-size",
    continuous_batching={"--continuous-batching": None},
    cuda_graphs={"--cb-use-cuda-graph": None},
    compile={"--compile": None},
    attention_flag="--attn-implementation",
    attention_choices=("paged|flash_attention_2", "paged|sdpa"),
    weight_quantization=("--quantization", "bnb-8bit"),
    dtype_flag="--dtype",
    lossy_flags=frozenset({"--dtype", "--quantization"}),
    # continuous batching shares cached prefix blocks between requests (allow_block_sharing, on by default,
    # no CLI switch) and the server has no route to empty that cache: sweeps never replay a prompt on it
    prefix_cache_default_on=True,
)

#: chat fields transformers serve answers with HTTP 422 (UNUSED_CHAT_COMPLETION_FIELDS, 5.17-5.19)
TRANSFORMERS_REJECTED_FIELDS = frozenset(
    {
        "logprobs",
        "top_logprobs",
        "stream_options",
        "tool_choice",
        "response_format",
        "n",
        "user",
        "return_token_ids",
        "prompt_logprobs",
    }
)


def _cb(name: str, settings: dict, addresses: tuple[str, ...], expect: str, falsified_by: str, risk: str = ""):
    return InternalSetting(name, "transformers_cb_config", settings, addresses, expect, falsified_by, risk)


#: ContinuousBatchingConfig fields `transformers serve` has no flag for (ENVIRONMENT.md: 5.17 on the H200,
#: 5.19 here), as candidates. Padding decides the set of shapes CUDA graphs are captured for (one lazy
#: capture, ~0.2 s of stall, per new shape) and how much attention work is padding; memory headroom and
#: batch limits decide whether graph pools and temporaries still fit under sustained load.
TRANSFORMERS_INTERNALS = (
    _cb(
        "bounded_shapes",
        {"q_padding_interval_size": 512, "kv_padding_interval_size": 4096},
        ("graph_capture_stalls", "padding_waste"),
        "KV padded to 4096-token steps instead of the cache's maximum: each step reads less padded KV, ITL at "
        "low load falls by about a third",
        "ITL at low load unchanged, or capture stalls and ITL p95 rise at capacity (more distinct shapes)",
        "more distinct graph shapes, each with its own pool: it OOMed within 45 s at 5 req/s on the H200",
    ),
    _cb(
        "bounded_shapes_headroom",
        {"q_padding_interval_size": 512, "kv_padding_interval_size": 4096, "max_memory_percent": 0.7},
        ("graph_capture_stalls", "padding_waste", "memory_headroom"),
        "the shorter padded steps of bounded shapes, with 30% of free memory left for graph pools and "
        "temporaries so that sustained load no longer OOMs",
        "the soak still dies of OOM, or the smaller KV cache lowers capacity beyond the noise",
    ),
    _cb(
        "coarse_kv_padding",
        {"kv_padding_interval_size": 8192},
        ("padding_waste", "graph_capture_stalls"),
        "half the padded KV of the default at most, with at most twice its KV shapes: a middle ground",
        "ITL at low load unchanged",
    ),
    _cb(
        "memory_headroom",
        {"max_memory_percent": 0.75},
        ("memory_headroom",),
        "a KV cache of 75% of free memory instead of ~90%: graph pools and attention temporaries fit under "
        "sustained load and overload, at the cost of fewer cached blocks",
        "capacity falls beyond the noise (the cache was the limit), or it still dies under sustained load",
    ),
    _cb(
        "batch_limit",
        {"max_requests_per_batch": 64},
        ("memory_headroom", "graph_capture_stalls"),
        "at most 64 requests per step: fewer padded shapes and bounded temporaries under overload, "
        "requests queue instead of the engine running out of memory",
        "capacity falls beyond the noise (batches above 64 were what carried the load)",
    ),
    _cb(
        "prefill_first",
        {"scheduler_type": "prefill_first"},
        ("prefill_interference", "cpu_overhead"),
        "waiting prompts are prefilled before decodes continue: TTFT p95 falls under load",
        "TTFT p95 unchanged, or ITL p95 rises enough to lower capacity",
    ),
)


class TransformersServeAdapter(EngineAdapter):
    kind = "transformers"
    known_flags = TRANSFORMERS_SERVE_FLAGS
    #: values each flag takes (engines.value_checks): a proposal outside them never starts an engine
    value_checks = {
        "--continuous-batching": vc.switch,
        "--cb-use-cuda-graph": vc.switch,
        "--compile": vc.switch,
        "--cb-max-batch-tokens": vc.integer(1, 10**7),
        "--cb-num-blocks": vc.integer(1, 10**8),
        "--cb-block-size": vc.integer(1, 4096),
        "--dtype": vc.choice("auto", "bfloat16", "float16", "float32"),
        "--attn-implementation": vc.choice(
            "sdpa",
            "eager",
            "flash_attention_2",
            "flash_attention_3",
            "flex_attention",
            "paged|sdpa",
            "paged|eager",
            "paged|flash_attention_2",
            "paged|flash_attention_3",
            "paged|flex_attention",
            "paged_attention",
            "sdpa_paged",
            "eager_paged",
            "flex_attention",
        ),
    }
    vocabulary = TRANSFORMERS_VOCABULARY
    evidence = frozenset()  # no /metrics, no profiler route, no logprobs, no token ids
    #: its internals come from an overlay instead (engines/patches/transformers_cb_probe)
    evidence_overlay = "transformers_cb_probe"
    internal_settings = TRANSFORMERS_INTERNALS
    rejected_request_fields = TRANSFORMERS_REJECTED_FIELDS
    stop_grace_s = 5.0  # 5.17 on the H200 ignored SIGTERM for 20 s at every stop: KILL sooner
    version_distributions = ("transformers",)
    source_packages = ("transformers",)
    # as measured on the H200 (torch 2.11, transformers 5.17 and the web stack `transformers serve` needs)
    remote_packages = (
        "torch==2.11.0",
        "transformers==5.17.0",
        "fastapi==0.120.0",
        "starlette==0.48.0",
        "uvicorn",
        "openai<3",
        "accelerate",
    )
    health_path = "/health"
    metrics_path = ""  # none exported
    reset_prefix_cache_path = None
    start_profile_path = None
    stop_profile_path = None

    def launch_command(self, model_dir: Path) -> list[str]:
        return [
            self.engine_python(),
            "-m",
            "transformers.cli.transformers",
            "serve",
            str(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.cli_args(),
        ]

    def served_model_name(self, model_dir: Path) -> str:
        return str(model_dir)

    #: how old the evidence overlay's queue reading may be and still count (it writes once a second)
    QUEUE_FRESH_S = 5.0

    def parse_metrics(self, text: str, timestamp: float) -> MetricsSnapshot:
        """No /metrics: the queue (requests running and waiting) as the evidence overlay last read it, when
        that reading is fresh; unknown (None) otherwise, never zero."""
        queue = (self.internals() or {}).get("queue") or {}
        if queue and abs(timestamp - float(queue.get("at", 0.0))) <= self.QUEUE_FRESH_S:
            return MetricsSnapshot(
                timestamp=timestamp, requests_running=queue.get("running"), requests_waiting=queue.get("waiting")
            )
        return MetricsSnapshot(timestamp=timestamp)

    def validate_flags(self, args: list[str]) -> list[str]:
        return validate_against(args, self.known_flags, self.kind, RESERVED_FLAGS)
