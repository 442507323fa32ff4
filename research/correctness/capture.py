"""Reference capture: the baseline's outputs of the correctness prompts, on the strongest evidence its
engine gives (token ids and logprobs, else greedy text, else nothing), captured once per campaign.

Apart from the checks because it runs once, on the baseline, and never judges; every candidate is then
checked against what it recorded (``research.correctness.candidate``).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from research.correctness.client import (
    CorrectnessClient,
    CorrectnessUnavailable,
    RouteMissing,
    TextEncoder,
    evidence_for,
    rejected_fields,
    tokenizer_for,
)
from research.correctness.outputs import ReferenceOutputs, SequenceRef, is_float32
from research.correctness.sampled import sampled_stats
from research.correctness.thresholds import CorrectnessThresholds, Evidence

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
    omit = rejected_fields(adapter, omit_fields)
    note = None
    if wanted == "logprobs":
        try:
            return _capture_logprobs(base_url, model, engine_args, prompts, t, omit)
        except CorrectnessUnavailable as exc:
            note = f"token ids / logprobs unavailable ({_first_line(exc)}); greedy text used instead"
    elif adapter is not None and wanted == "greedy_text":
        note = f"the {getattr(adapter, 'kind', '') or 'engine'} adapter gives no token ids / logprobs"
    tok = str(tokenizer) if tokenizer is not None else tokenizer_for(adapter)
    try:
        return _capture_greedy_text(base_url, model, engine_args, prompts, t, omit, tok, note)
    except CorrectnessUnavailable as exc:
        why = f"greedy outputs unavailable too ({_first_line(exc)})"
        return _reference(
            engine_args, t, top_k=t.top_k, sequences=[], evidence="none", note=f"{note}; {why}" if note else why
        )


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200]


def _reference(engine_args: list[str], t: CorrectnessThresholds, **fields: Any) -> ReferenceOutputs:
    """The reference of ``engine_args`` at ``t``'s output length; ``fields``: what the evidence recorded."""
    return ReferenceOutputs(
        engine_args=list(engine_args), float32=is_float32(engine_args), max_tokens=t.max_tokens, **fields
    )


def _capture_logprobs(
    base_url: str, model: str, engine_args: list[str], prompts, t: CorrectnessThresholds, omit: frozenset[str]
) -> ReferenceOutputs:
    with CorrectnessClient(base_url, model, t.request_timeout_s, omit) as client:
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
    return _reference(engine_args, t, top_k=t.top_k, sequences=sequences, evidence="logprobs", sampled=sampled)


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
    encoder = TextEncoder(tokenizer)
    route = "completions"
    with CorrectnessClient(base_url, model, t.request_timeout_s, omit) as client:
        sequences = []
        for prompt in prompts:
            try:
                text = client.greedy_text(prompt, t.max_tokens, route)
            except RouteMissing:
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
        batched = client.concurrent_texts([seq.prompt for seq in sequences], t.max_tokens, route)
    if encoder.directory is None:
        note = (f"{note}; " if note else "") + "no tokenizer.json at hand: outputs compared as characters"
    return _reference(
        engine_args,
        t,
        top_k=0,
        sequences=sequences,
        evidence="greedy_text",
        route=route,
        tokenizer=encoder.directory,
        note=note,
        batched_texts=batched,
    )
