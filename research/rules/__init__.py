"""The built-in, rule-based proposer: bottleneck signatures -> known serving techniques.

Used when no LLM is configured (and as the fallback when an LLM's answers are unusable), so the
research loop runs anywhere. It returns the same ``Proposal`` objects as the LLM subagents: an
explanation built from the diagnosis evidence, an exact argument diff for the endpoint's
engine with ranked alternatives, a prediction and what would falsify it.

One module a job; every name is importable from ``research.rules`` itself:

- ``context``: what a technique sees (``Context``, built by ``context_for``);
- ``techniques``: one exact change each (``raise_batch_limit``, ``enable_prefix_caching``, ...);
- ``playbook``: which techniques answer which bottleneck (``PLAYBOOK``) and what each predicts
  (``EXPECTATIONS``);
- ``proposer``: ``propose``, ``interventions_for``, ``questions_for``;
- ``drafter_rule``: ``drafter_training``, when to train a speculative-decoding drafter.

To add a rule: write a technique ``def my_change(ctx: Context) -> Intervention | None`` in ``techniques``
(None = not applicable to these arguments), list it under the bottleneck in ``PLAYBOOK`` and give its
prediction in ``EXPECTATIONS``; see docs/research_loop.md.
"""

from __future__ import annotations

from research.rules.context import Context, Technique, context_for
from research.rules.drafter_rule import RIDGE_TOKENS, drafter_training
from research.rules.playbook import EXPECTATIONS, PLAYBOOK, expectation
from research.rules.proposer import interventions_for, propose, questions_for
from research.rules.techniques import (
    NGRAM_CONFIG,
    async_scheduling,
    compile_model,
    continuous_batching,
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

__all__ = [
    "EXPECTATIONS",
    "NGRAM_CONFIG",
    "PLAYBOOK",
    "RIDGE_TOKENS",
    "Context",
    "Technique",
    "async_scheduling",
    "compile_model",
    "context_for",
    "continuous_batching",
    "drafter_training",
    "drop_speculation",
    "enable_prefix_caching",
    "expectation",
    "faster_attention",
    "fewer_sequences",
    "fp8_kv_cache",
    "graphs",
    "interventions_for",
    "larger_token_budget",
    "more_kv_blocks",
    "more_kv_memory",
    "more_tensor_parallel",
    "ngram_speculation",
    "partial_prefills",
    "propose",
    "questions_for",
    "raise_batch_limit",
    "smaller_prefill_chunks",
    "tp_to_dp",
    "weight_quantization",
]
