"""The techniques of the rule-based proposer: each writes one exact change to the engine's arguments,
in the engine's own flags (its ``Vocabulary``), or returns None where it does not apply.

Apart from the playbook (which bottleneck calls for which technique) and the proposer so that a technique
is one plain function of a ``Context``, testable alone and listed wherever it helps.
"""

from __future__ import annotations

import json
import math

from specs.engine_args import REMOVE
from engines.base import ArgDiff
from research.proposals import Intervention
from research.rules.context import Context

NGRAM_CONFIG = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def _pow2_at_least(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(x, 1.0))))


def _switch(
    ctx: Context, diff: ArgDiff | None, technique: str, *, gpu_only: bool = False, lossy: bool = False
) -> Intervention | None:
    """Turn a feature on when the engine has it and it is off."""
    if (gpu_only and ctx.cpu) or not ctx.changes(diff):
        return None
    return Intervention(technique=technique, engine_arg_diff=dict(diff), lossy=lossy)


def _remove_no_twin(ctx: Context, flag: str) -> ArgDiff:
    """The diff that removes the ``--no-`` twin of ``flag`` where the arguments set it (turning a feature on)."""
    twin = "--no-" + flag[2:]
    return {twin: REMOVE} if twin in ctx.args else {}


def continuous_batching(ctx: Context) -> Intervention | None:
    return _switch(ctx, ctx.vocab.continuous_batching, "continuous_batching")


def raise_batch_limit(ctx: Context, factor: float = 1.0) -> Intervention | None:
    """More sequences per step; an engine without a sequence limit batches by tokens instead."""
    if ctx.changes(ctx.vocab.continuous_batching):
        return continuous_batching(ctx)
    knob = ctx.vocab.batch_limit
    if knob is None:
        return larger_token_budget(ctx, factor, technique="raise_batch_tokens")
    current = ctx.knob(knob)
    demand = max(
        ctx.stat("over_requests_running_mean") + ctx.stat("over_requests_waiting_mean"), ctx.stat("over_in_flight_mean")
    )
    target = _pow2_at_least(max(2 * current, demand) * factor)
    target = min(max(target, current * 2), 1024)
    if target <= current:
        return None
    return Intervention(technique="raise_max_num_seqs", engine_arg_diff={knob.flag: str(target)})


def enable_prefix_caching(ctx: Context) -> Intervention | None:
    v = ctx.vocab
    if v.prefix_cache is None or v.prefix_cache_on(ctx.args):
        return None
    diff = dict(v.prefix_cache)
    if v.prefix_cache_off_flag and v.prefix_cache_off_flag in ctx.args:
        diff[v.prefix_cache_off_flag] = REMOVE
    return Intervention(technique="enable_prefix_caching", engine_arg_diff=diff)


def smaller_prefill_chunks(ctx: Context) -> Intervention | None:
    """Chunked prefill with a smaller token budget: long prompts stop stalling decodes."""
    knob = ctx.vocab.prefill_chunk
    if knob is None:
        return None
    current = ctx.knob(knob)
    seqs = ctx.knob(ctx.vocab.batch_limit) or 0
    target = max(256, seqs, current // 4)
    if target >= current:
        return None
    diff: ArgDiff = {knob.flag: str(target)}
    chunking = ctx.vocab.chunked_prefill or {}
    for flag in chunking:  # chunking on, and its --no- twin off
        diff.update(_remove_no_twin(ctx, flag))
        if flag not in ctx.args:
            diff[flag] = chunking[flag]
    return Intervention(technique="chunked_prefill", engine_arg_diff=diff)


def larger_token_budget(
    ctx: Context, factor: float = 1.0, technique: str = "raise_max_num_batched_tokens"
) -> Intervention | None:
    """More tokens per step: prefills finish in fewer steps and more requests join a batch."""
    knob = ctx.vocab.token_budget
    if knob is None:
        return None
    current = ctx.knob(knob)
    target = int(current * 2 * factor)
    return Intervention(technique=technique, engine_arg_diff={knob.flag: str(target)})


def partial_prefills(ctx: Context) -> Intervention | None:
    """Let short prompts prefill beside a long one instead of waiting behind it."""
    return _switch(ctx, ctx.vocab.partial_prefills, "partial_prefills")


def ngram_speculation(ctx: Context) -> Intervention | None:
    flag = ctx.vocab.speculation_flag
    if flag is None or flag in ctx.args:
        return None
    return Intervention(
        technique="ngram_speculative_decoding", engine_arg_diff={flag: json.dumps(NGRAM_CONFIG, separators=(",", ":"))}
    )


def more_kv_memory(ctx: Context) -> Intervention | None:
    v = ctx.vocab
    if ctx.cpu:
        return _switch(ctx, v.kv_memory_cpu, "more_kv_cache_memory")
    if v.kv_memory_fraction is None:
        return None
    flag, default, highest = v.kv_memory_fraction
    try:
        current = float(ctx.args.get(flag) or default)
    except ValueError:
        return None
    if current >= highest:
        return None
    return Intervention(technique="more_kv_cache_memory", engine_arg_diff={flag: f"{min(highest, current + 0.05):.2f}"})


def more_kv_blocks(ctx: Context) -> Intervention | None:
    """A larger KV cache in blocks (engines that size it by block count)."""
    knob = ctx.vocab.kv_blocks
    if knob is None or knob.flag not in ctx.args:
        return None  # unset = sized from free memory already
    return Intervention(technique="more_kv_blocks", engine_arg_diff={knob.flag: str(2 * ctx.knob(knob))})


def bounded_kv_cache(ctx: Context) -> Intervention | None:
    """A KV cache sized to what the overloaded step kept in flight (twice it, in whole blocks, a power of
    two) instead of most of free device memory (GPU engines that size it by block count). The scheduler
    then queues what does not fit, and the temporaries that grow with a batch's KV (paged attention
    gathers and expands it per layer) stay bounded: a fix for a configuration that runs out of memory
    under sustained load, not a speed-up."""
    knob = ctx.vocab.kv_blocks
    if knob is None or ctx.cpu or knob.flag in ctx.args:
        return None  # no such knob, or the cache already has a fixed size
    in_flight = max(ctx.stat("over_in_flight_mean"), ctx.stat("at_cap_in_flight_mean"))
    tokens = ctx.stat("prompt_tokens_mean") + ctx.stat("output_tokens_mean")
    if in_flight <= 0 or tokens <= 0:
        return None  # no demand measured: no size to write
    blocks = _pow2_at_least(2 * in_flight * tokens / ctx.vocab.block_size(ctx.args, cpu=False))
    return Intervention(technique="bounded_kv_cache", engine_arg_diff={knob.flag: str(blocks)})


def fp8_kv_cache(ctx: Context) -> Intervention | None:
    if ctx.vocab.kv_cache_dtype is None:
        return None
    flag, value = ctx.vocab.kv_cache_dtype
    if ctx.args.get(flag) not in (None, "auto"):
        return None
    return Intervention(technique="kv_cache_fp8", engine_arg_diff={flag: value}, lossy=True)


def fewer_sequences(ctx: Context) -> Intervention | None:
    knob = ctx.vocab.batch_limit
    if knob is None:
        return None
    current = ctx.knob(knob)
    if current <= 2:
        return None
    return Intervention(technique="lower_max_num_seqs", engine_arg_diff={knob.flag: str(max(1, current // 2))})


def weight_quantization(ctx: Context) -> Intervention | None:
    if ctx.cpu or ctx.vocab.weight_quantization is None:
        return None
    flag, value = ctx.vocab.weight_quantization
    if flag in ctx.args:
        return None
    return Intervention(technique="weight_quantization", engine_arg_diff={flag: value}, lossy=True)


def async_scheduling(ctx: Context) -> Intervention | None:
    off = ctx.vocab.async_scheduling
    inter = _switch(ctx, off, "async_scheduling")
    if inter is not None:
        for flag in off:
            inter.engine_arg_diff.update(_remove_no_twin(ctx, flag))
    return inter


def graphs(ctx: Context) -> Intervention | None:
    """Device graphs remove per-kernel launch overhead (not on a CPU host, where eager is what runs)."""
    return _switch(ctx, ctx.vocab.cuda_graphs, "cuda_graphs", gpu_only=True)


def compile_model(ctx: Context) -> Intervention | None:
    """Compiled kernels fuse small ops (GPU); start-up gets longer."""
    return _switch(ctx, ctx.vocab.compile, "torch_compile", gpu_only=True)


def faster_attention(ctx: Context) -> Intervention | None:
    """The fastest attention kernel the engine offers that is not in use yet."""
    v = ctx.vocab
    if v.attention_flag is None or ctx.cpu:
        return None
    current = ctx.args.get(v.attention_flag)
    for choice in v.attention_choices:
        if choice != current:
            return Intervention(technique="attention_kernel", engine_arg_diff={v.attention_flag: choice})
    return None


def tp_to_dp(ctx: Context) -> Intervention | None:
    v = ctx.vocab
    if v.tensor_parallel_flag is None or v.data_parallel_flag is None:
        return None
    tp = ctx.int_arg(v.tensor_parallel_flag, 1)
    if tp <= 1:
        return None
    return Intervention(
        technique="parallelism_tp_to_dp", engine_arg_diff={v.tensor_parallel_flag: "1", v.data_parallel_flag: str(tp)}
    )


def more_tensor_parallel(ctx: Context) -> Intervention | None:
    flag = ctx.vocab.tensor_parallel_flag
    if flag is None:
        return None
    tp = ctx.int_arg(flag, 1)
    if ctx.gpu_count < 2 * tp:
        return None
    return Intervention(technique="parallelism_more_tp", engine_arg_diff={flag: str(2 * tp)})


def drop_speculation(ctx: Context) -> Intervention | None:
    flag = ctx.vocab.speculation_flag
    if flag is None or flag not in ctx.args:
        return None
    return Intervention(technique="disable_speculative_decoding", engine_arg_diff={flag: REMOVE})
