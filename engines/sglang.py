"""SGLang adapter.

SGLang has no CPU build, so this adapter cannot run on the CPU machines: it is verified
against SGLang's documented CLI (``python -m sglang.launch_server --model-path ... --enable-metrics``),
endpoints (``/health``, ``/metrics``, ``/flush_cache``, ``/start_profile``, ``/stop_profile``) and
metric names (docs/references/production_metrics.md and srt/metrics/collector.py).
The profiler writes to ``SGLANG_TORCH_PROFILER_DIR``.

SGLang's flag set is not shipped (its parser cannot be built here), so flag validation
checks structure and adapter-owned flags only.
"""

from __future__ import annotations

from pathlib import Path

from specs.engine_args import REMOVE
from engines import value_checks as vc
from engines.base import EngineAdapter, Knob, MetricsSnapshot, Vocabulary
from engines.internals import InternalSetting
from engines.metrics import snapshot_from_text
from engines.vllm import validate_against

# Documented SGLang sample names. ``cached_tokens_total`` counts prefix-cache hit tokens and
# ``prompt_tokens_total`` all prompt tokens, so together they play vLLM's prefix-cache
# hits/queries counters. Retractions are SGLang's preemptions.
SGLANG_FIELDS: dict[str, str | tuple[str, ...]] = {
    "requests_running": "sglang:num_running_reqs",
    "requests_waiting": "sglang:num_queue_reqs",
    "kv_cache_usage": "sglang:token_usage",
    "preemptions_total": "sglang:num_retracted_requests_total",
    "prefix_cache_queries_total": "sglang:prompt_tokens_total",
    "prefix_cache_hits_total": "sglang:cached_tokens_total",
    "prompt_tokens_total": "sglang:prompt_tokens_total",
    "generation_tokens_total": "sglang:generation_tokens_total",
}

RESERVED_FLAGS = frozenset({"--model-path", "--model", "--served-model-name", "--host", "--port"})


SGLANG_VOCABULARY = Vocabulary(
    batch_limit=Knob("--max-running-requests", 256, 128),
    token_budget=Knob("--chunked-prefill-size", 4096),
    prefill_chunk=Knob("--chunked-prefill-size", 2048),
    kv_memory_fraction=("--mem-fraction-static", 0.85, 0.93),
    cache_block_size_gpu=1,
    cache_block_size_cpu=1,
    block_size_flag="--page-size",  # radix cache: token granular
    prefix_cache={"--disable-radix-cache": REMOVE},
    prefix_cache_off_flag="--disable-radix-cache",
    prefix_cache_default_on=True,
    cuda_graphs={"--disable-cuda-graph": REMOVE},
    compile={"--enable-torch-compile": None},
    kv_cache_dtype=("--kv-cache-dtype", "fp8_e5m2"),
    weight_quantization=("--quantization", "fp8"),
    dtype_flag="--dtype",
    tensor_parallel_flag="--tp-size",
    data_parallel_flag="--dp-size",
    lossy_flags=frozenset({"--quantization", "--kv-cache-dtype"}),
)


#: Scheduler and CUDA-graph settings beyond the flags the rules know, verified against SGLang 0.5.23's source
#: (the registry wheel sglang-0.5.23-cp311 manylinux_2_34, sha256 00b3cd5b265ac76c...; sglang/srt/arg_groups/
#: fields/schedule.py and exec_.py). In 0.5.23 ``--disable-cuda-graph`` is a deprecated spelling of
#: ``--cuda-graph-backend-{decode,prefill}=disabled`` and ``--cuda-graph-max-bs`` became
#: ``--cuda-graph-max-bs-decode``.
_SGLANG_FIELDS = "sglang 0.5.23 sglang/srt/arg_groups/fields/{schedule,exec_}.py"
SGLANG_INTERNALS = (
    InternalSetting(
        "continuous_decode_steps",
        None,
        {"--num-continuous-decode-steps": "4"},
        ("cpu_overhead",),
        "the scheduler runs 4 decode steps per scheduling pass (default 1): less scheduling overhead per token, "
        "ITL and capacity improve where the device idles between steps",
        "ITL unchanged, or TTFT p95 rises past the SLA (new requests wait up to 4 steps to join)",
        "higher TTFT: arrivals join the batch only every 4 steps",
        builds="gpu",
        source=_SGLANG_FIELDS,
    ),
    InternalSetting(
        "decode_graph_batches_256",
        None,
        {"--cuda-graph-max-bs-decode": "256"},
        ("cpu_overhead",),
        "decode batches up to 256 requests replay a captured graph: at high concurrency the larger batches "
        "stop running eagerly",
        "ITL at capacity unchanged (the running batch stayed below the default maximum), or start-up grows",
        "more graph memory and a longer start-up",
        builds="gpu",
        source=_SGLANG_FIELDS,
    ),
    InternalSetting(
        "no_graph_padding",
        None,
        {"--disable-cuda-graph-padding": None},
        ("padding_waste",),
        "a batch whose size needs padding runs eagerly instead of padded into the next captured graph: no "
        "work spent on padding rows",
        "ITL unchanged or worse (the eager steps cost more than the padding saved)",
        "eager steps at batch sizes between captured ones",
        builds="gpu",
        source=_SGLANG_FIELDS,
    ),
    InternalSetting(
        "eager_admission",
        None,
        {"--schedule-conservativeness": "0.7"},
        ("batch_limit", "kv_cache_pressure"),
        "the scheduler admits requests against a less conservative KV estimate (0.7, default 1.0): a larger "
        "running batch before the KV cache is full",
        "the running batch does not grow, or retractions (preemptions) rise and capacity falls",
        "retractions when outputs run longer than estimated",
        source=_SGLANG_FIELDS,
    ),
)


class SglangAdapter(EngineAdapter):
    kind = "sglang"
    known_flags: frozenset[str] = frozenset()
    #: values each flag takes (engines.value_checks): a proposal outside them never starts an engine
    value_checks = {
        "--max-running-requests": vc.integer(1, 65536),
        "--chunked-prefill-size": vc.integer(-1, 10**7),
        "--max-prefill-tokens": vc.integer(16, 10**7),
        "--mem-fraction-static": vc.real(0.0, 1.0),
        "--tp-size": vc.integer(1, 1024),
        "--dp-size": vc.integer(1, 1024),
        "--schedule-policy": vc.choice("lpm", "random", "fcfs", "dfs-weight", "lof", "priority"),
        "--kv-cache-dtype": vc.choice("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"),
        "--disable-radix-cache": vc.switch,
        "--enable-torch-compile": vc.switch,
        "--num-continuous-decode-steps": vc.integer(1, 64),
        "--cuda-graph-max-bs-decode": vc.integer(1, 4096),
        "--disable-cuda-graph-padding": vc.switch,
        "--schedule-conservativeness": vc.real(0.0, 10.0),
    }
    internal_settings = SGLANG_INTERNALS
    vocabulary = SGLANG_VOCABULARY
    honours_ignore_eos = True
    evidence = frozenset({"metrics", "profile", "logprobs", "prefix_cache_reset"})
    version_distributions = ("sglang",)
    source_packages = ("sglang",)
    remote_packages = ("sglang==0.5.23",)  # no CPU build: never run here (its registry release of 2026-11)
    health_path = "/health"
    metrics_path = "/metrics"
    reset_prefix_cache_path = "/flush_cache"
    start_profile_path = "/start_profile"
    stop_profile_path = "/stop_profile"

    def launch_command(self, model_dir: Path) -> list[str]:
        return [
            self.engine_python(),
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(model_dir),
            "--served-model-name",
            self.served_model_name(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--enable-metrics",
            *[a for a in self.cli_args() if a != "--enable-metrics"],
        ]

    def profile_env(self, profile_dir: Path) -> dict[str, str]:
        return {"SGLANG_TORCH_PROFILER_DIR": str(Path(profile_dir).resolve())}

    def parse_metrics(self, text: str, timestamp: float) -> MetricsSnapshot:
        return snapshot_from_text(text, timestamp, SGLANG_FIELDS, prefix="sglang:")

    def validate_flags(self, args: list[str]) -> list[str]:
        return validate_against(args, self.known_flags, self.kind, RESERVED_FLAGS)

    @classmethod
    def launch_problems(cls, parsed: dict[str, str | None], gpu_count: int | None) -> list[str]:
        try:
            tp = int(parsed.get("--tp-size") or 1)
        except ValueError:
            return []
        if gpu_count is not None and tp > max(gpu_count, 1):
            return [f"--tp-size {tp} exceeds the {max(gpu_count, 1)} GPU(s) available"]
        return []
