"""The built-in, rule-based proposer: bottleneck signatures -> known serving techniques.

Used when no LLM is configured (and as the fallback when an LLM's answers are unusable), so the
research loop runs anywhere. It returns the same ``Proposal`` objects as the LLM subagents: an
explanation built from the diagnosis evidence, an exact argument diff for the endpoint's
engine with ranked alternatives, a prediction and what would falsify it.

To add a rule: write a ``_technique(ctx) -> Intervention | None`` (None = not applicable to
these arguments) and list it under the bottleneck in ``PLAYBOOK``; see docs/research_loop.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from specs.engine_args import REMOVE, parse_args
from engines.base import ArgDiff, Knob, Vocabulary
from engines.registry import ADAPTERS
from research.interventions import validate_intervention
from research.proposals import (
    BOTTLENECKS,
    Bottleneck,
    Diagnosis,
    DrafterSuggestion,
    Intervention,
    Proposal,
    ResearchQuestion,
)

NGRAM_CONFIG = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


@dataclass
class Context:
    """What a technique needs to write an exact diff: the diagnosis, the engine's vocabulary, its arguments."""

    diagnosis: Diagnosis
    kind: str
    args: dict[str, str | None]
    gpu_count: int  # 0 = CPU host
    vocab: Vocabulary = Vocabulary()

    @property
    def cpu(self) -> bool:
        return self.gpu_count == 0

    def int_arg(self, flag: str, default: int | None = None) -> int | None:
        try:
            return int(self.args[flag]) if self.args.get(flag) is not None else default
        except ValueError:
            return default

    def knob(self, knob: Knob | None) -> int | None:
        """The knob's current value (its default when unset); None when the engine has no such knob."""
        return None if knob is None else self.int_arg(knob.flag, knob.default(self.cpu))

    def changes(self, diff: ArgDiff | None) -> bool:
        """Whether applying ``diff`` would change the arguments (a switch that is off)."""
        if not diff:
            return False
        return any(
            (flag in self.args) if value == REMOVE else (flag not in self.args or self.args[flag] != value)
            for flag, value in diff.items()
        )

    def stat(self, key: str, default: float = 0.0) -> float:
        value = self.diagnosis.engine_stats.get(key, self.diagnosis.request_stats.get(key))
        return default if value is None else float(value)


def _pow2_at_least(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(x, 1.0))))


def _switch(
    ctx: Context, diff: ArgDiff | None, technique: str, *, gpu_only: bool = False, lossy: bool = False
) -> Intervention | None:
    """Turn a feature on when the engine has it and it is off."""
    if (gpu_only and ctx.cpu) or not ctx.changes(diff):
        return None
    return Intervention(technique=technique, engine_arg_diff=dict(diff), lossy=lossy)


# ---------------------------------------------------------------- techniques (one exact change each)


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
        if "--no-" + flag[2:] in ctx.args:
            diff["--no-" + flag[2:]] = REMOVE
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
            if "--no-" + flag[2:] in ctx.args:
                inter.engine_arg_diff["--no-" + flag[2:]] = REMOVE
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


Technique = Callable[[Context], Intervention | None]

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
}

# What each technique should do to the measurements, and what would prove it wrong.
_EXPECT: dict[str, tuple[str, str, float | None]] = {
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


def _known(technique: str) -> tuple[str, str, float | None]:
    return _EXPECT.get(technique, ("capacity rises beyond the noise floor", "capacity within the noise floor", None))


def _signature(intervention: Intervention) -> str:
    return json.dumps(intervention.engine_arg_diff, sort_keys=True)


def interventions_for(bottleneck: str, ctx: Context, skip: set[str] = frozenset()) -> list[Intervention]:
    """Applicable, valid interventions for one bottleneck, best first, minus ``skip`` (techniques
    or diff signatures already tried)."""
    out: list[Intervention] = []
    seen: set[str] = set()
    for technique in PLAYBOOK.get(bottleneck, []):
        intervention = technique(ctx)
        if intervention is None:
            continue
        sig = _signature(intervention)
        if sig in seen or sig in skip or intervention.technique in skip:
            continue
        check = validate_intervention(intervention, ctx.diagnosis.engine_args, ctx.kind, gpu_count=ctx.gpu_count)
        if not check.ok:
            continue
        seen.add(sig)
        out.append(intervention.model_copy(update={"lossy": check.lossy}))
    return out


def questions_for(diagnosis: Diagnosis, n: int) -> list[ResearchQuestion]:
    """One research question per suspected bottleneck, worst first (the orchestrator's fallback)."""
    out = []
    for i, b in enumerate(diagnosis.bottlenecks[:n]):
        out.append(
            ResearchQuestion(
                question_id=f"q{i + 1}-{b.name}",
                bottleneck=b.name,
                question=f"Is {diagnosis.endpoint} limited by {b.name.replace('_', ' ')} "
                f"({BOTTLENECKS[b.name]}), and which single change lifts its capacity the most?",
            )
        )
    return out


def propose(
    diagnosis: Diagnosis,
    n: int = 3,
    *,
    gpu_count: int = 0,
    skip: Iterable[str] = (),
    questions: list[ResearchQuestion] | None = None,
) -> list[Proposal]:
    """Up to ``n`` proposals, one distinct change each, for the worst bottlenecks first.

    ``skip``: techniques or diff signatures already tried (from memory or earlier rounds);
    ``gpu_count`` bounds parallelism changes (0 = CPU host).
    """
    cls = ADAPTERS.get(diagnosis.engine_kind)
    ctx = Context(
        diagnosis=diagnosis,
        kind=diagnosis.engine_kind,
        args=parse_args(diagnosis.engine_args),
        gpu_count=gpu_count,
        vocab=cls.vocabulary if cls is not None else Vocabulary(),
    )
    skip_set = set(skip)
    by_name = {b.name: b for b in diagnosis.bottlenecks}
    targets = questions if questions is not None else questions_for(diagnosis, len(diagnosis.bottlenecks))
    proposals: list[Proposal] = []
    used: set[str] = set(skip_set)
    # First pass: one proposal per question; second pass: next-best changes for the same
    # bottlenecks when there are fewer bottlenecks than subagents.
    for _ in range(2):
        for question in targets:
            if len(proposals) >= n:
                return proposals
            bottleneck = by_name.get(question.bottleneck)
            if bottleneck is None:
                continue
            options = interventions_for(bottleneck.name, ctx, used)
            if not options:
                continue
            proposals.append(_proposal(question, bottleneck, options, diagnosis, len(proposals) + 1))
            used.add(_signature(options[0]))
            used.add(options[0].technique)
    return proposals


def _proposal(
    question: ResearchQuestion, b: Bottleneck, options: list[Intervention], diagnosis: Diagnosis, index: int
) -> Proposal:
    main = options[0]
    prediction, falsification, ratio = _known(main.technique)
    if main.technique == "raise_max_num_seqs":
        stats = diagnosis.engine_stats
        running = stats.get("over_requests_running_mean") or 1.0
        demand = max(
            running + (stats.get("over_requests_waiting_mean") or 0.0), stats.get("over_in_flight_mean") or 0.0
        )
        ratio = round(min(2.5, math.sqrt(demand / max(running, 1e-9))), 2)
    if main.technique == "enable_prefix_caching":
        reuse = diagnosis.request_stats.get("prefix_reuse", 0.0)
        ratio = round(1.0 + 0.5 * reuse, 2)
    explanation = (
        f"{BOTTLENECKS[b.name].capitalize()}. Evidence: "
        + "; ".join(b.evidence)
        + f". {main.describe()} addresses this directly."
    )
    return Proposal(
        proposal_id=f"rules-{index}-{main.technique}",
        question=question.question,
        bottleneck=b.name,
        explanation=explanation,
        observations=list(b.evidence),
        intervention=main,
        alternatives=options[1:],
        prediction=prediction,
        predicted_capacity_ratio=ratio,
        falsification=falsification,
        source="rules",
    )


# ---------------------------------------------------------------- drafter training (issue 15)

#: Tokens per step at which a decode step stops being memory-bound (peak FLOP/s over bandwidth,
#: in tokens for bf16 weights). Order of magnitude only: GPUs several hundred, one CPU core tens.
RIDGE_TOKENS = {"gpu": 256.0, "cpu": 16.0}


def drafter_training(
    diagnosis: Diagnosis,
    *,
    k: int = 3,
    draft_cost_ratio: float = 0.3,
    gpu_count: int = 0,
    ridge_tokens: float | None = None,
    why_not: list[str] | None = None,
) -> DrafterSuggestion | None:
    """Propose training a drafter when decode limits the endpoint, stays memory-bound at its load, and
    the traffic is predictable; None otherwise.

    Memory-bound at load: the running batch times the k+1 verified positions stays under the ridge
    (``RIDGE_TOKENS``), so verifying costs about one plain step. Predictable: n-gram speculation
    already ran and accepted >= 30% of its drafts (the cheap first signal), else structured or tool
    outputs make >= 20% of replies (a weaker signal, said so in the evidence). The break-even
    acceptance length is ``k * draft_cost_ratio + verify_cost`` (research.drafter.break_even_acceptance).
    ``why_not``, when given, receives the reason for a None.
    """

    def no(reason: str) -> None:
        if why_not is not None:
            why_not.append(reason)
        return None

    decode = diagnosis.bottleneck("decode_bound")
    if decode is None:
        return no("decode is not a bottleneck in this diagnosis")
    e, r = diagnosis.engine_stats, diagnosis.request_stats
    batch = max(e.get("at_cap_requests_running_mean") or 0.0, e.get("at_cap_in_flight_mean") or 0.0, 1.0)
    ridge = ridge_tokens or RIDGE_TOKENS["gpu" if gpu_count else "cpu"]
    tokens = batch * (k + 1)
    if tokens > ridge:  # compute-bound at this load: verifying k+1 tokens per sequence costs k+1 steps
        return no(
            f"{batch:.0f} sequences x {k + 1} verified tokens = {tokens:.0f} per step, beyond the ridge of "
            f"~{ridge:.0f}: decode is compute-bound at this load"
        )
    verify_cost = 1.0 + tokens / ridge * 0.5  # approaching the ridge, verification starts to cost
    evidence = list(decode.evidence)
    evidence.append(
        f"about {batch:.1f} sequences run at capacity: {tokens:.0f} verified tokens per step, under the "
        f"ridge of ~{ridge:.0f} ({'GPU' if gpu_count else 'CPU'}): decode stays memory-bound"
    )
    rate = e.get("spec_decode_acceptance_rate")
    ngram_len = None
    if rate is not None:
        ngram_len = 1.0 + rate * k
        if rate < 0.3:
            return no(
                f"n-gram speculation accepted only {rate:.0%} of its drafts: the replies are not predictable enough"
            )
        evidence.append(
            f"n-gram speculation accepted {rate:.0%} of draft tokens (acceptance length ~{ngram_len:.2f}): "
            "replies are predictable from context"
        )
    else:
        predictable = r.get("structured_output_fraction", 0.0) + r.get("tool_result_fraction", 0.0)
        if predictable < 0.2:
            return no(
                f"no speculation observed and only {predictable:.0%} structured or tool outputs: no sign of "
                "predictable replies (run n-gram speculation first)"
            )
        evidence.append(
            f"no speculation observed yet; {predictable:.0%} of requests are structured or tool outputs "
            "(a weaker signal: run n-gram speculation first for a measured one)"
        )
    overhead = e.get("roofline_ratio")
    if overhead and overhead > 1.0:
        # A step that takes `overhead` x its bandwidth bound is mostly fixed per-step cost (launches,
        # scheduling), which a small draft pays in full: its step costs that share plus its bytes.
        draft_cost_ratio = (1.0 - 1.0 / overhead) + draft_cost_ratio / overhead
        evidence.append(
            f"decode steps take {overhead:.0f}x their bandwidth bound: a draft step costs about "
            f"{draft_cost_ratio:.0%} of a target step, not its share of the bytes"
        )
    break_even = k * draft_cost_ratio + verify_cost
    explanation = (
        f"Decode limits {diagnosis.endpoint} and is memory-bound at its load, so verifying {k + 1} tokens "
        f"costs about one step ({verify_cost:.2f}); a draft reading {draft_cost_ratio:.0%} of the target's "
        f"bytes pays off above an acceptance length of {break_even:.2f} tokens per target step"
        + (f" (n-gram reached {ngram_len:.2f})" if ngram_len else "")
        + "."
    )
    if break_even >= k + 1:
        return no(
            f"break-even acceptance length {break_even:.2f} is beyond the {k + 1} a round can yield "
            f"(a draft step costs {draft_cost_ratio:.0%} of a target step here): no drafter of this size pays off"
        )
    return DrafterSuggestion(
        endpoint=diagnosis.endpoint,
        explanation=explanation,
        evidence=evidence,
        k=k,
        draft_cost_ratio=round(draft_cost_ratio, 3),
        verify_cost=round(verify_cost, 3),
        break_even_acceptance_length=round(break_even, 3),
        ngram_acceptance_length=ngram_len,
        command=f"autoresearch drafter train {diagnosis.endpoint} --k {k}",
    )
