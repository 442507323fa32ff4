"""The review's noise-floor section: each baseline's floor, with its own MDE labelled as the floor's.

A floor's MDE is an input to the verdicts judged on it (research.verdict_mde says why it is none of
theirs), so the section comes after the verdicts' own detectable effects and names its figure as the floor's.
"""

from __future__ import annotations

from research import internals_evidence
from research.internals_evidence import summary as internals_summary
from research.state import BaselineRecord, CampaignState


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def noise_section(state: CampaignState) -> list[str]:
    """Every floor of the campaign (the reference's, then each adopted baseline's) and the rule they feed."""
    md = ["## Noise floor (an input to the verdicts)", ""]
    md += noise_lines("reference (campaign start)", state.reference)
    for i, b in enumerate(state.baselines[1:], start=1):
        md += noise_lines(f"working baseline {i} (from `{b.source_experiment}`)", b)
    return md + [
        "",
        "A candidate counts when the 95% interval of its capacity change against its working baseline lies "
        "above zero (a paired, sequential test with a stated error rate: docs/measurement.md); the threshold is "
        "the smallest effect that interval can resolve. An endpoint judged by its service rate "
        "(sweep.estimator: service_rate) tests the service rate from queue growth and the SLA crossing each at "
        "97.5%, and each verdict names the one that decided. Results without per-request samples use the older "
        "rule: every repeat beyond the baseline by more than the threshold.",
        "",
    ]


def noise_lines(name: str, b: BaselineRecord) -> list[str]:
    """One baseline's floor: its capacities and spread, and its own MDE labelled as the floor's."""
    n = b.noise
    summary = (
        f"- {name}: `{' '.join(b.engine_args)}` - capacity {_fmt(n.capacity_mean)} req/s over {n.repeats} sweeps "
        f"{[round(c, 3) for c in n.capacities]}, std {_fmt(n.capacity_std)}, spread {n.capacity_rel_spread:.1%}, "
        f"the floor's threshold to beat {getattr(n, 'threshold', 0):.1%}"
        + (
            f"; fitted capacity {_fmt(n.capacity_fit_rps)} req/s, the floor's MDE {n.mde:.1%} (an input to the "
            "verdicts, not a verdict's MDE; "
            f"between-run sd of a paired difference {(n.between_var or 0) ** 0.5:.1%}, {n.between_df:.3g} df"
            + (
                f"; verdicts by the service rate {_fmt(n.service_rate_rps)} req/s served, sd "
                f"{(n.service_between_var or 0) ** 0.5:.1%}, {n.service_between_df:.3g} df, with the SLA crossing"
                + _crossing_alone(n)
                if getattr(n, "estimator", "crossing") == "service_rate"
                else ""
            )
            + (f"; prior: {n.prior_source}" if getattr(n, "prior_source", None) else "")
            + _own_evidence(n.aa_evidence)
            + _classes(n)
            + ")"
            if n.mde is not None
            else ""
        )
        + (f"; {b.soak.summary()}" if b.soak else "")
    )
    internals = internals_evidence.latest(b.sweeps)
    return (
        [summary]
        + [f"  - floor: {note}" for note in b.notes]
        + ([f"  - engine internals: {internals_summary(internals)}"] if internals is not None else [])
    )


def _crossing_alone(n) -> str:
    """What a candidate ITL limits is judged at: the service rate does not speak for its SLA (loadgen.judge)."""
    mde = getattr(n, "mde_crossing_alone", None)
    if mde is None:
        return ""
    return f"; a change where ITL, not a queue, sets the SLA limit is judged by the crossing alone: MDE {mde:.1%}"


def _own_evidence(evidence) -> str:
    """The floor's own repeats, beside the pooled sd: configurations of one endpoint are not equally noisy
    (docs/measurement.md), so a reader can see when the pool, not this baseline, set its MDE."""
    own = [f"{ev.estimator.replace('_', ' ')} {ev.sd:.1%} ({ev.df:.3g} df)" for ev in evidence if ev.df]
    return f"; its own repeats alone: {', '.join(own)}" if own else ""


def _classes(n) -> str:
    """The floor's noise class (the SLA target that limits it), and the other classes' noise a candidate
    they limit brings to its verdict (loadgen.noise_prior)."""
    if not getattr(n, "limiting", None):
        return ""
    estimator = "service_rate" if getattr(n, "estimator", "crossing") == "service_rate" else "crossing"
    others = [
        f"{cls} {var**0.5:.1%} ({df:.3g} df)"
        for cls, by in sorted(n.class_noise.items())
        if cls != "any" and estimator in by
        for var, df in [by[estimator]]
    ]
    said = f"; limited by {n.limiting}, pooled with configurations {n.limiting} limits"
    return said + (f"; a candidate another target limits adds its class's sd: {', '.join(others)}" if others else "")
