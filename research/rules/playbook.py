"""The rule-based proposer's catalogue: which techniques answer which bottleneck (``PLAYBOOK``, best
first), and what each technique predicts and what would falsify it (``EXPECTATIONS``).

Apart from the techniques and the proposer so that adding a rule is one entry here plus its technique,
and the proposer reads the catalogue without knowing any technique.
"""

from __future__ import annotations

from research.rules.context import Technique
from research.rules.techniques import (
    async_scheduling,
    bounded_kv_cache,
    compile_model,
    drop_speculation,
    enable_prefix_caching,
    faster_attention,
    fewer_sequences,
    fp8_kv_cache,
    graphs,
    larger_token_budget,
    more_kv_blocks,
    more_kv_memory,
    more_tensor_parallel,
    ngram_speculation,
    partial_prefills,
    raise_batch_limit,
    smaller_prefill_chunks,
    tp_to_dp,
    weight_quantization,
)

#: bottleneck -> techniques, most promising first. The first applicable one is the proposal's
#: intervention, the rest its ranked alternatives.
PLAYBOOK: dict[str, list[Technique]] = {
    "batch_limit": [raise_batch_limit, lambda c: raise_batch_limit(c, 2.0), larger_token_budget],
    "prefix_cache_unused": [enable_prefix_caching],
    "kv_cache_pressure": [more_kv_memory, more_kv_blocks, fp8_kv_cache, fewer_sequences],
    "prefill_interference": [smaller_prefill_chunks, partial_prefills, graphs],
    "prefill_bound": [larger_token_budget, enable_prefix_caching, more_tensor_parallel, faster_attention],
    "decode_bound": [ngram_speculation, raise_batch_limit, weight_quantization, faster_attention],
    "cpu_overhead": [graphs, async_scheduling, compile_model, raise_batch_limit],
    "communication": [tp_to_dp],
    "matmul_bound": [weight_quantization, more_tensor_parallel, raise_batch_limit],
    "attention_bound": [enable_prefix_caching, fp8_kv_cache],
    "sampling_overhead": [async_scheduling],
    "speculation_waste": [drop_speculation],
    # the adapter's internal settings for it (memory fraction, batch limit) follow
    "memory_headroom": [bounded_kv_cache],
}

#: What each technique should do to the measurements, what would prove it wrong, and the capacity ratio
#: it predicts (None: no number).
EXPECTATIONS: dict[str, tuple[str, str, float | None]] = {
    "raise_max_num_seqs": (
        "more requests run per step: the waiting queue stays short at the old capacity, TTFT p95 "
        "drops there and capacity rises while ITL grows only modestly",
        "capacity within the noise floor of the baseline, or requests still wait while running "
        "stays below the new limit (then something else bounds the batch)",
        1.5,
    ),
    "raise_batch_tokens": (
        "larger batches per step, higher throughput at the same ITL",
        "no capacity change beyond the noise floor",
        1.2,
    ),
    "continuous_batching": (
        "requests join running batches: throughput rises several fold",
        "capacity within the noise floor",
        2.0,
    ),
    "enable_prefix_caching": (
        "the engine's prefix-cache hit rate approaches the pool's prefix reuse, prefill work and "
        "TTFT fall, capacity rises",
        "hit rate stays near zero (prefixes do not align with KV blocks) or capacity does not leave the noise floor",
        1.3,
    ),
    "chunked_prefill": (
        "ITL p95 falls at the same rate because long prefills are split across steps; capacity rises "
        "when ITL was the SLA limit",
        "ITL p95 unchanged or TTFT rises enough to lower capacity",
        1.1,
    ),
    "partial_prefills": (
        "short prompts no longer wait behind long ones: TTFT p95 falls for mixed traffic",
        "TTFT p95 and capacity unchanged",
        1.1,
    ),
    "raise_max_num_batched_tokens": (
        "prefills complete in fewer steps: TTFT falls, capacity rises for prompt-heavy traffic",
        "TTFT unchanged or ITL rises enough to lower capacity",
        1.15,
    ),
    "ngram_speculative_decoding": (
        "outputs that copy prompt text (JSON, tool arguments) are drafted from the prompt: "
        "acceptance rate above 30%, ITL falls, capacity rises",
        "acceptance below 20% or ITL/capacity no better than the noise floor",
        1.15,
    ),
    "more_kv_cache_memory": ("fewer preemptions and more concurrent sequences", "preemptions unchanged", 1.1),
    "kv_cache_fp8": (
        "KV cache holds about twice the tokens: no preemptions, larger batches (outputs change slightly: "
        "needs distribution checks)",
        "no capacity gain, or token-probability divergence beyond limits",
        1.2,
    ),
    "lower_max_num_seqs": (
        "no preemptions; slightly lower peak concurrency but steadier latency",
        "capacity falls beyond the noise floor",
        1.0,
    ),
    "torch_compile": (
        "fused kernels: fewer launches per decode step, ITL falls (start-up takes longer)",
        "ITL unchanged or worse",
        1.1,
    ),
    "attention_kernel": (
        "a faster attention kernel shortens each step, most for long prompts: TTFT and ITL fall",
        "TTFT and ITL unchanged, or the engine fails to start with this kernel",
        1.1,
    ),
    "bounded_kv_cache": (
        "the engine holds its measured capacity through the soak and its overload without running out of "
        "memory: requests beyond the cache queue instead; capacity within the noise of the short steps",
        "it still dies of OOM under sustained load, or capacity falls beyond the noise (the cache was too "
        "small for the load the SLA allows)",
        None,  # its gain is the load it sustains, not a short step's capacity: never queued below the MDE
    ),
    "more_kv_blocks": ("more KV blocks: more sequences fit at once, no evictions", "capacity unchanged", 1.1),
    "weight_quantization": (
        "matmuls read half the bytes: decode steps faster (lossy: needs distribution checks)",
        "no ITL improvement or quality checks fail",
        1.3,
    ),
    "async_scheduling": (
        "scheduling overlaps execution: idle gaps between steps shrink, ITL falls",
        "idle gap fraction and ITL unchanged",
        1.1,
    ),
    "cuda_graphs": (
        "kernel launch overhead disappears: the decode step approaches the roofline, ITL falls at every "
        "load and capacity rises where ITL was the SLA limit",
        "ITL at the lowest load unchanged",
        1.5,
    ),
    "parallelism_tp_to_dp": (
        "no all-reduce per layer: per-GPU throughput rises",
        "capacity per GPU unchanged or lower",
        1.2,
    ),
    "parallelism_more_tp": ("matmuls split across more GPUs: lower latency per step", "capacity per GPU falls", 1.0),
    "disable_speculative_decoding": ("no wasted draft work: ITL and capacity improve", "ITL rises", 1.05),
}


def expectation(technique: str) -> tuple[str, str, float | None]:
    """(prediction, falsification, predicted capacity ratio) of ``technique``; a generic one when unknown."""
    return EXPECTATIONS.get(
        technique, ("capacity rises beyond the noise floor", "capacity within the noise floor", None)
    )
