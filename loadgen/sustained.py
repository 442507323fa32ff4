"""Sustained rates: a step whose queue grew beyond its own noise is not within the SLA, however short.

A short step can end before a growing queue lifts its p95 past the SLA: it then "holds" a rate the
engine cannot serve, and a capacity read from it is a transient, not a rate the engine sustains.

The step's queue growth k (TTFT per second of arrivals, :func:`loadgen.queue_rate.ttft_growth`) says
arrivals outpaced service by the factor 1 + k: of its n arrivals the engine took up n / (1 + k), and
n k / (1 + k) were left waiting. That shortfall is judged against the step's own noise: an engine that
kept exact pace with the arrivals serves a Poisson count with sd sqrt(n) in the step, and k carries its
own fitting error (its 95% interval), carried to the shortfall by the delta method. The step is
queue-bound when the shortfall exceeds :data:`Z` standard errors (one-sided, 2.5%). What it served
(:func:`served_rate`) is the most the engine sustains: a capacity within the SLA lies below it.

An engine that admits every arrival into its running batch (vLLM's default) queues in the batch, not in
front of it: TTFT then barely climbs while every sequence decodes slower. The step's backlog
(:func:`backlog`) counts that queue directly: over the step's second half (once the engine had time to
fill), arrivals that outnumber departures beyond their Poisson noise are a queue growing, wherever it
sits. Either reading makes a step queue-bound; what it served is read as before (the departures trail
the engine's service while its batch fills).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

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


def queue_grew(growth: dict[str, float] | None, backlog_counts: dict[str, float] | None = None) -> bool:
    """A step's ``ttft_growth`` or its ``backlog`` says its queue grew beyond its noise: completions fell
    short of arrivals."""
    gap = shortfall(growth)
    return (gap is not None and gap[0] > Z * gap[1]) or backlog_grew(backlog_counts)


def backlog(records, duration_s: float) -> dict[str, float] | None:
    """Arrivals and departures over the step's second half, {arrived, departed, window_s}, or None where
    the engine's own latency leaves less than a quarter of the step to count in.

    The window opens at half the step, or later where requests that arrived in its first quarter took
    longer (median end-to-end) to leave: until then an engine that keeps pace is still filling its batch,
    and departures trail arrivals by its latency alone. A request arrives when it was sent and departs when
    its answer (or error) ended; one cut at the drain deadline never departs."""
    sent = [r for r in records if r.sent_s is not None]
    early = [r.e2e_s for r in sent if r.e2e_s is not None and r.sent_s <= duration_s / 4]
    if not sent or not early or duration_s <= 0:
        return None
    opens = max(duration_s / 2, float(np.median(early)))
    if duration_s - opens < duration_s / 4:
        return None
    arrived = sum(opens < r.sent_s <= duration_s for r in sent)
    ends = [r.sent_s + (r.e2e_s or 0.0) for r in sent if not r.cut and (r.e2e_s is not None or r.error)]
    departed = sum(opens < t <= duration_s for t in ends)
    return {"arrived": float(arrived), "departed": float(departed), "window_s": duration_s - opens}


def backlog_grew(counts: dict[str, float] | None) -> bool:
    """Arrivals outnumbered departures beyond their noise: two Poisson counts, sd sqrt(arrived + departed)
    (an engine that keeps pace departs in step with its arrivals, so this errs wide, never narrow)."""
    if not counts:
        return False
    a, d = counts["arrived"], counts["departed"]
    return a - d > Z * math.sqrt(a + d) if a + d > 0 else False


def queue_bound(step) -> bool:
    """A valid step whose queue grew beyond its noise (what :func:`loadgen.stats.summarize` judges it by,
    read again from the stored growth so that steps recorded before the rule are judged alike)."""
    open_loop = step.users is None  # closed-loop users never queue more requests than there are users
    return (
        open_loop and step.validity == "valid" and step.target_rate > 0 and queue_grew(step.ttft_growth, step.backlog)
    )


def served_rate(step) -> float | None:
    """What the step's engine served (req/s), None without a measured growth: the lower of two readings,
    the queue's (offered / (1 + k)) and the completions' (done: answered requests per second until the last
    one ended, which the engine's unsaturated start and requests cut at the drain deadline only lower). Each
    errs high somewhere (k reads low where a batch absorbs the first arrivals), and a capacity must not rest
    on the more flattering one."""
    g = step.ttft_growth
    if not g or step.target_rate <= 0:
        return None
    # not the backlog's departures over its window: while a batch still fills they trail what the engine
    # serves (half of it on the simulated engine's 512-sequence batch at 1.5x), and on an H100 that capped
    # a capacity at 9.4 req/s where 20 held
    by_queue = step.target_rate / (1 + max(g["slope"], 0.0))
    return min(by_queue, step.throughput_rps) if step.throughput_rps > 0 else by_queue


def queue_note(growth: dict[str, float] | None, rate: float, backlog_counts: dict[str, float] | None = None) -> str:
    """The violation a queue-bound step reports (``rate``: what it offered)."""
    gap = shortfall(growth)
    if gap is None or gap[0] <= Z * gap[1]:  # the backlog saw it
        a, d, w = backlog_counts["arrived"], backlog_counts["departed"], backlog_counts["window_s"]
        return (
            f"queue grew: {a:.0f} arrived and {d:.0f} left (+-{math.sqrt(a + d):.0f}) in the step's last "
            f"{w:.3g} s ({rate:.3g} req/s offered)"
        )
    gained, se = gap
    k = max(growth["slope"], 0.0)
    return (
        f"queue grew: {gained:.0f} +-{se:.0f} of {growth['n']:.0f} arrivals left waiting "
        f"({rate:.3g} req/s offered, {1 + k:.2f}x what the engine served)"
    )


def sustained_bound(steps) -> tuple[float, float] | None:
    """(log req/s, its standard error): what the queue-bound steps among ``steps`` served (:func:`served_rate`,
    their geometric mean weighted by requests), above which no capacity within the SLA lies; None when no
    step's queue grew beyond its noise. Each step's error is the Poisson error of the count it served,
    sqrt((1 + k) / n) in the log."""
    # a step the backlog alone flagged may carry no TTFT growth (too few answered): no served rate to read
    bound = [s for s in steps if queue_bound(s) and s.ttft_growth]
    if not bound:
        return None
    n = np.array([s.ttft_growth["n"] for s in bound])
    k = np.array([max(s.ttft_growth["slope"], 0.0) for s in bound])
    w = n / n.sum()
    logs = np.log([served_rate(s) for s in bound])
    return float(w @ logs), float(np.sqrt(np.sum(w**2 * (1 + k) / n)))
