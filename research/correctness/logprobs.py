"""The check on logprobs evidence: greedy token sequences compared position by position (a divergence at
a near-tie is numerical noise) and the teacher-forced distributions compared on matched prefixes (mean
KL, top-1 agreement, perplexity ratio), plus the sampled outputs; judged lossless or lossy.

Apart from the greedy-text check because it has distributions to tell a flipped near-tie from a real
change, and thresholds of its own (``CorrectnessThresholds``). Pure: unit-testable without an engine.
"""

from __future__ import annotations

import math

from research.correctness.outputs import (
    ReferenceOutputs,
    SampledStats,
    SequenceComparison,
    SequenceRef,
    compare_greedy_text,
    is_float32,
)
from research.correctness.report import CorrectnessReport, DistributionStats, judged_report
from research.correctness.sampled import compare_sampled
from research.correctness.thresholds import CorrectnessThresholds


def coarse_kl(p: dict[int, float], q: dict[int, float]) -> float:
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
            kls.append(coarse_kl(p, q))
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


def compare_greedy_tokens(
    index: int, seq: SequenceRef, output_ids: list[int], text: str, tie_margin: float
) -> SequenceComparison:
    """A candidate's greedy token ids against the reference's, as ``compare_greedy_text`` does, and
    whether the first divergence was a near-tie in the reference distribution that chose it."""
    c = compare_greedy_text(index, seq.output_ids, seq.output_text, output_ids, text)
    if c.identical:
        return c
    pos = c.first_divergence
    tie = False
    if pos < len(seq.output_ids) and pos < len(output_ids):
        dist = seq.positions[len(seq.prompt_ids) - 1 + pos]  # distribution that chose output token ``pos``
        ref_tok, cand_tok = seq.output_ids[pos], output_ids[pos]
        tie = cand_tok in dist and ref_tok in dist and dist[ref_tok] - dist[cand_tok] <= tie_margin
    return c.model_copy(update={"divergence_is_tie": tie})


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
    return judged_report(
        comparisons,
        lossy=lossy,
        passed=passed,
        equivalent=equivalent,
        float32=float32,
        reason=reason,
        thresholds=t,
        distribution=stats,
        sampled=samples,
    )
