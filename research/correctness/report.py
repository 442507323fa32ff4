"""The correctness verdict as one record, whatever evidence it rests on, and the words it is reported in.

Apart from the checks so that every evidence kind (logprobs, greedy text, none) fills the same report the
same way: ``judged_report`` is the one place a checked verdict is put together, ``unchecked_report`` the
one place an unchecked one is.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from research.correctness.outputs import ReferenceOutputs, SampledStats, SequenceComparison, is_float32
from research.correctness.thresholds import CorrectnessThresholds, Evidence


class SampledComparison(BaseModel):
    reference: SampledStats
    candidate: SampledStats
    shift: float  # candidate mean NLL - reference mean NLL
    limit: float
    passed: bool


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

    def _headline(self, evidence: str) -> str:
        return f"{self.mode} check {'passed' if self.passed else 'FAILED'} (evidence: {evidence})"

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
                f"{self._headline('greedy text')}: "
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
            f"{self._headline('logprobs')}: greedy "
            f"{self.greedy_identical}/{self.greedy_total} identical{' (float32)' if self.float32 else ''}; "
            f"{dist}{sampled}. {self.reason}"
        )


def judged_report(
    comparisons: list[SequenceComparison],
    *,
    lossy: bool,
    passed: bool,
    equivalent: bool,
    float32: bool,
    reason: str,
    thresholds: CorrectnessThresholds,
    **evidence: Any,
) -> CorrectnessReport:
    """A checked verdict on ``comparisons`` (any evidence kind): flagged for review when the change is
    lossy or its outputs changed. ``evidence``: the report fields of that kind (its distribution and
    samples, or its unit and matched prefix)."""
    return CorrectnessReport(
        mode="lossy" if lossy else "lossless",
        passed=passed,
        lossless_equivalent=equivalent,
        float32=float32,
        flag_for_review=lossy or not equivalent,
        reason=reason,
        greedy_identical=sum(c.identical for c in comparisons),
        greedy_total=len(comparisons),
        sequences=comparisons,
        thresholds=thresholds,
        **evidence,
    )


def unchecked_report(
    reference: ReferenceOutputs,
    candidate_args: list[str],
    *,
    lossy: bool,
    thresholds: CorrectnessThresholds | None = None,
) -> CorrectnessReport:
    """The report when there is no evidence to check against: it says so, never "checked", never "passed",
    and is flagged for review. It does not make the candidate invalid (the engine's missing API is not the
    change's fault: research.harness), but the adoption rule never adopts it (research.loop.pick_winner)."""
    return CorrectnessReport(
        mode="lossy" if lossy else "lossless",
        passed=False,
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


#: what a lossy change's review says on an endpoint whose weights are random (``model.weights: random``)
RANDOM_WEIGHTS_REVIEW = "quality not measurable on random weights: needs review"


def unmeasurable_quality(report: CorrectnessReport) -> CorrectnessReport:
    """A lossy check on random weights: its distances are kept as evidence, but they say nothing of a trained
    model's quality, so they neither pass nor fail the change. It is measured, flagged, and never adopted by
    itself (a person checks it on trained weights of the same family)."""
    return report.model_copy(
        update={
            "passed": True,
            "flag_for_review": True,
            "reason": f"{RANDOM_WEIGHTS_REVIEW} (distances on random weights, for the record: {report.reason})",
        }
    )
