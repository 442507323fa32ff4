"""Correctness checks against real vLLM CPU servers (tiny random model, float32).

An identical configuration passes the exact lossless check; an fp8 KV cache (a lossy change the
CPU backend supports) is caught by the distribution check, whether it is declared lossless or lossy.
(Speculation whose sampler is broken, vLLM issue 55005, is caught by the sampled-output check:
tests/test_correctness.py on recorded distributions.)
"""

from __future__ import annotations

import pytest

from specs.config import DefinitionSet
from specs.engine_args import apply_diff
from research.correctness import capture_reference, check_candidate

pytestmark = pytest.mark.engine


def test_identical_config_passes_and_fp8_kv_cache_is_caught(tiny_engine, engine_slot, definitions: DefinitionSet):
    spec = definitions.endpoint("tiny_random")
    args = list(spec.engine.args)
    reference = capture_reference(tiny_engine.base_url, tiny_engine.served_model, args, adapter=tiny_engine.adapter)
    assert reference.evidence == "logprobs"  # vLLM's adapter gives token ids and logprobs
    assert reference.float32 and len(reference.sequences) == 8
    assert all(
        len(s.output_ids) > 0 and len(s.positions) == len(s.prompt_ids) + len(s.output_ids) - 1
        for s in reference.sequences
    )

    same = check_candidate(
        tiny_engine.base_url, tiny_engine.served_model, reference, args, lossy=False, adapter=tiny_engine.adapter
    )
    assert same.passed and same.lossless_equivalent and same.float32
    assert same.checked and same.evidence == "logprobs" and "evidence: logprobs" in same.summary()
    assert same.greedy_identical == same.greedy_total == 8
    assert same.distribution.max_abs_logprob_diff <= same.thresholds.exact_logprob_atol

    fp8_args = apply_diff(args, {"--kv-cache-dtype": "fp8"})
    fp8 = engine_slot.get(spec, fp8_args)
    declared_lossless = check_candidate(fp8.base_url, fp8.served_model, reference, fp8_args, lossy=False)
    assert not declared_lossless.passed and not declared_lossless.lossless_equivalent
    assert declared_lossless.distribution.max_abs_logprob_diff > 10 * same.distribution.max_abs_logprob_diff + 1e-3
    assert declared_lossless.distribution.mean_kl > same.distribution.mean_kl
    declared_lossy = check_candidate(fp8.base_url, fp8.served_model, reference, fp8_args, lossy=True)
    assert declared_lossy.mode == "lossy" and declared_lossy.flag_for_review
    assert not declared_lossy.lossless_equivalent
    engine_slot.release()
