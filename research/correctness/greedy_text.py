"""The check on greedy-text evidence, for engines that give no logprobs: temperature-0 outputs compared
as token sequences under the model's tokenizer (characters without one), judged lossless or lossy.

Apart from the logprobs check because without distributions a flipped near-tie cannot be told from a
real change: its lossless bar is the baseline's own batch variance, and its lossy bar the matched prefix.
Pure: unit-testable without an engine.
"""

from __future__ import annotations

from research.correctness.outputs import ReferenceOutputs, SequenceComparison, is_float32
from research.correctness.report import CorrectnessReport, judged_report
from research.correctness.thresholds import CorrectnessThresholds


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
    return judged_report(
        comparisons,
        lossy=lossy,
        passed=passed,
        equivalent=equivalent,
        float32=float32,
        reason=reason,
        thresholds=t,
        distribution=None,
        evidence="greedy_text",
        checked=True,
        unit=unit,
        mean_matched_prefix_fraction=mean_prefix,
    )
