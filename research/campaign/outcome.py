"""What a campaign ends with: its outcome (``<campaign>.outcome.json``), the best configuration
(``<campaign>.best.json``, never deployed), the review report, and the total gain over its reference."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from specs.engine_args import diff_args
from research.campaign.context import CampaignContext
from research.state import BaselineRecord, CampaignState
from research.verdict_mde import VerdictMDEs, verdict_mdes


class JudgedGain(BaseModel):
    """The gain over the reference by the estimators that judged each adopted change: the product of
    their effects, with the product of their interval ends. Every step's interval holds at once with
    probability at least ``confidence`` (1 minus the sum of their error rates, Bonferroni), and then
    the product lies between ``low`` and ``high``. The rung capacities' ratio (``total_gain``) can
    disagree with it: it is read off the ladder, the verdicts are not."""

    gain: float
    low: float
    high: float
    confidence: float
    steps: int  # adopted changes chained
    estimators: list[str]  # what judged them (loadgen.judge), in adoption order

    def describe(self) -> str:
        by = ", ".join(dict.fromkeys(self.estimators))
        return (
            f"x{self.gain:.2f} ({self.confidence:.1%} interval x{self.low:.2f} to x{self.high:.2f}; "
            f"{self.steps} adopted change{'s' if self.steps != 1 else ''}, judged by {by})"
        )


def judged_gain(state: CampaignState) -> JudgedGain | None:
    """The adopted changes' judged effects chained (None when nothing was adopted or a verdict has no
    effect with an interval, for example one recorded before verdicts had them)."""
    adopted = [state.experiments.get(b.source_experiment) for b in state.baselines if b.source_experiment]
    if not adopted:
        return None
    gain = low = high = 1.0
    alpha = 0.0
    estimators: list[str] = []
    for e in adopted:
        c = e.comparison if e is not None else None
        if c is None or None in (c.effect, c.effect_low, c.effect_high):
            return None
        gain, low, high = gain * (1 + c.effect), low * max(0.0, 1 + c.effect_low), high * (1 + c.effect_high)
        alpha += 1 - c.confidence
        estimators.append(c.decided_by or "SLA crossing")
    return JudgedGain(
        gain=gain, low=low, high=high, confidence=max(0.0, 1 - alpha), steps=len(adopted), estimators=estimators
    )


class CampaignOutcome(BaseModel):
    """What a campaign run ended with (also written as ``<campaign>.outcome.json``)."""

    @property
    def failure(self) -> str | None:
        """Why this outcome is a failure for the caller (non-zero exit), or None.

        A campaign fails when it could not record its results (a research-memory or review write failed:
        its state is kept and the next run records them and resumes), when it has no valid baseline
        (invalid, or refused by its deadline or budget) or when no experiment could be measured to a
        verdict. A paused one (not finished) has not failed: it resumes when run again."""
        if self.unrecorded:
            return f"its results were not all recorded: {self.unrecorded}"
        if not self.finished:
            return None
        if self.reference_capacity is None:
            return f"no valid baseline: {self.end_reason}"
        if self.experiments_measured == 0:
            return f"no experiment could run: {self.end_reason}"
        return None

    campaign: str
    campaign_id: str
    endpoint: str
    finished: bool
    end_reason: str | None
    unrecorded: str | None = None  # a memory or review write (or a floor's memory read) that failed
    reference_args: list[str] = Field(default_factory=list)
    reference_capacity: float | None = None
    best_args: list[str] = Field(default_factory=list)
    best_capacity: float | None = None
    total_gain: float | None = None  # best / reference capacity
    total_gain_is_lower_bound: bool = False  # the reference held no rate down to its floor
    judged_gain: JudgedGain | None = None  # the adopted changes' judged effects, chained (the headline)
    verdict_mde: VerdictMDEs | None = None  # the verdicts' MDEs and their median: the campaign's headline MDE
    adopted_experiments: list[str] = Field(default_factory=list)
    experiments_run: int = 0
    experiments_measured: int = 0  # run to a verdict of better / same / worse (not invalid)
    experiments_skipped: int = 0
    resumed: int = 0
    gpu_hours_used: float = 0.0
    active_minutes: float = 0.0
    open_questions: list[str] = Field(default_factory=list)
    state_path: str
    report_path: str | None = None
    best_config_path: str | None = None


def total_gain(reference: BaselineRecord | None, best: BaselineRecord | None) -> tuple[float | None, bool]:
    """(best / reference capacity, is a lower bound). A reference whose repeats held no rate down to
    their floor counts at that floor: the gain is then a finite lower bound, never "inf"."""
    from loadgen.noise import reference_capacity

    if reference is None or best is None:
        return None, False
    ref, bound = reference_capacity(reference.noise)
    if ref <= 0:
        return None, False
    return best.capacity / ref, bound


def write_best_config(ctx: CampaignContext) -> Path | None:
    """``<campaign>.best.json``: the working baseline with its diff and gain vs the reference (None
    before a baseline was measured). Lossless only, and not deployed."""
    s = ctx.state
    ref, best = s.reference, s.working
    if ref is None:
        return None
    gain, gain_is_bound = total_gain(ref, best)
    path = ctx.state_dir / f"{s.campaign}.best.json"
    path.write_text(
        json.dumps(
            {
                "endpoint": ctx.endpoint.name,
                "campaign_id": s.campaign_id,
                "engine_args": best.engine_args,
                "diff_vs_reference": diff_args(ref.engine_args, best.engine_args),
                "capacity_rps": best.capacity,
                "reference_capacity_rps": ref.capacity,
                "total_gain": gain,
                "total_gain_is_lower_bound": gain_is_bound,
                "judged_gain": judged.model_dump() if (judged := judged_gain(s)) else None,
                "lossless": True,
                "deployed": False,
            },
            indent=2,
        )
    )
    return path


def review_path(ctx: CampaignContext) -> Path:
    """Where the campaign's review report (``review.md``) is written."""
    return ctx.state_dir / f"{ctx.state.campaign}.review" / "review.md"


def write_review(ctx: CampaignContext) -> Path | None:
    """The review report (research.review). A failure to write it never loses the outcome: it is kept as
    the state's ``unrecorded`` (the campaign then fails, and the next run writes the report again)."""
    from research.review import write_report

    s = ctx.state
    try:
        return write_report(s, ctx.endpoint, ctx.campaign, review_path(ctx).parent)
    except Exception as exc:  # noqa: BLE001 - kept in the state: the campaign fails with it, and resumes
        error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        ctx.progress(f"error: the review report could not be written to {review_path(ctx).parent}: {error}")
        s.unrecorded = s.unrecorded or f"review report ({review_path(ctx).parent}) could not be written: {error}"
        return None


def summarize(ctx: CampaignContext, report_path: Path | None = None, best_path: Path | None = None) -> CampaignOutcome:
    """The campaign's outcome as its state stands now."""
    s = ctx.state
    ref, best = s.reference, s.working
    gain, gain_is_bound = total_gain(ref, best)
    experiments = list(s.experiments.values())
    return CampaignOutcome(
        campaign=s.campaign,
        campaign_id=s.campaign_id,
        endpoint=s.endpoint,
        finished=s.finished,
        end_reason=s.end_reason,
        unrecorded=s.unrecorded,
        reference_args=ref.engine_args if ref else [],
        reference_capacity=ref.capacity if ref else None,
        best_args=best.engine_args if best else [],
        best_capacity=best.capacity if best else None,
        total_gain=gain,
        total_gain_is_lower_bound=gain_is_bound,
        judged_gain=judged_gain(s),
        verdict_mde=verdict_mdes(s, ctx.campaign.target_mde),
        adopted_experiments=[b.source_experiment for b in s.baselines if b.source_experiment],
        experiments_run=sum(
            e.verdict != "skipped" and bool(e.sweeps or e.correctness or e.log_tail) for e in experiments
        ),
        experiments_measured=sum(e.verdict in ("better", "same", "worse") for e in experiments),
        experiments_skipped=sum(e.verdict == "skipped" for e in experiments),
        resumed=s.resumes,
        gpu_hours_used=s.gpu_hours_used,
        active_minutes=s.active_seconds / 60,
        open_questions=list(s.open_questions),
        state_path=str(ctx.store.path),
        report_path=str(report_path) if report_path else None,
        best_config_path=str(best_path) if best_path else None,
    )


def write_outcome(ctx: CampaignContext, out: CampaignOutcome) -> None:
    (ctx.state_dir / f"{ctx.state.campaign}.outcome.json").write_text(out.model_dump_json(indent=2))
