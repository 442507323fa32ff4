"""Correctness judging on constructed references (no engine): exact float32 checks, near-tie
tolerance in lower precision, and the lossy distribution metrics (KL, top-1, perplexity ratio)."""

from __future__ import annotations

import math

import pytest

from research.correctness import (
    CorrectnessThresholds,
    ReferenceOutputs,
    SequenceRef,
    _compare_greedy,
    _coarse_kl,
    distribution_stats,
    is_float32,
    judge,
)

F32 = ["--dtype", "float32"]
BF16 = ["--dtype", "bfloat16"]


def dist(*pairs: tuple[int, float]) -> dict[int, float]:
    """Token -> logprob from token -> probability."""
    return {t: math.log(p) for t, p in pairs}


def reference(args: list[str], positions: list[dict[int, float]] | None = None) -> ReferenceOutputs:
    # prompt [1, 2], output [3, 4]: positions cover tokens 2, 3, 4.
    positions = positions or [dist((2, 0.6), (9, 0.3)), dist((3, 0.5), (7, 0.48)), dist((4, 0.9), (5, 0.05))]
    seq = SequenceRef(
        prompt="p", prompt_ids=[1, 2], output_ids=[3, 4], output_text="ab", positions=positions, actual_ids=[2, 3, 4]
    )
    return ReferenceOutputs(engine_args=args, float32=is_float32(args), top_k=2, max_tokens=2, sequences=[seq])


def test_is_float32_reads_the_dtype_flag():
    assert is_float32(["--max-num-seqs", "4", "--dtype", "float32"])
    assert is_float32(["--dtype=float"])
    assert not is_float32(BF16) and not is_float32([])


def test_coarse_kl_is_zero_for_equal_and_positive_for_different_distributions():
    p = dist((1, 0.7), (2, 0.2))
    assert _coarse_kl(p, p) == pytest.approx(0.0, abs=1e-12)
    q = dist((1, 0.4), (2, 0.5))
    # exact KL over {1, 2, rest}: rest mass 0.1 on both sides
    expected = 0.7 * math.log(0.7 / 0.4) + 0.2 * math.log(0.2 / 0.5)
    assert _coarse_kl(p, q) == pytest.approx(expected, rel=1e-9)
    # a token missing from the candidate's list is charged at the candidate's floor
    assert _coarse_kl(p, dist((1, 0.7), (3, 0.2))) > 0


def test_identical_outputs_pass_the_float32_exact_check():
    ref = reference(F32)
    seq = ref.sequences[0]
    comps = [_compare_greedy(0, seq, [3, 4], "ab", 0.05)]
    report = judge(ref, F32, comps, [seq.positions], lossy=False)
    assert report.passed and report.lossless_equivalent and report.float32
    assert report.distribution.mean_kl == pytest.approx(0.0, abs=1e-12)
    assert report.distribution.top1_agreement == 1.0 and not report.flag_for_review


def test_float32_check_fails_on_any_changed_token_even_a_near_tie():
    ref = reference(F32)
    seq = ref.sequences[0]
    comps = [_compare_greedy(0, seq, [7, 4], "cb", 0.05)]  # 7 was 0.48 vs 0.5: a near-tie
    assert comps[0].first_divergence == 0 and comps[0].divergence_is_tie
    report = judge(ref, F32, comps, [seq.positions], lossy=False)
    assert not report.passed and not report.lossless_equivalent
    assert "CHANGED" in report.reason


def test_float32_check_fails_on_tiny_logprob_drift():
    ref = reference(F32)
    seq = ref.sequences[0]
    drifted = [{t: lp + 0.01 for t, lp in p.items()} for p in seq.positions]
    report = judge(ref, F32, [_compare_greedy(0, seq, [3, 4], "ab", 0.05)], [drifted], lossy=False)
    assert not report.passed
    assert report.distribution.max_abs_logprob_diff == pytest.approx(0.01, abs=1e-9)


def test_lower_precision_tolerates_a_near_tie_flip_but_not_a_real_divergence():
    ref = reference(BF16)
    seq = ref.sequences[0]
    tie = judge(ref, BF16, [_compare_greedy(0, seq, [7, 4], "cb", 0.05)], [seq.positions], lossy=False)
    assert tie.passed and tie.lossless_equivalent and not tie.float32
    # token 4 (p=0.9) replaced by 5 (p=0.05): not a tie
    real = judge(ref, BF16, [_compare_greedy(0, seq, [3, 5], "ac", 0.05)], [seq.positions], lossy=False)
    assert real.sequences[0].first_divergence == 1 and real.sequences[0].divergence_is_tie is False
    assert not real.passed


def test_a_lossy_change_is_measured_caught_and_always_flagged():
    ref = reference(BF16)
    seq = ref.sequences[0]
    # candidate prefers token 7 over 3 and is less sure of 4: top-1 flips at one of three positions
    cand = [dist((2, 0.6), (9, 0.3)), dist((3, 0.3), (7, 0.6)), dist((4, 0.8), (5, 0.1))]
    stats = distribution_stats(ref, [cand], tie_margin=0.05)
    assert stats.top1_agreement == pytest.approx(2 / 3)
    assert stats.mean_kl > 0.01
    assert stats.ppl_ratio > 1.0  # the reference tokens became less likely
    comps = [_compare_greedy(0, seq, [7, 4], "cb", 0.05)]
    as_lossless = judge(ref, BF16, comps, [cand], lossy=False)
    assert not as_lossless.passed and not as_lossless.lossless_equivalent
    loose = CorrectnessThresholds(lossy_max_mean_kl=1.0, lossy_min_top1=0.5, lossy_max_ppl_ratio=2.0)
    accepted = judge(ref, BF16, comps, [cand], lossy=True, thresholds=loose)
    assert accepted.passed and accepted.flag_for_review and accepted.mode == "lossy"
    strict = judge(ref, BF16, comps, [cand], lossy=True)
    assert not strict.passed and strict.flag_for_review
    assert "OUTSIDE" in strict.reason


# --- sampled outputs: greedy checks never run the sampler (vLLM issue 55005 broke only sampling)


def _sampled(mean_nll: float, se: float = 0.05, tokens: int = 256):
    from research.correctness import SampledStats

    return SampledStats(temperature=1.0, sequences=8, tokens=tokens, mean_nll=mean_nll, se=se)


def test_a_lossless_change_that_breaks_sampling_fails_though_greedy_outputs_are_exact():
    ref = reference(F32).model_copy(update={"sampled": _sampled(2.1)})
    seq = ref.sequences[0]
    comps = [_compare_greedy(0, seq, [3, 4], "ab", 0.05)]
    kept = judge(ref, F32, comps, [seq.positions], lossy=False, sampled=_sampled(2.3))
    assert kept.passed and kept.sampled.passed and "sampled outputs" in kept.reason
    nonsense = judge(ref, F32, comps, [seq.positions], lossy=False, sampled=_sampled(7.9))
    assert not nonsense.passed and nonsense.greedy_identical == nonsense.greedy_total  # greedy alone would pass
    assert nonsense.flag_for_review and "BEYOND" in nonsense.reason and "+5.80" in nonsense.summary()
    # two-sided: a sampler that turned greedy makes its samples too likely
    greedy_like = judge(ref, F32, comps, [seq.positions], lossy=False, sampled=_sampled(0.4))
    assert not greedy_like.passed
    # a lossy change must keep a working sampler too
    assert not judge(ref, F32, comps, [seq.positions], lossy=True, sampled=_sampled(7.9)).passed


def test_the_sampled_limit_widens_with_the_noise_of_few_samples():
    from research.correctness import compare_sampled

    t = CorrectnessThresholds()
    assert compare_sampled(_sampled(2.0), _sampled(2.6), t).passed is False  # beyond the 0.5 floor
    noisy = compare_sampled(_sampled(2.0, se=0.2), _sampled(2.6, se=0.2), t)
    assert noisy.passed and noisy.limit == pytest.approx(4 * math.hypot(0.2, 0.2))


def test_a_reference_without_samples_says_the_sampler_was_not_checked():
    ref = reference(F32)
    seq = ref.sequences[0]
    report = judge(ref, F32, [_compare_greedy(0, seq, [3, 4], "ab", 0.05)], [seq.positions], lossy=False)
    assert report.passed and report.sampled is None and "sampled outputs not checked" in report.reason
