"""Correctness checks: does a candidate configuration still produce the baseline's outputs?

Why two checks:
- Lossless changes (scheduling, batching, caching) must keep outputs. With ``--dtype float32``
  on both sides greedy completions must match token for token. In lower precision, batching
  can flip near-ties, so a divergence only counts when the two tokens were not tied in the
  reference distribution, and the token distributions must agree within a small tolerance.
- Lossy changes (weight or KV-cache quantisation, lower precision) will change outputs; they
  are measured on *matched prefixes*: the reference's own greedy sequences are sent back as
  prompts with ``prompt_logprobs`` to the candidate, and the per-position top-k distributions
  are compared (mean KL, top-1 agreement, perplexity ratio) against thresholds. Lossy changes
  are always flagged for human review.

- Sampled outputs: greedy checks never exercise the sampler, yet a change can break sampling alone
  (vLLM 0.32's CPU rejection sampler verifies drafts against garbage temperatures, vLLM issue 55005,
  so speculation at temperature > 0 emits nonsense while greedy outputs stay exact). With logprobs,
  each prompt is also sampled at ``sample_temperature`` and the sampled tokens are scored teacher-forced;
  the mean negative log-likelihood per token must stay within noise of the reference's own samples.

Which evidence is used is decided by the engine adapter's ``can_give(...)``, never by engine names:

- ``logprobs``: the adapter gives token ids and logprobs (vLLM's OpenAI extensions
  ``return_token_ids`` and ``prompt_logprobs``): both checks above.
- ``greedy_text``: it does not (e.g. ``transformers serve``): greedy completions (temperature 0)
  of the correctness prompts are compared as token sequences under the model's own tokenizer
  (the returned text, tokenized with the endpoint's ``tokenizer.json``). Lossless changes must
  give identical sequences; lossy ones are measured by the first-divergence position and the
  matched-prefix length (and flagged for review). With no tokenizer at hand, characters are
  compared instead and the report says so.
- ``none``: the engine answered neither; nothing was checked, the report says so, and the
  baseline stays valid (a missing optional API never invalidates a measurement).

The reference is captured once from the campaign's first baseline and cached in the
campaign state (see :mod:`research.state`); every report names the evidence it rests on.

One module a job; every name is importable from ``research.correctness`` itself:

- ``thresholds``: the limits (``CorrectnessThresholds``) and the evidence kinds;
- ``outputs``: the reference outputs and how one output compares with its reference;
- ``client``: the requests to the engine, the evidence its adapter can give, the tokenizer;
- ``capture``: the reference, captured once from the baseline;
- ``logprobs``: the greedy-token and distribution check on logprobs evidence (``judge``);
- ``sampled``: the sampled-output check (logprobs evidence);
- ``greedy_text``: the check on greedy-text evidence (``judge_greedy_text``);
- ``report``: the verdict (``CorrectnessReport``), checked or not, and its words;
- ``candidate``: ``check_candidate``, which asks a live candidate and hands the answers to a judge.
"""

from __future__ import annotations

from research.correctness.candidate import check_candidate
from research.correctness.capture import DEFAULT_PROMPTS, capture_reference
from research.correctness.client import (
    CorrectnessClient,
    CorrectnessUnavailable,
    RouteMissing,
    TextEncoder,
    evidence_for,
    tokenizer_for,
)
from research.correctness.greedy_text import MIN_SELF_AGREEMENT, judge_greedy_text
from research.correctness.logprobs import coarse_kl, compare_greedy_tokens, distribution_stats, judge
from research.correctness.outputs import (
    ReferenceOutputs,
    SampledStats,
    SequenceComparison,
    SequenceRef,
    compare_greedy_text,
    first_difference,
    is_float32,
)
from research.correctness.report import (
    RANDOM_WEIGHTS_REVIEW,
    CorrectnessReport,
    DistributionStats,
    SampledComparison,
    judged_report,
    unchecked_report,
    unmeasurable_quality,
)
from research.correctness.sampled import MIN_SAMPLED_TOKENS, compare_sampled, sampled_stats
from research.correctness.thresholds import EVIDENCE_LABELS, CorrectnessThresholds, Evidence

#: the names these two had while the check was one module (the unit tests import them)
_coarse_kl = coarse_kl
_compare_greedy = compare_greedy_tokens

__all__ = [
    "RANDOM_WEIGHTS_REVIEW",
    "unmeasurable_quality",
    "DEFAULT_PROMPTS",
    "EVIDENCE_LABELS",
    "MIN_SAMPLED_TOKENS",
    "MIN_SELF_AGREEMENT",
    "CorrectnessClient",
    "CorrectnessReport",
    "CorrectnessThresholds",
    "CorrectnessUnavailable",
    "DistributionStats",
    "Evidence",
    "ReferenceOutputs",
    "RouteMissing",
    "SampledComparison",
    "SampledStats",
    "SequenceComparison",
    "SequenceRef",
    "TextEncoder",
    "_coarse_kl",
    "_compare_greedy",
    "capture_reference",
    "check_candidate",
    "coarse_kl",
    "compare_greedy_text",
    "compare_greedy_tokens",
    "compare_sampled",
    "distribution_stats",
    "evidence_for",
    "first_difference",
    "is_float32",
    "judge",
    "judge_greedy_text",
    "judged_report",
    "sampled_stats",
    "tokenizer_for",
    "unchecked_report",
]
