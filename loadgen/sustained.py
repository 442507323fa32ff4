"""Sustained rates: a step whose queue grew beyond its own noise is not within the SLA, however short.

A short step can end before a growing queue lifts its p95 past the SLA: it then "holds" a rate the
engine cannot serve, and a capacity read from it is a transient, not a rate the engine sustains.

The step's queue growth k (TTFT per second of arrivals, :func:`loadgen.queue_rate.ttft_growth`) says
arrivals outpaced service by the factor 1 + k: of its n arrivals the engine took up n / (1 + k), and
n k / (1 + k) were left waiting. That shortfall is judged against the step's own noise: an engine that
kept exact pace with the arrivals serves a Poisson count with sd sqrt(n) in the step, and k carries its
own fitting error (its 95% interval), carried to the shortfall by the delta method. The step is
queue-bound when the shortfall exceeds :data:`Z` standard errors (one-sided, 2.5%). Its service rate,
n / (1 + k) over the step, is the most the engine sustains: a capacity within the SLA lies below it.
"""

from __future__ import annotations

import math

from scipy.stats import norm

from loadgen.queue_rate import service_rate

#: One-sided 97.5% normal quantile: the level of every other 95% interval of the harness.
Z = float(norm.ppf(0.975))


def shortfall(growth: dict[str, float] | None) -> tuple[float, float] | None:
    """(requests the queue gained over the step, its standard error) from a step's ``ttft_growth``, or
    None when the growth was not measured (too few answered requests, results recorded before it)."""
    if not growth or growth.get("n", 0) <= 0:
        return None
    n, k = growth["n"], max(growth["slope"], 0.0)
    se_k = max(growth["high"] - growth["low"], 0.0) / (2 * Z)
    gained = n * k / (1 + k)
    # d gained / d k = n / (1 + k)^2; the served count's Poisson variance is n
    return gained, math.sqrt(n + (n / (1 + k) ** 2 * se_k) ** 2)


def queue_grew(growth: dict[str, float] | None) -> bool:
    """A step's ``ttft_growth`` says its queue grew beyond its noise: completions fell short of arrivals."""
    gap = shortfall(growth)
    return gap is not None and gap[0] > Z * gap[1]


def queue_bound(step) -> bool:
    """A valid step whose queue grew beyond its noise (what :func:`loadgen.stats.summarize` judges it by,
    read again from the stored growth so that steps recorded before the rule are judged alike)."""
    return step.validity == "valid" and step.target_rate > 0 and queue_grew(step.ttft_growth)


def served_rate(step) -> float | None:
    """What the step's engine served (req/s): offered / (1 + k); None without a measured growth."""
    g = step.ttft_growth
    if not g or step.target_rate <= 0:
        return None
    return step.target_rate / (1 + max(g["slope"], 0.0))


def queue_note(growth: dict[str, float] | None, rate: float) -> str:
    """The violation a queue-bound step reports."""
    gained, _ = shortfall(growth)
    k = max(growth["slope"], 0.0)
    return (
        f"queue grew: {gained:.0f} of {growth['n']:.0f} arrivals left waiting "
        f"(served {rate / (1 + k):.3g} of {rate:.3g} req/s offered)"
    )


def sustained_bound(steps) -> tuple[float, float] | None:
    """(log req/s, its standard error): the service rate over the queue-bound steps among ``steps``
    (:func:`loadgen.queue_rate.service_rate`), above which no capacity within the SLA lies; None when no
    step's queue grew beyond its noise."""
    bound = service_rate([s for s in steps if queue_bound(s)], min_growth=0.0)
    if bound is None or bound.rate is None:
        return None
    return math.log(bound.rate), bound.log_se
