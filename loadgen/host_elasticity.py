"""How much a configuration's service rate follows the host's memory speed, fitted from its own repeats.

The memory-pass time (loadgen.host_speed) is a covariate, and how much a configuration follows it depends
on the work it does. On the 2-core VM a decode-bound configuration (prefix caching) followed it with an
exponent of -0.99 +- 0.19, and the prefill-bound reference with -0.09 +- 0.05 over a host whose memory-pass
time moved with an sd of 9.6% (benchmarks/results/host_elasticity/). One fixed exponent overcorrected the reference and undercorrected
large swings (docs/measurement.md, run 18), so each side of a comparison gets its own.

The fit reads each schedule the configuration's sweeps repeated (a step's rate and length fix its requests,
loadgen.queue_rate.step_schedule): around that schedule's mean, a step's log service rate against its log
memory-pass time. A ridge toward :data:`PRIOR_EXPONENT` (the middle of the physical range
:data:`EXPONENT_RANGE`, sd :data:`PRIOR_EXPONENT_SD`, half of it) keeps two steps from deciding it. A side
with no repeated schedule (one sweep) takes the prior, a candidate too: one setting can move a configuration
across the whole range (the reference -0.09, prefix caching -0.99), so the baseline's exponent would be wrong
by up to twice its stated error where the prior's middle is wrong by at most one.

The fit comes from the same sweeps a floor's A/A evidence does. The part of the host's swing that lies
between the sweeps, not within them, can be fitted away with the sweeps' own difference, so the fit takes
up to a degree of freedom from the evidence (:attr:`ElasticityFit.sweep_df`). Then the variance a verdict
starts from is not understated: a large swing between two sweeps leaves the floor's own pair little
weight, and the endpoint's prior carries it.
"""

from __future__ import annotations

import math
from collections import defaultdict

from pydantic import BaseModel

from loadgen.queue_rate import MIN_GROWTH, HostAdjustment, common_host_s, queued, step_host_s, step_schedule

#: What a configuration's exponent is before its repeats say: between prefill-bound (0) and decode-bound (-1).
PRIOR_EXPONENT, PRIOR_EXPONENT_SD = -0.5, 0.5
#: The exponents a rate can physically have: a step slows at most as much as the host's memory does (-1, all
#: of its time reading memory) and never speeds up on a slower host (0). A fit outside (run 19's -1.33 turned
#: an 18.4% gap between two sweeps into 0.8%) explains the sweeps' own noise away, so it is clipped here.
EXPONENT_RANGE = (-1.0, 0.0)
#: A queued step's residual sd of log service rate at one host speed (measured 2.1-4.4%): with the prior's
#: sd, how much host swing it takes for the steps to outweigh the prior.
STEP_SD = 0.04


class ElasticityFit(BaseModel):
    """A configuration's exponent of service rate on memory-pass time, and what it was fitted on."""

    exponent: float = PRIOR_EXPONENT
    se: float = PRIOR_EXPONENT_SD
    contrasts: int = 0  # repeated steps beyond one per schedule
    sweep_df: float = 0.0  # the degrees of freedom it takes from the sweeps' A/A evidence


def schedule_deviations(sweeps, min_growth: float = MIN_GROWTH) -> tuple[list[tuple[int, float, float]], int]:
    """(points, schedules): every queued step with a host reading, of a schedule two or more of ``sweeps``
    ran, as (its sweep's index, log service rate, log memory-pass time), each around its schedule's mean;
    and how many such schedules there are."""
    groups: dict[tuple, list[tuple[int, float, float]]] = defaultdict(list)
    for k, sweep in enumerate(sweeps):
        for step in sweep:
            host = step_host_s(step) if queued(step, min_growth) else None
            if host:
                rate = step.target_rate / (1 + step.ttft_growth["slope"])
                groups[step_schedule(step)].append((k, math.log(rate), math.log(host)))
    repeated = [g for g in groups.values() if len(g) > 1]
    points = []
    for group in repeated:
        my = sum(y for _, y, _ in group) / len(group)
        mx = sum(x for _, _, x in group) / len(group)
        points += [(k, y - my, x - mx) for k, y, x in group]
    return points, len(repeated)


def fit_elasticity(sweeps, min_growth: float = MIN_GROWTH, prior: float = PRIOR_EXPONENT) -> ElasticityFit:
    """The exponent of one configuration's sweeps (each a list of steps), from :func:`schedule_deviations`,
    shrunk toward ``prior``."""
    points, schedules = schedule_deviations(sweeps, min_growth)
    sxx = sum(x * x for _, _, x in points)
    sxy = sum(x * y for _, y, x in points)
    by_sweep: dict[int, list[float]] = defaultdict(list)
    for k, _, x in points:
        by_sweep[k].append(x)
    prior_weight = (STEP_SD / PRIOR_EXPONENT_SD) ** 2
    precision = prior_weight + sxx
    # the fit's leverage on the sweeps' own difference: the share of the host's swing between sweeps. A
    # ridge of leverage h leaves that difference's residual (1 - h) of itself, so the residual's expected
    # square is (1 - h)^2 of the variance, and the fit took 1 - (1 - h)^2 degrees of freedom.
    leverage = sum(sum(xs) ** 2 / len(xs) for xs in by_sweep.values()) / precision
    low, high = EXPONENT_RANGE
    return ElasticityFit(
        exponent=min(high, max(low, (prior_weight * prior + sxy) / precision)),
        se=STEP_SD / math.sqrt(precision),
        contrasts=len(points) - schedules,
        sweep_df=1 - (1 - leverage) ** 2,
    )


def host_adjustment(side, every, min_growth: float = MIN_GROWTH) -> HostAdjustment | None:
    """How to state the sweeps of one configuration (``side``) at the host speed common to ``every`` sweep
    of the comparison (both sides, every repeat), or None when some queued step has no reading (then no side
    is adjusted: a comparison is adjusted everywhere or nowhere)."""
    at = common_host_s([st for sweep in every for st in sweep], min_growth)
    if at is None:
        return None
    fit = fit_elasticity(side, min_growth)
    return HostAdjustment(
        at_host_s=at,
        exponent=fit.exponent,
        exponent_se=fit.se,
        contrasts=fit.contrasts,
        sweep_df=fit.sweep_df,
    )
