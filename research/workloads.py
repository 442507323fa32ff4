"""Diagnostic workloads: traffic that changes one property at a time, from YAML recipes.

A recipe (``definitions/recipes/<name>/defs.yaml``, :class:`specs.config.RecipeSpec`) lists steps;
each step varies one property (prompt length, output length, shared-prefix fraction, share of
long prompts arriving among short ones) over some values with the rest fixed. Every value
becomes a small replay pool (``specs/pool_schema.py`` columns) of synthetic prompts with exact
token counts under the endpoint's tokenizer (``replay.synth``); measuring it is one loadgen step
at a fixed rate. ``applies_when`` lets a new campaign pick the recipes that fit an endpoint's
traits (``{"prefix_reuse": ">0.3"}``).
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from specs.config import RecipeSpec, RecipeStep
from loadgen.results import StepResult
from specs.pool_schema import POOL_SCHEMA, check_pool
from research.proposals import WorkloadResult

TEXT_BLOCK = 64  # token granularity of synthetic shared prefixes (above any chat-template preamble)
_COND = re.compile(r"^\s*(<=|>=|==|!=|<|>)\s*(-?\d+(?:\.\d+)?)\s*$")
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}

DEFAULTS = {
    "prompt_tokens": 256,
    "output_tokens": 32,
    "short_prompt_tokens": 128,
    "long_prompt_tokens": 1536,
    "prefix_groups": 1,
}


@dataclass
class WorkloadVariant:
    """One value of one recipe step: a pool to send at ``rate`` for ``duration_s``."""

    recipe: str
    step: str
    vary: str
    value: float
    rate: float
    duration_s: float
    pool: pl.DataFrame


def recipe_applies(recipe: RecipeSpec, traits: Mapping[str, float]) -> tuple[bool, list[str]]:
    """Whether every ``applies_when`` condition holds for ``traits``; the reasons when not."""
    reasons = []
    for trait, condition in recipe.applies_when.items():
        match = _COND.match(condition)
        if not match:
            reasons.append(
                f"recipe {recipe.name}: condition {trait}: {condition!r} is not '<op> <number>' (op: < <= > >= == !=)"
            )
            continue
        if trait not in traits:
            reasons.append(f"trait {trait!r} is unknown for this endpoint")
            continue
        op, bound = match.group(1), float(match.group(2))
        if not _OPS[op](float(traits[trait]), bound):
            reasons.append(f"{trait} = {traits[trait]:.3g} does not satisfy {condition}")
    return not reasons, reasons


def select_recipes(recipes: Mapping[str, RecipeSpec], traits: Mapping[str, float]) -> list[RecipeSpec]:
    """The recipes whose conditions hold for these traits (a campaign's default choice)."""
    return [r for r in recipes.values() if recipe_applies(r, traits)[0]]


def _specs(step: RecipeStep, value: float, count: int, rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """(prompt tokens, output tokens, shared prefix tokens) of each request of one variant."""
    fixed = {**DEFAULTS, **step.fixed}
    output = int(fixed["output_tokens"])
    if step.vary == "prompt_tokens":
        return [(int(value), output, 0)] * count
    if step.vary == "output_tokens":
        return [(int(fixed["prompt_tokens"]), int(value), 0)] * count
    if step.vary == "shared_prefix_fraction":
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"step {step.name}: shared_prefix_fraction values must be in [0, 1], got {value}")
        prompt = int(fixed["prompt_tokens"])
        return [(prompt, output, int(value * prompt))] * count
    if step.vary == "long_prompt_interference":
        if not 0.0 <= value <= 1.0:
            raise ValueError(
                f"step {step.name}: long_prompt_interference values are the share of long prompts, "
                f"in [0, 1]; got {value}"
            )
        # Exactly round(value * count) long prompts, spread evenly through the arrival order.
        long = [math.floor((i + 1) * value + 1e-9) > math.floor(i * value + 1e-9) for i in range(count)]
        return [
            (int(fixed["long_prompt_tokens"] if is_long else fixed["short_prompt_tokens"]), output, 0)
            for is_long in long
        ]
    raise ValueError(f"step {step.name}: unknown vary {step.vary!r}")


def build_variants(
    recipe: RecipeSpec,
    tokenizer,
    *,
    base_rate: float | None = None,
    model: str = "model",
    max_model_len: int | None = None,
    seed: int = 0,
    min_requests: int = 12,
) -> list[WorkloadVariant]:
    """Every (step, value) of ``recipe`` as a pool for ``tokenizer`` (a ``replay.tokenize.ChatTokenizer``).

    ``base_rate`` is used for steps without their own ``rate`` (campaigns pass half the
    baseline capacity); ``max_model_len`` caps prompt + output lengths.
    """
    from replay.synth import synthesise

    variants = []
    next_block = 1_000_000 + seed * 1_000_000  # unique block ids: no accidental sharing between prompts
    for step in recipe.steps:
        rate = step.rate or base_rate
        if not rate or rate <= 0:
            raise ValueError(f"recipe {recipe.name} step {step.name}: no rate (set steps[].rate or pass base_rate)")
        count = max(min_requests, math.ceil(rate * step.duration_s) + 4)
        for k, value in enumerate(step.values):
            rng = np.random.default_rng(seed * 7919 + k)
            specs = _specs(step, float(value), count, rng)
            groups = int(step.fixed.get("prefix_groups", DEFAULTS["prefix_groups"]))
            targets, block_ids, outputs, prefix_keys = [], [], [], []
            for i, (prompt, output, shared) in enumerate(specs):
                if max_model_len is not None:
                    prompt = max(16, min(prompt, max_model_len - output - 8))
                blocks = math.ceil(prompt / TEXT_BLOCK) + 1
                shared_blocks = min(shared // TEXT_BLOCK, blocks)
                group = i % groups
                ids = [10_000 * (group + 1) + b for b in range(shared_blocks)]
                ids += list(range(next_block, next_block + blocks - shared_blocks))
                next_block += blocks
                targets.append(prompt)
                block_ids.append(ids)
                outputs.append(output)
                prefix_keys.append(f"shared:{group}" if shared_blocks else f"unique:{i}")
            texts, counts, _ = synthesise(
                tokenizer, np.array(targets, dtype=np.int64), block_ids, TEXT_BLOCK, seed=seed + k
            )
            pool = _pool(recipe.name, step.name, float(value), rate, model, texts, counts, outputs, prefix_keys)
            variants.append(
                WorkloadVariant(recipe.name, step.name, step.vary, float(value), rate, step.duration_s, pool)
            )
    return variants


def _pool(
    recipe: str,
    step: str,
    value: float,
    rate: float,
    model: str,
    texts: Sequence[str],
    counts: np.ndarray,
    outputs: Sequence[int],
    prefix_keys: Sequence[str],
) -> pl.DataFrame:
    bodies = [
        json.dumps(
            {
                "model": model,
                "messages": [{"role": "user", "content": t}],
                "max_tokens": int(o),
                "ignore_eos": True,
                "temperature": 0.0,
            }
        )
        for t, o in zip(texts, outputs)
    ]
    frame = pl.DataFrame(
        {
            "request_id": [f"{recipe}:{step}:{value:g}:{i}" for i in range(len(texts))],
            "arrival_offset_s": [i / rate for i in range(len(texts))],
            "body": bodies,
            "prompt_tokens": [int(c) for c in counts],
            "expected_output_tokens": [int(o) for o in outputs],
            "prefix_group": [f"{recipe}:{step}:{key}" for key in prefix_keys],
            "logged_cached_tokens": [None] * len(texts),
            "source": [f"recipe:{recipe}"] * len(texts),
        },
        schema=POOL_SCHEMA,
    )
    return check_pool(frame)


def result_from_step(variant: WorkloadVariant, step: StepResult) -> WorkloadResult:
    """What diagnosis keeps of one measured variant."""
    return WorkloadResult(
        recipe=variant.recipe,
        step=variant.step,
        vary=variant.vary,
        value=variant.value,
        rate=variant.rate,
        requests=step.requests,
        ttft_p50_ms=step.ttft_ms.p50,
        ttft_p95_ms=step.ttft_ms.p95,
        itl_p50_ms=step.itl_ms.p50,
        itl_p95_ms=step.itl_ms.p95,
        e2e_p95_ms=step.e2e_ms.p95,
        throughput_rps=step.throughput_rps,
        error_rate=step.error_rate,
        cached_prompt_fraction=step.cached_prompt_fraction,
        engine_metrics=dict(step.engine_metrics),
    )


def measure_variants(
    variants: Sequence[WorkloadVariant], run_step: Callable[[WorkloadVariant], StepResult]
) -> list[WorkloadResult]:
    """Measure each variant with ``run_step`` (a loadgen call at the variant's fixed rate), in order.

    Typical ``run_step``: ``lambda v: run_sweep(engine, v.pool, spec, rates=[v.rate],
    step_duration_s=v.duration_s).steps[0]``. Invalid steps are kept out (their numbers mean nothing).
    """
    results = []
    for variant in variants:
        step = run_step(variant)
        if step.validity == "valid":
            results.append(result_from_step(variant, step))
    return results
