"""What a correctness check records: the baseline's reference outputs, and how one candidate output
compares with its reference (identical, or where they first differ).

Apart from the checks so that the campaign state, the experiment unit and every evidence kind share one
record of the reference; the comparison of two token sequences lives here because the reference uses
it on itself (its solo against its batched outputs).
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, Field

from specs.engine_args import parse_args
from research.correctness.thresholds import Evidence


def is_float32(engine_args: list[str]) -> bool:
    return parse_args(engine_args).get("--dtype") in {"float32", "float"}


class SequenceRef(BaseModel):
    """One reference prompt: its greedy continuation and the teacher-forced distributions."""

    prompt: str
    prompt_ids: list[int]
    output_ids: list[int]
    output_text: str
    # One entry per position 1..n-1 of prompt_ids + output_ids: token id -> logprob (top-k + actual).
    positions: list[dict[int, float]]
    actual_ids: list[int]  # the token at each of those positions


class SampledStats(BaseModel):
    """How likely the model finds the tokens an engine sampled: mean NLL per token (nats), teacher-forced."""

    temperature: float
    sequences: int
    tokens: int
    mean_nll: float
    se: float  # standard error of the mean (tokens treated as independent: the absolute floor covers the rest)
    texts: list[str] = Field(default_factory=list)  # the first samples, for people to read


class SequenceComparison(BaseModel):
    prompt_index: int
    identical: bool
    first_divergence: int | None = None  # output position of the first differing token
    divergence_is_tie: bool | None = None  # None: unknown (no distributions to tell)
    reference_text: str
    candidate_text: str
    matched_prefix: int | None = None  # leading output tokens both agree on
    matches_batched_reference: bool = False  # identical to the baseline's batched output (not its solo one)
    reference_length: int | None = None  # output tokens of the reference


def first_difference(a: list[int], b: list[int]) -> int:
    """The first position where ``a`` and ``b`` differ (the shorter length when one is a prefix of the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare_greedy_text(
    index: int, reference_ids: list[int], reference_text: str, candidate_ids: list[int], candidate_text: str
) -> SequenceComparison:
    """Two greedy outputs as token sequences: identical, or where they first differ and how much agrees."""
    matched = first_difference(reference_ids, candidate_ids)
    identical = reference_ids == candidate_ids
    return SequenceComparison(
        prompt_index=index,
        identical=identical,
        first_divergence=None if identical else matched,
        divergence_is_tie=None,
        reference_text=reference_text,
        candidate_text=candidate_text,
        matched_prefix=matched,
        reference_length=len(reference_ids),
    )


class ReferenceOutputs(BaseModel):
    engine_args: list[str]
    float32: bool
    top_k: int
    max_tokens: int
    sequences: list[SequenceRef]
    captured_at: float = Field(default_factory=time.time)
    #: what the sequences hold: ids + distributions (logprobs), tokenized greedy text, or nothing
    evidence: Evidence = "logprobs"
    #: greedy_text: the route the outputs came from (the candidate is asked the same way)
    route: Literal["completions", "chat"] = "completions"
    #: greedy_text: the tokenizer folder the text was tokenized with (None: characters compared)
    tokenizer: str | None = None
    #: why the evidence is weaker than logprobs (or absent), when it is
    note: str | None = None
    #: greedy_text: the same prompts sent all at once (one batch) to the same engine. In reduced
    #: precision a batch can flip near-ties, so this is the engine's own numerical noise on these prompts
    batched_texts: list[str] = Field(default_factory=list)
    #: logprobs: the prompts sampled at the thresholds' sample_temperature, scored (None: not captured,
    #: e.g. a reference cached before this check existed; candidates are then not checked on samples)
    sampled: SampledStats | None = None

    def self_matched_fraction(self, encode) -> float:
        """The smallest matched-prefix fraction between the solo and the batched outputs of the
        baseline itself (1.0: batching never changed an output, so exact equality is the bar)."""
        fractions = []
        for seq, text in zip(self.sequences, self.batched_texts):
            c = compare_greedy_text(0, encode(seq.output_text), seq.output_text, encode(text), text)
            if not c.identical and c.reference_length:
                fractions.append((c.matched_prefix or 0) / c.reference_length)
        return min(fractions, default=1.0)

    @property
    def unit(self) -> str:
        return "characters" if self.evidence == "greedy_text" and not self.tokenizer else "tokens"
