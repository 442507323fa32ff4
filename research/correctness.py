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
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from specs.engine_args import parse_args

#: what a correctness check rests on (see the module docstring)
Evidence = Literal["logprobs", "greedy_text", "none"]
EVIDENCE_LABELS: dict[str, str] = {
    "logprobs": "token ids and logprobs (greedy sequences plus teacher-forced distributions)",
    "greedy_text": "greedy text (temperature-0 outputs compared as token sequences; the engine gives no logprobs)",
    "none": "none (the engine answered no correctness request; NOT checked)",
}

DEFAULT_PROMPTS: tuple[str, ...] = (
    "You are a customer support agent. A customer writes: my order has not arrived after two weeks. Reply:",
    "Summarise the refund policy in one sentence: refunds are issued within 14 days of purchase for unused items.",
    "Question: what is the capital of France? Answer:",
    "Write a JSON object with fields status and reason for a cancelled shipment:",
    "The invoice lists three items: a keyboard, a mouse and a monitor. The total is",
    "List three ways to reduce latency in a web service:\n1.",
    "Translate to French: thank you for your patience, your ticket has been updated.",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
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
    # Lossy, greedy-text evidence only (no distributions): the mean matched-prefix fraction of the
    # reference outputs must reach this (a coarse guard against a broken model; always reviewed).
    greedy_lossy_min_prefix_fraction: float = 0.5
    # Sampled outputs (logprobs evidence): each prompt sampled once at this temperature (0 = no check);
    # a lossless candidate's mean NLL per sampled token may differ from the reference's samples by at
    # most max(sampled_max_nll_shift, sampled_se_multiple x the standard error of the difference).
    sample_temperature: float = Field(default=1.0, ge=0.0)
    sampled_max_nll_shift: float = 0.5
    sampled_se_multiple: float = 4.0


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


class SampledComparison(BaseModel):
    reference: SampledStats
    candidate: SampledStats
    shift: float  # candidate mean NLL - reference mean NLL
    limit: float
    passed: bool


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
    #: what the verdict rests on; "none" = nothing was compared (then ``checked`` is False)
    evidence: Evidence = "logprobs"
    checked: bool = True
    unit: str = "tokens"  # what greedy sequences were compared in (greedy_text without a tokenizer: characters)
    mean_matched_prefix_fraction: float | None = None  # greedy_text: matched prefix / reference length
    sampled: SampledComparison | None = None  # logprobs: sampled outputs against the reference's

    @property
    def label(self) -> str:
        """One phrase for reports: the mode, whether it was checked, and on what evidence."""
        if not self.checked:
            return f"{self.mode}, NOT checked (no correctness evidence from this engine)"
        return f"{self.mode}, checked on {self.evidence.replace('_', ' ')}"

    def summary(self) -> str:
        if not self.checked:
            return f"{self.mode} correctness NOT checked (evidence: none). {self.reason}"
        if self.evidence == "greedy_text":
            diverged = [s for s in self.sequences if not s.identical]
            where = (
                ", first divergences at "
                + ", ".join(f"prompt {s.prompt_index}: {self.unit[:-1]} {s.first_divergence}" for s in diverged[:4])
                if diverged
                else ""
            )
            prefix = (
                f", mean matched prefix {self.mean_matched_prefix_fraction:.0%}"
                if self.mean_matched_prefix_fraction is not None
                else ""
            )
            return (
                f"{self.mode} check {'passed' if self.passed else 'FAILED'} (evidence: greedy text): "
                f"{self.greedy_identical}/{self.greedy_total} greedy outputs identical as {self.unit}{where}"
                f"{prefix}; no distribution data (the engine gives no logprobs). {self.reason}"
            )
        d = self.distribution
        dist = (
            f"mean KL {d.mean_kl:.2e}, top-1 {d.top1_agreement:.3f} (tie-tolerant {d.top1_agreement_tolerant:.3f}), "
            f"ppl ratio {d.ppl_ratio:.4f}, max |dlogprob| {d.max_abs_logprob_diff:.2e} over {d.positions} positions"
            if d
            else "no distribution data"
        )
        sampled = ""
        if self.sampled is not None:
            c = self.sampled
            sampled = (
                f"; sampled at T={c.candidate.temperature:g}: mean NLL {c.candidate.mean_nll:.2f} vs "
                f"{c.reference.mean_nll:.2f} nats/token (shift {c.shift:+.2f}, limit {c.limit:.2f})"
            )
        return (
            f"{self.mode} check {'passed' if self.passed else 'FAILED'} (evidence: logprobs): greedy "
            f"{self.greedy_identical}/{self.greedy_total} identical{' (float32)' if self.float32 else ''}; "
            f"{dist}{sampled}. {self.reason}"
        )


class CorrectnessUnavailable(RuntimeError):
    """The engine does not answer the requests the check needs."""


class _RouteMissing(CorrectnessUnavailable):
    """The route itself is absent (HTTP 404/405): try another one."""


def is_float32(engine_args: list[str]) -> bool:
    return parse_args(engine_args).get("--dtype") in {"float32", "float"}


def evidence_for(adapter: Any) -> Evidence:
    """The strongest evidence an engine adapter (class or instance) can give: ``logprobs`` where it
    gives token ids and logprobs, else ``greedy_text``. Asks ``can_give``, never the engine's name."""
    return "logprobs" if adapter.can_give("logprobs") and adapter.can_give("token_ids") else "greedy_text"


def tokenizer_for(adapter: Any) -> str | None:
    """The folder with the endpoint model's ``tokenizer.json`` (None when there is none at hand,
    e.g. an external endpoint whose weights are elsewhere)."""
    spec = getattr(adapter, "spec", None)
    if spec is None:
        return None
    try:
        from specs.models import tokenizer_dir

        directory = tokenizer_dir(spec.model.path)
    except Exception:  # noqa: BLE001 - no local model folder: compare characters instead
        return None
    return str(directory) if (Path(directory) / "tokenizer.json").exists() else None


class _TextEncoder:
    """Text -> token ids under the model's tokenizer; code points when there is no tokenizer."""

    def __init__(self, directory: str | None):
        self.directory = directory if directory and (Path(directory) / "tokenizer.json").exists() else None
        self._tok = None
        if self.directory:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(str(Path(self.directory) / "tokenizer.json"))

    @property
    def unit(self) -> str:
        return "tokens" if self._tok is not None else "characters"

    def encode(self, text: str) -> list[int]:
        if self._tok is None:
            return [ord(c) for c in text]
        return list(self._tok.encode(text, add_special_tokens=False).ids)


class _Client:
    def __init__(self, base_url: str, model: str, timeout: float, omit: Collection[str] = ()):
        self.http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self.model = model
        self.omit = frozenset(omit)  # request fields the engine rejects: never sent

    def post(self, path: str, body: dict) -> dict:
        body = {k: v for k, v in body.items() if k not in self.omit}
        try:
            response = self.http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise CorrectnessUnavailable(f"{path} request failed: {exc!r}") from exc
        if response.status_code in (404, 405):
            raise _RouteMissing(f"{path} answered {response.status_code}: {response.text[:300]}")
        if response.status_code != 200:
            raise CorrectnessUnavailable(f"{path} answered {response.status_code}: {response.text[:300]}")
        try:
            return response.json()["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise CorrectnessUnavailable(f"{path} answered without choices: {response.text[:300]}") from exc

    def complete(self, prompt: str | list[int], **extra) -> dict:
        body = {"model": self.model, "prompt": prompt, "temperature": 0.0, "seed": 0, **extra}
        return self.post("/v1/completions", body)

    def greedy(self, prompt: str, max_tokens: int) -> tuple[list[int], list[int], str]:
        return self.generate(prompt, max_tokens)

    def sample(self, prompt: str, max_tokens: int, temperature: float, seed: int) -> tuple[list[int], list[int], str]:
        return self.generate(prompt, max_tokens, temperature=temperature, top_p=1.0, seed=seed)

    def generate(self, prompt: str, max_tokens: int, **sampling) -> tuple[list[int], list[int], str]:
        """(prompt ids, output ids, text) of one completion; greedy unless ``sampling`` says otherwise."""
        choice = self.complete(prompt, max_tokens=max_tokens, return_token_ids=True, **sampling)
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

    def greedy_text(self, prompt: str, max_tokens: int, route: str) -> str:
        """The temperature-0 output text of ``prompt`` (raw completion, or one user turn on chat)."""
        if route == "chat":
            choice = self.post(
                "/v1/chat/completions",
                {
                    "model": self.model,
                    "messages": [{"role": "user", "content": prompt}],
                    "temperature": 0.0,
                    "seed": 0,
                    "max_tokens": max_tokens,
                },
            )
            return (choice.get("message") or {}).get("content") or ""
        return self.complete(prompt, max_tokens=max_tokens).get("text") or ""

    def close(self) -> None:
        self.http.close()


def _omit_fields(adapter: Any, omit_fields: Collection[str]) -> frozenset[str]:
    return frozenset(omit_fields) | frozenset(getattr(adapter, "rejected_request_fields", ()) or ())


def capture_reference(
    base_url: str,
    model: str,
    engine_args: list[str],
    *,
    prompts: tuple[str, ...] | list[str] = DEFAULT_PROMPTS,
    thresholds: CorrectnessThresholds | None = None,
    adapter: Any = None,
    evidence: Evidence | None = None,
    tokenizer: str | Path | None = None,
    omit_fields: Collection[str] = (),
) -> ReferenceOutputs:
    """The reference outputs of ``prompts``, one request at a time (sequential so batch composition
    cannot perturb them), on the strongest evidence the engine gives.

    ``adapter`` (the running engine's adapter) decides the evidence through ``can_give`` and names the
    request fields the engine rejects and the model's tokenizer; ``evidence``/``tokenizer``/``omit_fields``
    override. Without an adapter, logprobs are tried first. Never raises for a missing optional API: a
    reference whose logprobs cannot be had falls back to greedy text, and one whose greedy text cannot be
    had either has ``evidence="none"`` (checks against it say "not checked").
    """
    t = thresholds or CorrectnessThresholds()
    wanted = evidence or (evidence_for(adapter) if adapter is not None else "logprobs")
    omit = _omit_fields(adapter, omit_fields)
    note = None
    if wanted == "logprobs":
        try:
            return _capture_logprobs(base_url, model, engine_args, prompts, t, omit)
        except CorrectnessUnavailable as exc:
            note = f"token ids / logprobs unavailable ({str(exc).splitlines()[0][:200]}); greedy text used instead"
    elif adapter is not None and wanted == "greedy_text":
        note = f"the {getattr(adapter, 'kind', '') or 'engine'} adapter gives no token ids / logprobs"
    tok = str(tokenizer) if tokenizer is not None else tokenizer_for(adapter)
    try:
        return _capture_greedy_text(base_url, model, engine_args, prompts, t, omit, tok, note)
    except CorrectnessUnavailable as exc:
        why = f"greedy outputs unavailable too ({str(exc).splitlines()[0][:200]})"
        return ReferenceOutputs(
            engine_args=list(engine_args),
            float32=is_float32(engine_args),
            top_k=t.top_k,
            max_tokens=t.max_tokens,
            sequences=[],
            evidence="none",
            note=f"{note}; {why}" if note else why,
        )


def _capture_logprobs(
    base_url: str, model: str, engine_args: list[str], prompts, t: CorrectnessThresholds, omit: frozenset[str]
) -> ReferenceOutputs:
    client = _Client(base_url, model, t.request_timeout_s, omit)
    try:
        sequences = []
        for prompt in prompts:
            prompt_ids, output_ids, text = client.greedy(prompt, t.max_tokens)
            ids = prompt_ids + output_ids
            sequences.append(
                SequenceRef(
                    prompt=prompt,
                    prompt_ids=prompt_ids,
                    output_ids=output_ids,
                    output_text=text,
                    positions=client.teacher_forced(ids, t.top_k),
                    actual_ids=ids[1:],
                )
            )
        sampled = sampled_stats(client, prompts, t)
    finally:
        client.close()
    return ReferenceOutputs(
        engine_args=list(engine_args),
        float32=is_float32(engine_args),
        top_k=t.top_k,
        max_tokens=t.max_tokens,
        sequences=sequences,
        evidence="logprobs",
        sampled=sampled,
    )


def sampled_stats(client: "_Client", prompts, t: CorrectnessThresholds) -> SampledStats | None:
    """Sample each prompt once at ``t.sample_temperature`` (fixed seeds) and score the sampled tokens
    teacher-forced on the same engine: mean NLL per token. None when the temperature is 0."""
    if t.sample_temperature <= 0:
        return None
    nlls: list[float] = []
    texts: list[str] = []
    for i, prompt in enumerate(prompts):
        prompt_ids, output_ids, text = client.sample(prompt, t.max_tokens, t.sample_temperature, seed=1000 + i)
        texts.append(text)
        if not output_ids:
            continue
        positions = client.teacher_forced(prompt_ids + output_ids, 1)
        for j, token in enumerate(output_ids):
            logprob = positions[len(prompt_ids) - 1 + j].get(token)
            if logprob is not None and math.isfinite(logprob):
                nlls.append(-logprob)
    n = len(nlls)
    mean = sum(nlls) / n if n else 0.0
    var = sum((x - mean) ** 2 for x in nlls) / (n - 1) if n > 1 else 0.0
    return SampledStats(
        temperature=t.sample_temperature,
        sequences=len(texts),
        tokens=n,
        mean_nll=mean,
        se=math.sqrt(var / n) if n else 0.0,
        texts=[x[:200] for x in texts[:3]],
    )


#: Fewer scored sampled tokens than this on either side: the sampled check is not measured (fails).
MIN_SAMPLED_TOKENS = 20


def compare_sampled(reference: SampledStats, candidate: SampledStats, t: CorrectnessThresholds) -> SampledComparison:
    """Two-sided: a sampler that emits nonsense raises the NLL, one that turned greedy lowers it."""
    shift = candidate.mean_nll - reference.mean_nll
    limit = max(t.sampled_max_nll_shift, t.sampled_se_multiple * math.hypot(reference.se, candidate.se))
    # a side that sampled (almost) nothing was not measured: no pass on a mean of no tokens
    measured = min(reference.tokens, candidate.tokens) >= MIN_SAMPLED_TOKENS
    return SampledComparison(
        reference=reference, candidate=candidate, shift=shift, limit=limit, passed=measured and abs(shift) <= limit
    )


def _capture_greedy_text(
    base_url: str,
    model: str,
    engine_args: list[str],
    prompts,
    t: CorrectnessThresholds,
    omit: frozenset[str],
    tokenizer: str | None,
    note: str | None,
) -> ReferenceOutputs:
    encoder = _TextEncoder(tokenizer)
    client = _Client(base_url, model, t.request_timeout_s, omit)
    route = "completions"
    try:
        sequences = []
        for prompt in prompts:
            try:
                text = client.greedy_text(prompt, t.max_tokens, route)
            except _RouteMissing:
                if route == "chat" or sequences:
                    raise
                route = "chat"  # an engine without the legacy completions route
                text = client.greedy_text(prompt, t.max_tokens, route)
            sequences.append(
                SequenceRef(
                    prompt=prompt,
                    prompt_ids=encoder.encode(prompt),
                    output_ids=encoder.encode(text),
                    output_text=text,
                    positions=[],
                    actual_ids=[],
                )
            )
        batched = _concurrent_texts(client, [seq.prompt for seq in sequences], t.max_tokens, route)
    finally:
        client.close()
    if encoder.directory is None:
        note = (f"{note}; " if note else "") + "no tokenizer.json at hand: outputs compared as characters"
    return ReferenceOutputs(
        engine_args=list(engine_args),
        float32=is_float32(engine_args),
        top_k=0,
        max_tokens=t.max_tokens,
        sequences=sequences,
        evidence="greedy_text",
        route=route,
        tokenizer=encoder.directory,
        note=note,
        batched_texts=batched,
    )


def _concurrent_texts(client: "_Client", prompts: list[str], max_tokens: int, route: str) -> list[str]:
    """The greedy outputs of ``prompts`` sent all at once (the engine batches them)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, len(prompts))) as pool:
        return list(pool.map(lambda prompt: client.greedy_text(prompt, max_tokens, route), prompts))


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


def distribution_stats(
    reference: ReferenceOutputs, candidate_positions: list[list[dict[int, float]]], tie_margin: float
) -> DistributionStats:
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
    return DistributionStats(
        positions=len(kls),
        mean_kl=sum(kls) / n,
        max_kl=max(kls, default=0.0),
        top1_agreement=agree / n,
        top1_agreement_tolerant=agree_tol / n,
        ppl_ratio=math.exp((cand_nll - ref_nll) / count),
        max_abs_logprob_diff=max(diffs, default=0.0),
    )


def _compare_greedy(
    index: int, seq: SequenceRef, output_ids: list[int], text: str, tie_margin: float
) -> SequenceComparison:
    if output_ids == seq.output_ids:
        return SequenceComparison(
            prompt_index=index,
            identical=True,
            reference_text=seq.output_text,
            candidate_text=text,
            matched_prefix=len(output_ids),
            reference_length=len(seq.output_ids),
        )
    pos = next(
        (i for i, (a, b) in enumerate(zip(seq.output_ids, output_ids)) if a != b),
        min(len(seq.output_ids), len(output_ids)),
    )
    tie = False
    if pos < len(seq.output_ids) and pos < len(output_ids):
        dist = seq.positions[len(seq.prompt_ids) - 1 + pos]  # distribution that chose output token ``pos``
        ref_tok, cand_tok = seq.output_ids[pos], output_ids[pos]
        tie = cand_tok in dist and ref_tok in dist and dist[ref_tok] - dist[cand_tok] <= tie_margin
    return SequenceComparison(
        prompt_index=index,
        identical=False,
        first_divergence=pos,
        divergence_is_tie=tie,
        reference_text=seq.output_text,
        candidate_text=text,
        matched_prefix=pos,
        reference_length=len(seq.output_ids),
    )


def check_candidate(
    base_url: str,
    model: str,
    reference: ReferenceOutputs,
    candidate_args: list[str],
    *,
    lossy: bool,
    thresholds: CorrectnessThresholds | None = None,
    adapter: Any = None,
    tokenizer: str | Path | None = None,
    omit_fields: Collection[str] = (),
) -> CorrectnessReport:
    """Check a live candidate engine against ``reference`` and judge it (lossless or lossy mode).

    The evidence is the reference's, weakened to greedy text when the candidate's ``adapter`` cannot
    give logprobs; a reference without evidence gives a report that says "NOT checked".
    """
    t = thresholds or CorrectnessThresholds()
    if reference.evidence == "none":
        return unchecked_report(reference, candidate_args, lossy=lossy, thresholds=t)
    omit = _omit_fields(adapter, omit_fields)
    candidate_logprobs = adapter is None or evidence_for(adapter) == "logprobs"
    client = _Client(base_url, model, t.request_timeout_s, omit)
    try:
        if reference.evidence == "logprobs" and candidate_logprobs:
            comparisons, cand_positions = [], []
            for i, seq in enumerate(reference.sequences):
                _, output_ids, text = client.greedy(seq.prompt, reference.max_tokens)
                comparisons.append(_compare_greedy(i, seq, output_ids, text, t.tie_margin))
                cand_positions.append(client.teacher_forced(seq.prompt_ids + seq.output_ids, reference.top_k))
            sampled = None
            if reference.sampled is not None:
                st = t.model_copy(update={"sample_temperature": reference.sampled.temperature})
                sampled = sampled_stats(client, [seq.prompt for seq in reference.sequences], st)
            return judge(
                reference, candidate_args, comparisons, cand_positions, lossy=lossy, thresholds=t, sampled=sampled
            )
        tok = reference.tokenizer or (str(tokenizer) if tokenizer is not None else tokenizer_for(adapter))
        encoder = _TextEncoder(tok)
        texts = [client.greedy_text(seq.prompt, reference.max_tokens, reference.route) for seq in reference.sequences]
    finally:
        client.close()
    comparisons = []
    for i, (seq, text) in enumerate(zip(reference.sequences, texts, strict=True)):
        c = compare_greedy_text(i, encoder.encode(seq.output_text), seq.output_text, encoder.encode(text), text)
        batched = reference.batched_texts[i] if i < len(reference.batched_texts) else None
        if not c.identical and batched is not None and encoder.encode(batched) == encoder.encode(text):
            c = c.model_copy(
                update={
                    "identical": True,
                    "first_divergence": None,
                    "matched_prefix": c.reference_length,
                    "matches_batched_reference": True,
                }
            )
        comparisons.append(c)
    return judge_greedy_text(
        reference,
        candidate_args,
        comparisons,
        lossy=lossy,
        thresholds=t,
        unit=encoder.unit,
        self_fraction=reference.self_matched_fraction(encoder.encode),
    )


def compare_greedy_text(
    index: int, reference_ids: list[int], reference_text: str, candidate_ids: list[int], candidate_text: str
) -> SequenceComparison:
    """Two greedy outputs as token sequences: identical, or where they first differ and how much agrees."""
    matched = next(
        (i for i, (a, b) in enumerate(zip(reference_ids, candidate_ids)) if a != b),
        min(len(reference_ids), len(candidate_ids)),
    )
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


#: The least the baseline must agree with itself (solo vs batched, matched prefix of an output) for its
#: own variance to excuse a candidate's changed output.
MIN_SELF_AGREEMENT = 0.5


def judge_greedy_text(
    reference: ReferenceOutputs,
    candidate_args: list[str],
    comparisons: list[SequenceComparison],
    *,
    lossy: bool,
    thresholds: CorrectnessThresholds | None = None,
    unit: str = "tokens",
    self_fraction: float = 1.0,
) -> CorrectnessReport:
    """Verdict on greedy-text evidence (pure).

    Lossless: every output identical to the baseline's (solo or batched), or, where the baseline's
    own outputs changed with batching (``self_fraction`` < 1: near-ties flipping in reduced precision),
    every output agreeing at least as far as the baseline agreed with itself. Without logprobs a flipped
    near-tie cannot be told from a real change any better than that, so such a pass is flagged for
    review. Lossy: the mean matched-prefix fraction must reach ``greedy_lossy_min_prefix_fraction``;
    always flagged for review."""
    t = thresholds or CorrectnessThresholds()
    empty = sum(1 for c in comparisons if not c.reference_length)
    if not comparisons or empty == len(comparisons):  # nothing to compare: never a pass
        return CorrectnessReport(
            mode="lossy" if lossy else "lossless",
            passed=False,
            lossless_equivalent=False,
            float32=False,
            flag_for_review=True,
            thresholds=t,
            evidence="greedy_text",
            checked=False,
            unit=unit,
            greedy_identical=0,
            greedy_total=len(comparisons),
            sequences=comparisons,
            reason=(
                "no output was compared"
                if not comparisons
                else f"the baseline's {len(comparisons)} reference outputs are all empty (a reasoning model "
                "spending its tokens on hidden thinking, a null content): nothing to compare; raise the "
                "check's max_tokens or review by hand"
            ),
        )
    identical = sum(c.identical for c in comparisons)
    equivalent = identical == len(comparisons)
    fractions = [
        (c.matched_prefix or 0) / c.reference_length if c.reference_length else (1.0 if c.identical else 0.0)
        for c in comparisons
    ]
    mean_prefix = sum(fractions) / len(fractions) if fractions else 1.0
    diverged = [
        f"prompt {c.prompt_index} at {unit[:-1]} {c.first_divergence} ({c.matched_prefix}/{c.reference_length} matched)"
        for c in comparisons
        if not c.identical
    ]
    why = (
        f"greedy-text check under the model's tokenizer: {identical}/{len(comparisons)} outputs identical as {unit}"
        + (f"; first divergence {', '.join(diverged[:4])}" if diverged else "")
    )
    if not lossy:
        # the baseline's own batch variance is a bar only while it agreed with itself on most of each
        # output: below MIN_SELF_AGREEMENT (an empty batched output agrees on nothing) it bars nothing
        within_noise = (
            not equivalent
            and MIN_SELF_AGREEMENT <= self_fraction < 1.0
            and min(fractions, default=1.0) >= self_fraction
        )
        passed = equivalent or within_noise
        if equivalent:
            reason = "outputs kept; " + why
        elif within_noise:
            reason = (
                f"outputs kept within the baseline's own batch variance (it agreed with itself on at least "
                f"{self_fraction:.0%} of each output; the candidate on at least {min(fractions):.0%}); " + why
            )
        else:
            reason = (
                "outputs CHANGED by a change declared lossless"
                + (
                    f" (beyond the baseline's own batch variance, {self_fraction:.0%})"
                    if MIN_SELF_AGREEMENT <= self_fraction < 1
                    else f" (the baseline agreed with itself on only {self_fraction:.0%} of an output when batched: "
                    "too noisy a bar to pass a changed output against)"
                    if self_fraction < 1
                    else ""
                )
                + "; "
                + why
            )
    else:
        passed = mean_prefix >= t.greedy_lossy_min_prefix_fraction
        reason = (
            f"lossy change, mean matched prefix {mean_prefix:.0%} {'>=' if passed else 'BELOW'} "
            f"{t.greedy_lossy_min_prefix_fraction:.0%} of the reference outputs ({why}); no distribution "
            f"check is possible without logprobs; flagged for human review"
        )
    float32 = reference.float32 and is_float32(candidate_args)
    return CorrectnessReport(
        mode="lossy" if lossy else "lossless",
        passed=passed,
        lossless_equivalent=equivalent,
        float32=float32,
        flag_for_review=lossy or not equivalent,
        reason=reason,
        greedy_identical=identical,
        greedy_total=len(comparisons),
        sequences=comparisons,
        distribution=None,
        thresholds=t,
        evidence="greedy_text",
        checked=True,
        unit=unit,
        mean_matched_prefix_fraction=mean_prefix,
    )


def unchecked_report(
    reference: ReferenceOutputs,
    candidate_args: list[str],
    *,
    lossy: bool,
    thresholds: CorrectnessThresholds | None = None,
) -> CorrectnessReport:
    """The report when there is no evidence to check against: it says so, never "checked", and is
    flagged for review; it does not fail the candidate (the engine's missing API is not its fault),
    but the adoption rule never adopts an unchecked change by itself (research.loop.pick_winner)."""
    return CorrectnessReport(
        mode="lossy" if lossy else "lossless",
        passed=True,
        lossless_equivalent=False,
        float32=reference.float32 and is_float32(candidate_args),
        flag_for_review=True,
        reason=f"no correctness evidence: {reference.note or 'the engine answered no request'}; "
        "outputs were not compared; review before use",
        greedy_identical=0,
        greedy_total=0,
        thresholds=thresholds or CorrectnessThresholds(),
        evidence="none",
        checked=False,
    )


def judge(
    reference: ReferenceOutputs,
    candidate_args: list[str],
    comparisons: list[SequenceComparison],
    cand_positions: list[list[dict[int, float]]],
    *,
    lossy: bool,
    thresholds: CorrectnessThresholds | None = None,
    sampled: SampledStats | None = None,
) -> CorrectnessReport:
    """Turn raw comparisons into a verdict (pure: unit-testable without an engine). ``sampled``: the
    candidate's sampled outputs, judged against the reference's (a lossless change must keep them)."""
    t = thresholds or CorrectnessThresholds()
    stats = distribution_stats(reference, cand_positions, t.tie_margin)
    float32 = reference.float32 and is_float32(candidate_args)
    identical = sum(c.identical for c in comparisons)
    if float32:
        equivalent = identical == len(comparisons) and stats.max_abs_logprob_diff <= t.exact_logprob_atol
        why = (
            f"float32 exact check: {identical}/{len(comparisons)} identical, max |dlogprob| "
            f"{stats.max_abs_logprob_diff:.2e} (limit {t.exact_logprob_atol:.0e})"
        )
    else:
        untied = [c.prompt_index for c in comparisons if not c.identical and not c.divergence_is_tie]
        equivalent = (
            not untied
            and stats.mean_kl <= t.lossless_max_mean_kl
            and stats.top1_agreement_tolerant >= t.lossless_min_top1
        )
        why = (
            f"tolerance check: divergences beyond a tie in prompts {untied or 'none'}, mean KL {stats.mean_kl:.2e} "
            f"(limit {t.lossless_max_mean_kl:.0e}), tie-tolerant top-1 {stats.top1_agreement_tolerant:.3f} "
            f"(min {t.lossless_min_top1})"
        )
    samples = (
        compare_sampled(reference.sampled, sampled, t)
        if reference.sampled is not None and sampled is not None
        else None
    )
    if samples is not None:
        why += (
            f"; sampled outputs (T={sampled.temperature:g}): mean NLL {sampled.mean_nll:.2f} vs the reference's "
            f"{reference.sampled.mean_nll:.2f} nats/token, shift {samples.shift:+.2f} "
            f"({'within' if samples.passed else 'BEYOND'} {samples.limit:.2f})"
        )
        equivalent = equivalent and samples.passed
    elif reference.sampled is None:
        why += "; sampled outputs not checked (the reference has no samples)"
    if not lossy:
        passed = equivalent
        reason = ("outputs kept; " if equivalent else "outputs CHANGED by a change declared lossless; ") + why
    else:
        within = (
            stats.mean_kl <= t.lossy_max_mean_kl
            and stats.top1_agreement >= t.lossy_min_top1
            and stats.ppl_ratio <= t.lossy_max_ppl_ratio
        )
        passed = within and (samples is None or samples.passed)  # a broken sampler fails either way
        reason = (
            f"lossy change, distribution {'within' if within else 'OUTSIDE'} thresholds (KL <= {t.lossy_max_mean_kl}, "
            f"top-1 >= {t.lossy_min_top1}, ppl ratio <= {t.lossy_max_ppl_ratio})"
            + (
                f", sampled outputs' NLL shift {samples.shift:+.2f} ({'within' if samples.passed else 'BEYOND'} "
                f"{samples.limit:.2f})"
                if samples is not None
                else ""
            )
            + "; flagged for human review"
        )
    return CorrectnessReport(
        mode="lossy" if lossy else "lossless",
        passed=passed,
        lossless_equivalent=equivalent,
        float32=float32,
        flag_for_review=lossy or not equivalent,
        reason=reason,
        greedy_identical=identical,
        greedy_total=len(comparisons),
        sequences=comparisons,
        distribution=stats,
        thresholds=t,
        sampled=samples,
    )
