"""Step 4 of the drafter stage: the drafter served as a candidate, and whether it pays (research.drafter).

``candidate_args`` is the ``--speculative-config`` intervention (the engine's adapter knows the flags:
``EngineAdapter.draft_model_diff``); ``run_drafter_candidate`` measures it through the one harness
(lossless check, sweeps, noise floor) with acceptance per position scraped from ``/metrics`` around each
sweep (the adapter's ``speculative_counters``). ``draft_cost_ratio`` and ``break_even_acceptance`` say
which acceptance length pays for drafting.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import polars as pl
from pydantic import BaseModel, Field

from research.drafter.errors import DrafterError
from research.harness import Progress


def draft_model_diff(engine_kind: str, draft_dir: Path, k: int) -> dict[str, str]:
    """The engine's argument diff that serves ``draft_dir`` as a ``k``-token drafter (its adapter knows
    the flags); DrafterError when that engine cannot serve a trained drafter."""
    from engines.registry import ADAPTERS

    reason = cannot_serve_drafter(engine_kind)
    if reason:
        raise DrafterError(reason)
    return ADAPTERS[engine_kind].draft_model_diff(Path(draft_dir), k)


def cannot_serve_drafter(engine_kind: str) -> str | None:
    """Why an engine of this kind cannot run the drafter stage (None: it can). The stage needs the
    engine's token ids for on-policy data and a way to serve a draft model."""
    from engines.registry import ADAPTERS

    cls = ADAPTERS.get(engine_kind)
    if cls is None:
        return f"unknown engine kind {engine_kind!r}"
    if cls.draft_model_diff(Path("draft"), 1) is None:
        return f"the {engine_kind} adapter cannot serve a trained draft model"
    if "token_ids" not in cls.evidence:
        return f"the {engine_kind} adapter does not return token ids, which on-policy training data needs"
    return None


def candidate_args(engine_args: list[str], draft_dir: Path, k: int, engine_kind: str) -> list[str]:
    """``engine_args`` with the drafter's arguments at the end (replacing any earlier speculation settings)."""
    from specs.engine_args import REMOVE, apply_diff

    diff = draft_model_diff(engine_kind, draft_dir, k)
    return apply_diff(apply_diff(engine_args, {flag: REMOVE for flag in diff}), diff)


def describe(diff: dict[str, str]) -> str:
    """The diff as one shell-quoted argument string, for people to copy."""
    import shlex

    return " ".join(f"{flag} {shlex.quote(value)}" for flag, value in diff.items())


class ServedAcceptance(BaseModel):
    """Acceptance as the engine counted it (deltas of its /metrics counters over the measured sweeps)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: list[float] = Field(default_factory=list)

    @property
    def acceptance_length(self) -> float | None:
        return None if not self.drafts else 1.0 + self.accepted_tokens / self.drafts

    def add(self, before: dict[str, float], after: dict[str, float]) -> None:
        d = lambda key: after.get(key, 0.0) - before.get(key, 0.0)  # noqa: E731
        drafts = d("num_drafts")
        counts = [d(f"accepted_pos{j}") for j in range(sum(1 for key in after if key.startswith("accepted_pos")))]
        total_before = self.drafts
        self.drafts += drafts
        self.draft_tokens += d("num_draft_tokens")
        self.accepted_tokens += d("num_accepted_tokens")
        if self.drafts:
            old = self.accepted_per_position + [0.0] * (len(counts) - len(self.accepted_per_position))
            self.accepted_per_position = [(old[j] * total_before + counts[j]) / self.drafts for j in range(len(counts))]


def read_metrics(base_url: str, engine_kind: str) -> dict[str, float]:
    """The engine's speculative-decoding counters now (its adapter reads them: engines.registry)."""
    from engines.registry import adapter_class

    r = httpx.get(base_url.rstrip("/") + "/metrics", timeout=30.0)
    r.raise_for_status()
    return adapter_class(engine_kind).speculative_counters(r.text)


def run_drafter_candidate(
    spec,
    engine_args: list[str],
    draft_dir: Path,
    k: int,
    pool: pl.DataFrame,
    noise,
    repeats: int,
    *,
    reference=None,
    sweep_fn=None,
    progress: Progress = print,
    **kwargs,
):
    """The drafter through research.harness.run_candidate (lossless: never declared lossy), with vLLM's
    acceptance counters read around every sweep. Returns (CandidateResult, ServedAcceptance)."""
    from research.harness import default_sweep_fn, run_candidate

    inner = sweep_fn or default_sweep_fn()
    served = ServedAcceptance()

    def sweep(engine, pool_, spec_):
        before = read_metrics(engine.base_url, spec.engine.kind)
        try:
            return inner(engine, pool_, spec_)
        finally:
            served.add(before, read_metrics(engine.base_url, spec.engine.kind))

    args = candidate_args(engine_args, draft_dir, k, spec.engine.kind)
    kwargs.setdefault("soak", sweep_fn is None)  # the wrapper below counts acceptance; the sweep is ours
    result = run_candidate(
        spec, args, pool, noise, repeats, lossy=False, reference=reference, sweep_fn=sweep, progress=progress, **kwargs
    )
    return result, served


# ---------------------------------------------------------------- when it pays off


def draft_cost_ratio(target_dir: Path, draft_dir: Path | None = None, *, draft_layers: int | None = None) -> float:
    """Cost of one draft step relative to one target step, from the bytes each reads (memory-bound
    decode). Without a draft folder: the target's embeddings/head plus ``draft_layers`` of its layers."""
    cfg = json.loads((Path(target_dir) / "config.json").read_text())
    h, inter, vocab, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    per_layer = 2 * h * h + 2 * h * (h // heads) * kv + 3 * h * inter
    head = vocab * h * (1 if cfg.get("tie_word_embeddings") else 2)
    if draft_dir is not None:
        draft_layers = json.loads((Path(draft_dir) / "config.json").read_text())["num_hidden_layers"]
    if draft_layers is None:
        raise ValueError("draft_dir or draft_layers is needed")
    return (head + draft_layers * per_layer) / (head + n * per_layer)


def break_even_acceptance(k: int, draft_cost: float, verify_cost: float = 1.0) -> float:
    """Acceptance length (tokens per target step, 1..k+1) at which speculation breaks even.

    One round drafts ``k`` tokens (``k * draft_cost`` target steps) and verifies k+1 positions in one
    target step costing ``verify_cost`` (1.0 when decode is memory-bound: k+1 tokens read the weights
    once; more when the batch already fills the compute). It yields the acceptance length in tokens,
    so speculation pays when acceptance length > k * draft_cost + verify_cost.
    """
    return k * draft_cost + verify_cost
