"""Diagnostic workloads: recipe -> variant pools that change exactly one property (real tokenizer)."""

from __future__ import annotations

import json

import pytest

from specs.config import RecipeSpec
from specs.models import tokenizer_dir
from loadgen.results import LatencySummary, StepResult
from replay.prefix import cached_fraction
from specs.pool_schema import POOL_SCHEMA
from replay.tokenize import ChatTokenizer
from research.workloads import build_variants, measure_variants, recipe_applies


@pytest.fixture(scope="module")
def tok() -> ChatTokenizer:
    return ChatTokenizer.from_dir(tokenizer_dir("builtin:smollm2-135m-instruct"))


def recipe(vary: str, values: list[float], **fixed) -> RecipeSpec:
    return RecipeSpec.model_validate(
        {
            "name": "r",
            "steps": [{"name": "s", "vary": vary, "values": values, "fixed": fixed, "rate": 1.0, "duration_s": 8}],
        }
    )


def test_prompt_length_scan_has_exact_lengths_and_fixed_output(tok):
    variants = build_variants(recipe("prompt_tokens", [128, 512], output_tokens=16), tok, model="smol")
    assert [v.value for v in variants] == [128, 512]
    for v in variants:
        assert dict(v.pool.schema) == POOL_SCHEMA and v.pool.height >= 12
        assert v.pool["prompt_tokens"].unique().to_list() == [int(v.value)]
        bodies = [json.loads(b) for b in v.pool["body"]]
        assert {b["max_tokens"] for b in bodies} == {16} and all(b["ignore_eos"] for b in bodies)
        # The recorded count is what the tokenizer says about the rendered prompt.
        assert tok.count_bodies(bodies[:3]).tolist() == [int(v.value)] * 3
        assert v.pool["arrival_offset_s"].diff().drop_nulls().unique().to_list() == [1.0]


def test_shared_prefix_variants_share_only_what_they_say(tok):
    variants = build_variants(
        recipe("shared_prefix_fraction", [0.0, 0.75], prompt_tokens=512, output_tokens=8), tok, model="smol"
    )
    reuse = []
    for v in variants:
        ids = tok.encode_bodies([json.loads(b) for b in v.pool["body"]])
        reuse.append(cached_fraction(ids, 16))
        assert v.pool["prompt_tokens"].unique().to_list() == [512]
    assert reuse[0] < 0.1  # unique prompts: only the chat template's preamble repeats
    assert 0.6 < reuse[1] < 0.8  # three quarters shared by every request after the first


def test_long_prompt_interference_mixes_the_stated_share(tok):
    variants = build_variants(
        recipe(
            "long_prompt_interference", [0.0, 0.25], short_prompt_tokens=64, long_prompt_tokens=900, output_tokens=8
        ),
        tok,
        model="smol",
        max_model_len=800,
    )
    none, quarter = variants
    assert none.pool["prompt_tokens"].unique().to_list() == [64]
    long = quarter.pool.filter(quarter.pool["prompt_tokens"] > 64)
    assert long.height == round(0.25 * quarter.pool.height)
    assert long["prompt_tokens"].max() <= 800 - 8  # capped by max_model_len


def test_measure_keeps_valid_steps_and_recipe_errors_are_clear(tok):
    variants = build_variants(recipe("output_tokens", [8, 32], prompt_tokens=64), tok, model="smol")
    lat = LatencySummary(p50=10.0, p95=20.0)

    def run(variant):
        return StepResult(
            target_rate=variant.rate,
            achieved_rate=variant.rate,
            throughput_rps=1.0,
            duration_s=8,
            requests=variant.pool.height,
            errors=0,
            error_rate=0.0,
            ttft_ms=lat,
            itl_ms=lat,
            e2e_ms=lat,
            send_lag_ms=lat,
            within_sla=True,
            validity="invalid" if variant.value == 32 else "valid",
        )

    results = measure_variants(variants, run)
    assert [(r.vary, r.value) for r in results] == [("output_tokens", 8.0)]
    with pytest.raises(ValueError, match="no rate"):
        build_variants(
            RecipeSpec.model_validate({"name": "r", "steps": [{"name": "s", "vary": "prompt_tokens", "values": [64]}]}),
            tok,
        )
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        build_variants(recipe("shared_prefix_fraction", [1.5]), tok)
    ok, reasons = recipe_applies(
        RecipeSpec.model_validate({"name": "r", "applies_when": {"prefix_reuse": "lots"}, "steps": []}),
        {"prefix_reuse": 0.5},
    )
    assert not ok and "not '<op> <number>'" in reasons[0]
