"""A verdict by the endpoint's estimator (``sweep.estimator``): the SLA crossing alone, or the engine's
service rate from queue growth together with the crossing.

"crossing" (the default): :func:`loadgen.verdict.judge_rounds`, the SLA crossing fitted on every step.

"service_rate": both estimators judge the same rounds, each at alpha / 2, and a look decides when either
does, so the chance of a false better-or-worse stays at most alpha (Bonferroni). The service rate
(:func:`loadgen.verdict.judge_service_rates`) reads every request of a step that queued and is several
times tighter where the queue sets capacity (docs/measurement.md); the crossing is the SLA itself, so
where both are decided the crossing's verdict stands: a change that raises throughput but breaks an ITL
limit is judged by what the SLA sees. Where no step of a side queued, the service rate has nothing to
say and the crossing judges alone, at the full alpha.

The service rate speaks for capacity within the SLA only through a queue. No engine holds the SLA above
what it serves, and one whose SLA limit a queue sets (TTFT, E2E, errors) holds it in proportion to what it
serves. So a candidate that serves more has more capacity only if a queue sets its own limit, and one
that serves less has less only if a queue sets the baseline's. Where ITL sets that side's limit (a bigger
batch that drains the queue faster and stalls every decode), the crossing judges alone, at the full alpha.
"""

from __future__ import annotations

from typing import Literal

from loadgen.noise_prior import limiting_target
from loadgen.results import StepResult
from loadgen.verdict import ALPHA, VerdictStats, judge_rounds, judge_service_rates

Estimator = Literal["crossing", "service_rate"]
DECIDED = ("better", "worse")
QUEUE_TARGETS = ("ttft", "e2e", "errors")  # the SLA targets a queue raises (ITL it does not)


def judge(
    a_rounds: list[list[StepResult]],
    b_rounds: list[list[StepResult]],
    *,
    estimator: Estimator = "crossing",
    alpha: float = ALPHA,
    max_rounds: int = 4,
    final: bool = False,
    looks: int | None = None,
    crossing_prior: tuple[float, float] = (0.0, 0),
    service_prior: tuple[float, float] = (0.0, 0),
    futility: bool = False,
) -> VerdictStats:
    """The verdict on rounds of A (baseline) and B (candidate) by ``estimator``; priors are (variance of a
    paired log difference, df) from A/A pairs (the noise floor's), one per estimator. ``futility``: an
    early look stops as ``same`` when neither estimator sees a gain (loadgen.verdict); while one still
    does, the look stays undecided."""
    common = dict(max_rounds=max_rounds, final=final, looks=looks, futility=futility)

    def by_crossing(level: float) -> VerdictStats:
        return judge_rounds(
            a_rounds, b_rounds, alpha=level, prior_var=crossing_prior[0], prior_df=crossing_prior[1], **common
        )

    if estimator == "crossing":
        return by_crossing(alpha)
    service = judge_service_rates(
        a_rounds, b_rounds, alpha=alpha / 2, prior_var=service_prior[0], prior_df=service_prior[1], **common
    )
    if service.verdict == "invalid" or (service.effect is None and service.verdict not in DECIDED):
        alone = by_crossing(alpha)
        why = f"no service rate ({service.reason}): judged by the SLA crossing alone"
        return alone.model_copy(update={"decided_by": "SLA crossing", "reason": _join(alone.reason, why)})
    latency_bound = _latency_bound(service, a_rounds, b_rounds)
    if latency_bound:
        alone = by_crossing(alpha)
        why = f"{latency_bound}: judged by the SLA crossing alone (service rate: {service.sentence()})"
        split = service.verdict in DECIDED and not (alone.verdict in DECIDED and _agrees(service, alone))
        return alone.model_copy(
            update={
                "decided_by": "SLA crossing",
                "reason": _join(alone.reason, why),
                "disagreement": _disagreement(service, alone) if split and alone.verdict != "undecided" else None,
            }
        )
    crossing = by_crossing(alpha / 2)
    if crossing.verdict == "invalid":
        return crossing
    # where both are decided the crossing (the SLA itself) stands; else the tighter service rate speaks
    chosen, other, chosen_by, other_by = service, crossing, "service rate", "SLA crossing"
    if crossing.verdict in DECIDED:
        chosen, other, chosen_by, other_by = crossing, service, "SLA crossing", "service rate"
    mdes = [m for m in (service.mde, crossing.mde) if m is not None]
    verdict, stopped = chosen.verdict, chosen.stopped
    extra = None
    if chosen is service and verdict in DECIDED and not _agrees(service, crossing):
        # more throughput is not more capacity within the SLA unless the crossing allows it (a bigger batch
        # serves more and breaks ITL): the service rate speaks for the SLA only where their intervals meet
        chosen, other, chosen_by, other_by = crossing, service, "SLA crossing", "service rate"
        if crossing.low is None and crossing.high is None:  # unresolved: not a split, nothing confirms it yet
            verdict, stopped = ("same", "max_rounds") if final else ("undecided", "")
            extra = "the service rate moved but the SLA crossing is unresolved (no interval): nothing confirms it"
        else:
            verdict, stopped = ("same", "disagree") if final or crossing.verdict != "undecided" else ("undecided", "")
            extra = "the service rate moved and the SLA crossing's interval excludes that change"
    if verdict not in DECIDED and "undecided" in (service.verdict, crossing.verdict):
        verdict, stopped = "undecided", ""  # neither decided yet, and one of them may with another round
    # a split for a person: the crossing overruled the service rate, or decided against its whole interval
    split = stopped == "disagree" or (chosen is crossing and verdict in DECIDED and _opposite(service, verdict))
    note = f"{other_by}: {other.sentence()}"
    return chosen.model_copy(
        update={
            "verdict": verdict,
            "stopped": stopped,
            "mde": min(mdes) if mdes else None,  # either test can decide: the better-powered one bounds it
            "decided_by": chosen_by,
            "baseline": f"{chosen.baseline}; {other_by} {other.baseline}",
            "candidate": f"{chosen.candidate}; {other_by} {other.candidate}",
            "reason": _join(chosen.reason, extra, note),
            "disagreement": _disagreement(service, crossing) if split else None,
        }
    )


def _latency_bound(service: VerdictStats, a_rounds, b_rounds) -> str | None:
    """Why the service rate cannot speak for the SLA in the direction it points, or None where it can:
    serving more (less) is more (less) capacity only where a queue sets the candidate's (baseline's) SLA
    limit. A side whose limit is not resolved (its crossing beyond the tested rates) is not held against it."""
    direction = _direction(service)
    if direction == 0:
        return None
    side, rounds = ("candidate", b_rounds) if direction > 0 else ("baseline", a_rounds)
    limit = limiting_target(rounds)
    if limit is None or limit in QUEUE_TARGETS:
        return None
    return (
        f"the {side}'s SLA limit is {limit.upper()}, not a queue, so how fast it serves from its queue is not "
        f"its capacity within the SLA"
    )


def _opposite(service: VerdictStats, verdict: str) -> bool:
    """The service rate's interval lies wholly on the other side of zero from the crossing's verdict."""
    if verdict == "worse":
        return service.low is not None and service.low > 0
    return service.high is not None and service.high < 0


def _direction(stats: VerdictStats) -> float:
    """The sign of an effect, or of the bound of an interval that excludes zero (a censored estimate)."""
    if stats.effect is not None:
        return stats.effect
    return stats.low if stats.low is not None and stats.low > 0 else (stats.high or 0.0)


def _disagreement(service: VerdictStats, crossing: VerdictStats) -> str:
    """The two estimators' split, said for a person: the engine serves more (or less), the SLA does not."""

    def said(stats: VerdictStats) -> str:
        if stats.effect is None:
            bounds = [f"{b:+.0%}" for b in (stats.low, stats.high) if b is not None]
            return f"an effect between {' and '.join(bounds)}" if len(bounds) == 2 else stats.verdict
        return f"{stats.effect:+.0%} (interval {stats.low:+.0%} to {stats.high:+.0%})"

    return (
        f"the engine's service rate says {said(service)} but the SLA crossing says {said(crossing)}: "
        f"it serves {'more' if _direction(service) > 0 else 'less'} from its queue, but not "
        f"within the SLA: a latency target, not the queue, sets its capacity"
    )


def _agrees(service: VerdictStats, crossing: VerdictStats) -> bool:
    """The service rate's estimate lies inside the crossing's interval: the SLA's own data allow that
    change. (Overlapping intervals are not enough: a batch limit that served 22% more while its crossing
    fell 39%, interval -68% to +14%, overlapped the service rate's +13% to +32%.) A verdict on a
    service rate censored at the tested rates has only a bound: it agrees unless the crossing's
    interval lies wholly on the other side of it. A crossing with one bound (censored) is an interval
    open on the other side; one with none (unresolved) allows nothing, so nothing agrees with it."""
    if crossing.low is None and crossing.high is None:
        return False
    c_low = crossing.low if crossing.low is not None else -float("inf")
    c_high = crossing.high if crossing.high is not None else float("inf")
    if service.effect is not None:
        return c_low <= service.effect <= c_high
    low = service.low if service.low is not None else -float("inf")
    high = service.high if service.high is not None else float("inf")
    return c_low <= high and low <= c_high


def _join(*parts: str | None) -> str | None:
    kept = [p for p in parts if p]
    return "; ".join(kept) if kept else None
