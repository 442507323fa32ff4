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

The reference is captured once from the campaign's first baseline and cached in the
campaign state (see :mod:`research.state`). Uses vLLM's OpenAI-compatible extensions
(``return_token_ids``, ``prompt_logprobs``); an engine without them cannot be checked and the
report says so.
"""

from __future__ import annotations

import math
import time
from typing import Literal

import httpx
from pydantic import BaseModel, Field

from autoresearch.engine_args import parse_args

DEFAULT_PROMPTS: tuple[str, ...] = (
    "You are a customer support agent. A customer writes: my order has not arrived after two weeks. Reply:",
    "Summarise the refund policy in one sentence: refunds are issued within 14 days of purchase for unused items.",
    "Question: what is the capital of France? Answer:",
    "Write a JSON object with fields status and reason for a cancelled shipment:",
    "The invoice lists three items: a keyboard, a mouse and a monitor. The total is",
    "List three ways to reduce latency in a web service:\n1.",
    "Translate to French: thank you for your patience, your ticket has been updated.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
)


class CorrectnessThresholds(BaseModel):
    """Limits of the checks. Defaults suit small models on CPU; tune per endpoint if needed."""

    top_k: int = Field(default=20, ge=1, le=20)  # vLLM's default --max-logprobs is 20
    max_tokens: int = Field(default=32, ge=1)
    request_timeout_s: float = 120.0
    # Lossless, float32 on both sides: teacher-forced logprobs may differ by at most this much.
    exact_logprob_atol: float = 1e-3
    # Lossless, lower precision: distributions must agree this closely; ties within tie_margin may flip.
    lossless_max_mean_kl: float = 1e-3
    lossless_min_top1: float = 0.97
    tie_margin: float = 0.05
    # Lossy: accepted (and flagged for review) when within these.
    lossy_max_mean_kl: float = 0.05
    lossy_min_top1: float = 0.90
    lossy_max_ppl_ratio: float = 1.05


class SequenceRef(BaseModel):
    """One reference prompt: its greedy continuation and the teacher-forced distributions."""

    prompt: str
    prompt_ids: list[int]
    output_ids: list[int]
    output_text: str
    # One entry per position 1..n-1 of prompt_ids + output_ids: token id -> logprob (top-k + actual).
    positions: list[dict[int, float]]
    actual_ids: list[int]  # the token at each of those positions


class ReferenceOutputs(BaseModel):
    engine_args: list[str]
    float32: bool
    top_k: int
    max_tokens: int
    sequences: list[SequenceRef]
    captured_at: float = Field(default_factory=time.time)


class SequenceComparison(BaseModel):
    prompt_index: int
    identical: bool
    first_divergence: int | None = None  # output position of the first differing token
    divergence_is_tie: bool | None = None
    reference_text: str
    candidate_text: str


class DistributionStats(BaseModel):
    positions: int
    mean_kl: float
    max_kl: float
    top1_agreement: float  # strict argmax agreement
    top1_agreement_tolerant: float  # counting near-ties (within tie_margin) as agreement
    ppl_ratio: float  # candidate perplexity / reference perplexity on the reference tokens
    max_abs_logprob_diff: float  # on the actual tokens


class CorrectnessReport(BaseModel):
    mode: Literal["lossless", "lossy"]
    passed: bool
    lossless_equivalent: bool  # outputs kept within numerical tolerance
    float32: bool
    flag_for_review: bool
    reason: str
    greedy_identical: int
    greedy_total: int
    sequences: list[SequenceComparison] = Field(default_factory=list)
    distribution: DistributionStats | None = None
    thresholds: CorrectnessThresholds = Field(default_factory=CorrectnessThresholds)

    def summary(self) -> str:
        d = self.distribution
        dist = (f"mean KL {d.mean_kl:.2e}, top-1 {d.top1_agreement:.3f} (tie-tolerant {d.top1_agreement_tolerant:.3f}), "
                f"ppl ratio {d.ppl_ratio:.4f}, max |dlogprob| {d.max_abs_logprob_diff:.2e} over {d.positions} positions"
                if d else "no distribution data")
        return (f"{self.mode} check {'passed' if self.passed else 'FAILED'}: greedy {self.greedy_identical}/"
                f"{self.greedy_total} identical{' (float32)' if self.float32 else ''}; {dist}. {self.reason}")


class CorrectnessUnavailable(RuntimeError):
    """The engine does not answer the requests the check needs."""


def is_float32(engine_args: list[str]) -> bool:
    return parse_args(engine_args).get("--dtype") in {"float32", "float"}


class _Client:
    def __init__(self, base_url: str, model: str, timeout: float):
        self.http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self.model = model

    def complete(self, prompt: str | list[int], **extra) -> dict:
        body = {"model": self.model, "prompt": prompt, "temperature": 0.0, "seed": 0, **extra}
        try:
            response = self.http.post("/v1/completions", json=body)
        except httpx.HTTPError as exc:
            raise CorrectnessUnavailable(f"completion request failed: {exc!r}") from exc
        if response.status_code != 200:
            raise CorrectnessUnavailable(f"/v1/completions answered {response.status_code}: {response.text[:300]}")
        return response.json()["choices"][0]

    def greedy(self, prompt: str, max_tokens: int) -> tuple[list[int], list[int], str]:
        choice = self.complete(prompt, max_tokens=max_tokens, return_token_ids=True)
        prompt_ids, output_ids = choice.get("prompt_token_ids"), choice.get("token_ids")
        if prompt_ids is None or output_ids is None:
            raise CorrectnessUnavailable("the engine ignored return_token_ids (needs vLLM's OpenAI server)")
        return list(prompt_ids), list(output_ids), choice.get("text", "")

    def teacher_forced(self, ids: list[int], top_k: int) -> list[dict[int, float]]:
        choice = self.complete(ids, max_tokens=1, prompt_logprobs=top_k)
        raw = choice.get("prompt_logprobs")
        if not raw:
            raise CorrectnessUnavailable("the engine returned no prompt_logprobs (needs vLLM's OpenAI server)")
        return [{int(t): float(v["logprob"]) for t, v in pos.items()} for pos in raw[1:]]

    def close(self) -> None:
        self.http.close()


def capture_reference(base_url: str, model: str, engine_args: list[str], *,
                      prompts: tuple[str, ...] | list[str] = DEFAULT_PROMPTS,
                      thresholds: CorrectnessThresholds | None = None) -> ReferenceOutputs:
    """Greedy completions of ``prompts`` plus their teacher-forced distributions, one request at a time
    (sequential so batch composition cannot perturb the reference)."""
    t = thresholds or CorrectnessThresholds()
    client = _Client(base_url, model, t.request_timeout_s)
    try:
        sequences = []
        for prompt in prompts:
            prompt_ids, output_ids, text = client.greedy(prompt, t.max_tokens)
            ids = prompt_ids + output_ids
            sequences.append(SequenceRef(prompt=prompt, prompt_ids=prompt_ids, output_ids=output_ids, output_text=text,
                                         positions=client.teacher_forced(ids, t.top_k), actual_ids=ids[1:]))
    finally:
        client.close()
    return ReferenceOutputs(engine_args=list(engine_args), float32=is_float32(engine_args), top_k=t.top_k,
                            max_tokens=t.max_tokens, sequences=sequences)


def _coarse_kl(p: dict[int, float], q: dict[int, float]) -> float:
    """KL(P||Q) over P's listed tokens plus one 'rest' bucket (a lower bound of the full KL).

    A token missing from Q's list ranks below all of Q's listed tokens and shares Q's unlisted
    mass: it gets min(Q's smallest listed probability, unlisted mass / number missing).
    """
    q_listed = sum(math.exp(v) for v in q.values())
    missing = [t for t in p if t not in q]
    floor = math.exp(min(q.values())) if q else 1.0
    per_missing = max(1e-12, min(floor, max(0.0, 1.0 - q_listed) / max(len(missing), 1)))
    kl, p_mass, q_mass = 0.0, 0.0, 0.0
    for token, lp in p.items():
        qq = math.exp(q[token]) if token in q else per_missing
        pp = math.exp(lp)
        kl += pp * (lp - math.log(qq))
        p_mass += pp
        q_mass += qq
    p_rest, q_rest = max(0.0, 1.0 - p_mass), max(1e-12, 1.0 - q_mass)
    if p_rest > 1e-12:
        kl += p_rest * math.log(p_rest / q_rest)
    return max(kl, 0.0)


def _argmax(d: dict[int, float]) -> int:
    return max(d.items(), key=lambda kv: kv[1])[0]


def distribution_stats(reference: ReferenceOutputs, candidate_positions: list[list[dict[int, float]]],
                       tie_margin: float) -> DistributionStats:
    """Compare the reference's teacher-forced distributions with the candidate's on the same sequences."""
    kls, agree, agree_tol, diffs = [], 0, 0, []
    ref_nll, cand_nll = 0.0, 0.0
    for seq, cand in zip(reference.sequences, candidate_positions, strict=True):
        for p, q, actual in zip(seq.positions, cand, seq.actual_ids, strict=True):
            kls.append(_coarse_kl(p, q))
            top_p, top_q = _argmax(p), _argmax(q)
            agree += top_p == top_q
            agree_tol += top_p == top_q or (top_q in p and p[top_p] - p[top_q] <= tie_margin)
            lp_ref, lp_cand = p.get(actual), q.get(actual)
            if lp_ref is not None and lp_cand is not None:
                ref_nll -= lp_ref
                cand_nll -= lp_cand
                diffs.append(abs(lp_ref - lp_cand))
    n = max(len(kls), 1)
    count = max(len(diffs), 1)
    return DistributionStats(positions=len(kls), mean_kl=sum(kls) / n, max_kl=max(kls, default=0.0),
                             top1_agreement=agree / n, top1_agreement_tolerant=agree_tol / n,
                             ppl_ratio=math.exp((cand_nll - ref_nll) / count), max_abs_logprob_diff=max(diffs, default=0.0))


def _compare_greedy(index: int, seq: SequenceRef, output_ids: list[int], text: str, tie_margin: float) -> SequenceComparison:
    if output_ids == seq.output_ids:
        return SequenceComparison(prompt_index=index, identical=True, reference_text=seq.output_text, candidate_text=text)
    pos = next((i for i, (a, b) in enumerate(zip(seq.output_ids, output_ids)) if a != b),
               min(len(seq.output_ids), len(output_ids)))
    tie = False
    if pos < len(seq.output_ids) and pos < len(output_ids):
        dist = seq.positions[len(seq.prompt_ids) - 1 + pos]  # distribution that chose output token ``pos``
        ref_tok, cand_tok = seq.output_ids[pos], output_ids[pos]
        tie = cand_tok in dist and ref_tok in dist and dist[ref_tok] - dist[cand_tok] <= tie_margin
    return SequenceComparison(prompt_index=index, identical=False, first_divergence=pos, divergence_is_tie=tie,
                              reference_text=seq.output_text, candidate_text=text)


def check_candidate(base_url: str, model: str, reference: ReferenceOutputs, candidate_args: list[str], *,
                    lossy: bool, thresholds: CorrectnessThresholds | None = None) -> CorrectnessReport:
    """Run both checks against a live candidate engine and judge them (lossless or lossy mode)."""
    t = thresholds or CorrectnessThresholds()
    client = _Client(base_url, model, t.request_timeout_s)
    try:
        comparisons, cand_positions = [], []
        for i, seq in enumerate(reference.sequences):
            _, output_ids, text = client.greedy(seq.prompt, reference.max_tokens)
            comparisons.append(_compare_greedy(i, seq, output_ids, text, t.tie_margin))
            cand_positions.append(client.teacher_forced(seq.prompt_ids + seq.output_ids, reference.top_k))
    finally:
        client.close()
    return judge(reference, candidate_args, comparisons, cand_positions, lossy=lossy, thresholds=t)


def judge(reference: ReferenceOutputs, candidate_args: list[str], comparisons: list[SequenceComparison],
          cand_positions: list[list[dict[int, float]]], *, lossy: bool,
          thresholds: CorrectnessThresholds | None = None) -> CorrectnessReport:
    """Turn raw comparisons into a verdict (pure: unit-testable without an engine)."""
    t = thresholds or CorrectnessThresholds()
    stats = distribution_stats(reference, cand_positions, t.tie_margin)
    float32 = reference.float32 and is_float32(candidate_args)
    identical = sum(c.identical for c in comparisons)
    if float32:
        equivalent = identical == len(comparisons) and stats.max_abs_logprob_diff <= t.exact_logprob_atol
        why = (f"float32 exact check: {identical}/{len(comparisons)} identical, max |dlogprob| "
               f"{stats.max_abs_logprob_diff:.2e} (limit {t.exact_logprob_atol:.0e})")
    else:
        untied = [c.prompt_index for c in comparisons if not c.identical and not c.divergence_is_tie]
        equivalent = (not untied and stats.mean_kl <= t.lossless_max_mean_kl
                      and stats.top1_agreement_tolerant >= t.lossless_min_top1)
        why = (f"tolerance check: divergences beyond a tie in prompts {untied or 'none'}, mean KL {stats.mean_kl:.2e} "
               f"(limit {t.lossless_max_mean_kl:.0e}), tie-tolerant top-1 {stats.top1_agreement_tolerant:.3f} "
               f"(min {t.lossless_min_top1})")
    if not lossy:
        passed = equivalent
        reason = ("outputs kept; " if equivalent else "outputs CHANGED by a change declared lossless; ") + why
    else:
        within = (stats.mean_kl <= t.lossy_max_mean_kl and stats.top1_agreement >= t.lossy_min_top1
                  and stats.ppl_ratio <= t.lossy_max_ppl_ratio)
        passed = within
        reason = (f"lossy change, distribution {'within' if within else 'OUTSIDE'} thresholds (KL <= {t.lossy_max_mean_kl}, "
                  f"top-1 >= {t.lossy_min_top1}, ppl ratio <= {t.lossy_max_ppl_ratio}); flagged for human review")
    return CorrectnessReport(mode="lossy" if lossy else "lossless", passed=passed, lossless_equivalent=equivalent,
                             float32=float32, flag_for_review=lossy or not equivalent, reason=reason,
                             greedy_identical=identical, greedy_total=len(comparisons), sequences=comparisons,
                             distribution=stats, thresholds=t)
