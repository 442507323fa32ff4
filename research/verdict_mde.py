"""The campaign's minimum detectable effect: that of the verdicts it made, never a floor's.

A floor's MDE is what a candidate of the floor's own noise class, judged by the floor's estimator, would
meet. A same-class candidate that an ITL tail limits is judged by the SLA crossing (loadgen.judge), and a
candidate of another class adds that class's variance (loadgen.compare), so a floor's figure is an input
to the verdicts and describes none of them. The headline is each verdict's own MDE and their median, with
the range, here, in the review, the console summary and the memory's ``v_campaign_mde``.
"""

from __future__ import annotations

from statistics import median

from pydantic import BaseModel, Field, computed_field

from research.state import CampaignState
from specs.engine_args import REMOVE

MADE = ("better", "same", "worse")  # verdicts the harness made (invalid and skipped ones judged nothing)


class VerdictMDE(BaseModel):
    """One verdict and the smallest effect it could have seen (None: the fit's spread was unbounded, or
    the verdict used the older threshold rule)."""

    experiment_id: str
    round: int
    title: str
    change: str
    verdict: str
    decided_by: str | None = None
    effect: float | None = None
    mde: float | None = None


class VerdictMDEs(BaseModel):
    """The verdicts' MDEs of one campaign, their median with its range, and the campaign's target."""

    verdicts: list[VerdictMDE] = Field(default_factory=list)
    target: float | None = None  # CampaignSpec.target_mde: what the median should reach

    @property
    def stated(self) -> list[float]:
        return [v.mde for v in self.verdicts if v.mde is not None]

    @computed_field
    @property
    def median(self) -> float | None:
        return median(self.stated) if self.stated else None

    @computed_field
    @property
    def low(self) -> float | None:
        return min(self.stated, default=None)

    @computed_field
    @property
    def high(self) -> float | None:
        return max(self.stated, default=None)

    @computed_field
    @property
    def reached(self) -> bool | None:
        """Whether the median is within the target (None: no target, or no verdict stated an MDE)."""
        if self.target is None or self.median is None:
            return None
        return self.median <= self.target

    def headline(self) -> str:
        """ "median 14.2% (range 13.4-76.8%, 4 verdicts)", or why there is none."""
        if self.median is None:
            made = len(self.verdicts)
            return "not measured: " + (f"none of its {made} verdict(s) stated one" if made else "no verdict was made")
        unstated = len(self.verdicts) - len(self.stated)
        return (
            f"median {self.median:.1%} (range {self.low:.1%}-{self.high:.1%}, {len(self.stated)} verdict(s)"
            + (f"; {unstated} stated none" if unstated else "")
            + ")"
        )

    def target_line(self) -> str:
        """The campaign's target against the measured median, said plainly when the host missed it."""
        if self.target is None:
            return "no target set (campaign target_mde)"
        if self.reached is None:
            return f"target {self.target:.0%}: not measured (no verdict stated an MDE)"
        if self.reached:
            return f"target {self.target:.0%}: reached (median {self.median:.1%})"
        return (
            f"target {self.target:.0%}: NOT reached on this host (median {self.median:.1%}); no prior was "
            "tuned to close the gap"
        )


def verdict_mdes(state: CampaignState, target: float | None = None) -> VerdictMDEs:
    """Every better / same / worse verdict of ``state`` with its MDE, in the order they were made."""
    rows = []
    for e in sorted(state.experiments.values(), key=lambda e: (e.round, e.started_at, e.experiment_id)):
        if e.verdict not in MADE or e.comparison is None:
            continue
        c = e.comparison
        change = " ".join(
            k if v is None else f"{k} (removed)" if v == REMOVE else f"{k} {v}" for k, v in e.diff.items()
        )
        rows.append(
            VerdictMDE(
                experiment_id=e.experiment_id,
                round=e.round,
                title=e.title,
                change=change,
                verdict=e.verdict,
                decided_by=c.decided_by,
                effect=c.effect,
                mde=c.mde,
            )
        )
    return VerdictMDEs(verdicts=rows, target=target)


def review_lines(mdes: VerdictMDEs) -> list[str]:
    """The review's section: each verdict's MDE, then the median the campaign headlines and its target."""
    md = ["## Detectable effects (the verdicts')", ""]
    if not mdes.verdicts:
        return md + ["No verdict was made, so the campaign has no detectable effect to state.", ""]
    md += [
        "| experiment | round | change | verdict | decided by | effect | MDE |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in mdes.verdicts:
        effect = "-" if v.effect is None else f"{v.effect:+.1%}"
        mde = "none (unbounded)" if v.mde is None else f"{v.mde:.1%}"
        md.append(
            f"| `{v.experiment_id}` | {v.round} | `{v.change.replace('|', '/')}` | {v.verdict} | "
            f"{v.decided_by or '-'} | {effect} | {mde} |"
        )
    md += [
        "",
        f"The campaign's minimum detectable effect: **{mdes.headline()}**; {mdes.target_line()}.",
        "",
    ]
    if mdes.reached is False:
        md += [
            f"This host cannot see changes as small as the campaign's {mdes.target:.0%} target: half its verdicts "
            f"could not have detected an effect below {mdes.median:.1%}. What narrows a verdict here is less "
            "noise per sweep (more requests near the crossing, a quieter host), not a narrower prior.",
            "",
        ]
    md += [
        "The noise floors below state their own MDE: an input to these verdicts (what a candidate of the "
        "floor's own noise class, judged by the floor's estimator, would meet), not the MDE of any verdict.",
        "",
    ]
    return md


def console_line(mdes: VerdictMDEs) -> str:
    """The campaign summary's line (autoresearch campaign run)."""
    return f"{mdes.headline()}; {mdes.target_line()}"
