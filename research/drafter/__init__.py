"""A draft model trained on the endpoint's own traffic, for speculative decoding (issue 15).

Four steps, each a plain function so the CLI, the benchmark and the assets share them, one module each:

1. ``research.drafter.data``: on-policy data. ``generate_onpolicy`` asks the running engine for the
   target model's own replies to replay-pool prompts, through its OpenAI API at the pool's sampling
   settings, with the token ids the engine saw and produced (``return_token_ids``), so training never
   re-tokenises a chat template; ``collect`` starts the endpoint's engine for it.
2. ``research.drafter.training``: ``train`` fine-tunes a layer-truncated copy of the target (its first N
   layers, its embeddings and head, the same tokenizer) on those ids with next-token loss. The torch
   code is ``research/drafter_torch.py``, run by the engine environment's interpreter (torch lives
   there, not in the project's environment). vLLM's ``speculators`` library is not used: installing it
   into the engine environment replaces vLLM's pinned CPU torch with a CUDA build (see
   docs/research_loop.md).
3. ``research.drafter.training``: ``evaluate``, acceptance per draft position on held-out prompts,
   offline: the draft proposes k tokens greedily from the target's own prefix, and a proposal is
   accepted while it matches the target's greedy tokens (what vLLM's verifier does at temperature 0).
4. ``research.drafter.serving``: ``candidate_args`` / ``run_drafter_candidate``, the
   ``--speculative-config`` intervention, measured by the one harness (lossless check, sweeps, noise
   floor) with acceptance per position scraped from ``/metrics`` around each sweep (the adapter's
   ``speculative_counters``: vLLM's ``spec_decode_*``).

The break-even model (``serving.break_even_acceptance``) says which acceptance length pays for
drafting; ``research.drafter.proposal`` puts a drafter into the research round (the proposer's rule, the
candidate, the verdict written back). Every name is importable from ``research.drafter`` itself.
"""

from __future__ import annotations

from research.drafter.data import (
    OnPolicyData,
    OnPolicyExample,
    _body_for,
    collect,
    data_engine_args,
    data_signature,
    generate_onpolicy,
    model_signature,
    onpolicy_data,
    parse_int_arg,
    read_examples,
    split,
    write_examples,
)
from research.drafter.errors import DrafterError
from research.drafter.proposal import (
    QUESTION,
    TECHNIQUE,
    drafter_proposal,
    propose_drafter,
    record_judgement,
    usable_drafter,
)
from research.drafter.serving import (
    ServedAcceptance,
    break_even_acceptance,
    candidate_args,
    cannot_serve_drafter,
    describe,
    draft_cost_ratio,
    draft_model_diff,
    read_metrics,
    run_drafter_candidate,
)
from research.drafter.training import (
    TORCH_SCRIPT,
    OfflineAcceptance,
    TrainResult,
    evaluate,
    train,
    train_drafter,
    train_for_endpoint,
    truncated_copy,
)

__all__ = [
    "QUESTION",
    "TECHNIQUE",
    "TORCH_SCRIPT",
    "DrafterError",
    "OfflineAcceptance",
    "OnPolicyData",
    "OnPolicyExample",
    "ServedAcceptance",
    "TrainResult",
    "_body_for",
    "break_even_acceptance",
    "candidate_args",
    "cannot_serve_drafter",
    "collect",
    "data_engine_args",
    "data_signature",
    "describe",
    "draft_cost_ratio",
    "draft_model_diff",
    "drafter_proposal",
    "evaluate",
    "generate_onpolicy",
    "model_signature",
    "onpolicy_data",
    "parse_int_arg",
    "propose_drafter",
    "read_examples",
    "read_metrics",
    "record_judgement",
    "run_drafter_candidate",
    "split",
    "train",
    "train_drafter",
    "train_for_endpoint",
    "truncated_copy",
    "usable_drafter",
    "write_examples",
]
