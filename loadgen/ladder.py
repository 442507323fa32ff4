"""The rate ladder of a capacity sweep and the capacity it gives (loadgen.sweep runs the steps).

The knee (the last rate before latency takes off), the capacity as the SLA crossing interpolated
between the highest rate within the SLA and the first failing one, the automatic ladder's next rate,
the downward extension when even the lowest rate fails, and the bisection that refines the bracket.
Pure functions of the steps measured so far: no engine, no client.
"""

from __future__ import annotations


import math


from specs.config import SLASpec
from loadgen.results import StepResult
from loadgen.stats import step_sla_ratios
from loadgen.sustained import queue_bound, served_rate, sustained_bound


def knee_rate(
    steps: list[StepResult], latency_factor: float = 2.0, min_increase_ms: float = 50.0, throughput_ratio: float = 0.9
) -> float | None:
    """The last tested rate before the curve bends: beyond it TTFT p95 exceeds ``latency_factor``
    times (and ``min_increase_ms`` more than) its value at the lowest rate, or completed
    throughput falls below ``throughput_ratio`` of the achieved send rate. None when no step
    bends (knee not reached) or the lowest step is already past it."""
    curve = sorted((s for s in steps if s.validity == "valid"), key=lambda s: s.target_rate)
    if len(curve) < 2 or curve[0].ttft_ms.p95 is None:
        return None
    base = curve[0].ttft_ms.p95
    limit = max(base * latency_factor, base + min_increase_ms)

    def bent(step: StepResult) -> bool:
        ttft = step.ttft_ms.p95
        # Completions are counted until the last one ends, so an unqueued step still "loses" the
        # drain tail (about one median e2e latency): credit it back before comparing.
        drain_s = (step.e2e_ms.p50 or 0.0) / 1000
        keeping_up = step.throughput_rps * (step.duration_s + drain_s) / max(step.duration_s, 1e-9)
        # Requests cut at the drain deadline after their first token were being served, not queued.
        keeping_up += (step.cut_requests - step.cut_before_first_token) / max(step.duration_s, 1e-9)
        return (
            ttft is None or ttft > limit or step.error_rate > 0.05 or keeping_up < throughput_ratio * step.achieved_rate
        )

    if bent(curve[0]):
        return None
    for before, step in zip(curve, curve[1:]):
        if bent(step):
            return before.target_rate
    return None


def held(step: StepResult) -> bool:
    """Within the SLA and sustained: a step whose queue grew beyond its noise never held its rate
    (:mod:`loadgen.sustained`; read again here for steps recorded before summarize judged it)."""
    return step.within_sla and not queue_bound(step)


def capacity(steps: list[StepResult]) -> tuple[float, bool]:
    """(capacity, bounded): the highest valid rate within SLA below the lowest failing rate;
    bounded=False when no valid step failed (the capacity is then only a lower bound)."""
    valid = [s for s in steps if s.validity == "valid"]
    failing = [s.target_rate for s in valid if not held(s)]
    first_fail = min(failing, default=math.inf)
    passing = [s.target_rate for s in valid if held(s) and s.target_rate < first_fail]
    return (max(passing, default=0.0), bool(failing))


def interpolated_capacity(steps: list[StepResult], sla: SLASpec | None = None) -> tuple[float, str]:
    """(capacity, method): :func:`crossing_capacity`, at most the rate the engine sustains: where a step's
    queue grew beyond its noise, the service rate those steps measured (:func:`loadgen.sustained.sustained_bound`;
    method "sustained" where it is the lower)."""
    cap, method = crossing_capacity(steps, sla)
    bound = sustained_bound(steps)
    if bound is not None and cap > 0 and math.exp(bound[0]) < cap:
        return float(f"{math.exp(bound[0]):.4g}"), "sustained"
    return cap, method


def crossing_capacity(steps: list[StepResult], sla: SLASpec | None = None) -> tuple[float, str]:
    """(capacity, method): the SLA crossing between the highest passing rate ``lo`` below the lowest
    failing rate ``hi`` (as in :func:`capacity`) and ``hi``. For each target the ``hi`` step
    violates, linear in judged value / limit vs rate from ``lo`` to ``hi``; the capacity is the
    lowest such crossing, clipped to [lo, hi]. Latency curves are convex in rate, so the chord
    crosses the limit no later than the curve does: the estimate errs low. A target unresolved at
    ``hi`` (cut requests, no successful request) crosses at ``lo``; a queue that grew at ``hi`` crosses
    where the offered rate meets what ``hi`` served (:func:`loadgen.sustained.served_rate`).

    method: "interpolated"; "tested" (no failure above ``lo``: a lower bound, or no ratios to
    interpolate); "none_held" (no valid rate within the SLA: capacity 0.0, see the sweep's
    ``capacity_below_rps``)."""
    tested, bounded = capacity(steps)
    if not bounded:
        return tested, "tested"
    valid = [s for s in steps if s.validity == "valid"]
    hi = min(s.target_rate for s in valid if not held(s))
    below = [s for s in valid if held(s) and s.target_rate < hi]
    if not below:
        return 0.0, "none_held"
    lo = tested
    lo_step = [s for s in below if s.target_rate == lo][-1]
    hi_step = [s for s in valid if not held(s) and s.target_rate == hi][-1]
    r_lo, r_hi = step_sla_ratios(lo_step, sla), step_sla_ratios(hi_step, sla)
    crossing = hi
    for name, value in r_hi.items():
        high = math.inf if value is None else value
        if high <= 1.0:
            continue
        low = r_lo.get(name, 0.0)
        if low is None or math.isinf(high) or low >= high:
            crossing = lo
            break
        crossing = min(crossing, lo + (1.0 - min(low, 1.0)) / (high - low) * (hi - lo))
    if queue_bound(hi_step):  # the queue crosses where the offered rate meets what ``hi`` served
        crossing = min(crossing, served_rate(hi_step))
    if crossing >= hi:
        return lo, "tested"
    return float(f"{min(max(crossing, lo), hi):.4g}"), "interpolated"


def nice_rate(rate: float) -> float:
    """Round to two significant digits (ladders people can read)."""
    if rate <= 0:
        return rate
    digits = 1 - int(math.floor(math.log10(rate)))
    return float(round(rate, digits))


def next_auto_rate(
    history: list[tuple[float, bool]], factor: float, resolution: float, min_rate: float
) -> float | None:
    passes = [r for r, ok in history if ok]
    lo = max(passes, default=None)
    fails = [r for r, ok in history if not ok and (lo is None or r > lo)]
    hi = min(fails, default=None)
    if hi is None:
        return nice_rate(lo * factor) if lo is not None else None
    if lo is None:  # nothing held yet: go down, to the floor at most
        rate = nice_rate(hi / factor)
        if rate < min_rate:
            rate = min_rate
        tried = {r for r, _ in history}
        return rate if rate < hi and rate not in tried else None
    if hi / lo <= 1 + resolution:
        return None
    rate = nice_rate(math.sqrt(lo * hi))
    tried = {r for r, _ in history}
    return rate if lo < rate < hi and rate not in tried else None


def extend_down(history: list[tuple[float, bool]], floor: float) -> float | None:
    """Below a ladder whose lowest tested rate failed: half that rate (readably rounded), not below
    ``floor``; None once the floor itself was tried (or nothing lower is left)."""
    lowest = min(r for r, _ in history)
    if lowest <= floor * (1 + 1e-9):
        return None
    rate = max(nice_rate(lowest / 2), floor)
    return rate if rate < lowest and rate not in {r for r, _ in history} else None


def refine_rate(history: list[tuple[float, bool]], min_ratio: float = 1.05) -> float | None:
    """Geometric midpoint between the capacity so far (highest pass below the lowest failure) and
    that failure, or None when there is no such bracket or it is already narrower than ``min_ratio``."""
    fails = [r for r, ok in history if not ok]
    hi = min(fails, default=None)
    lo = max((r for r, ok in history if ok and (hi is None or r < hi)), default=None)
    if lo is None or hi is None or hi / lo <= min_ratio:
        return None
    rate = nice_rate(math.sqrt(lo * hi))
    return rate if lo < rate < hi and rate not in {r for r, _ in history} else None


#: A candidate's sweep begins at the highest rung at or below this share of its baseline's capacity:
#: rungs far below it hold the SLA on both sides and move neither estimator (the crossing is fitted where
#: the fraction over the limit changes; the service rate reads steps that queue), yet cost a long step
#: each (a low rate stretches its step to ``min_requests``). A candidate that fails its first rung
#: still goes down (:func:`extend_down`). At 0.6 the CPU default's candidates (baseline 1.97 req/s) began at
#: 1.0 req/s, a 20 s step and a 14 s one below 0.75x that held the SLA on both sides: about 40 s a sweep.
START_SHARE = 0.75


def rungs_from(ladder: list[float], capacity: float | None, share: float = START_SHARE) -> list[float]:
    """``ladder`` from its highest rung at or below ``share`` x ``capacity`` (all of it when no rung is,
    or without a capacity)."""
    if not capacity or capacity <= 0:
        return list(ladder)
    below = [r for r in ladder if r <= share * capacity]
    return [r for r in ladder if r >= max(below)] if below else list(ladder)
