"""The engine's service rate from queue growth: a capacity estimate from every request, not a tail count.

In a step whose arrival rate ``lam`` exceeds the rate ``mu`` the engine serves, the queue grows: request
i arrives at i / lam and is served from about i / mu, so its TTFT grows with its arrival time at slope
k = lam / mu - 1, and mu = lam / (1 + k). The slope is a Theil-Sen fit over every request of the step
(robust to a stray stall), so each queued step says where the engine's limit lies with the weight of all
its requests; the fitted SLA crossing (:mod:`loadgen.capacity`) hears only the few near the limit.

On vLLM on a shared 2-core host the per-round paired difference of this rate had about half the spread
of the crossing's (benchmarks/rejudge_trials.py; docs/measurement.md). It is what the engine sustains at
length for the step's traffic mix, so it reads lower than the crossing of short steps, which measure a
transient. It measures only capacity set by the queue (TTFT-limited endpoints): a change that moves ITL or
E2E without moving throughput is invisible to it, which is why the crossing stays the default estimator.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel
from scipy.stats import theilslopes

#: A step "queued" when its TTFT grew by at least this much per second of arrivals (k = lam/mu - 1 > 0.1:
#: arrivals at least 10% above what the engine serves); flatter steps were served and say only mu >= lam.
MIN_GROWTH = 0.1
MIN_REQUESTS = 8
#: Theil-Sen takes every pair of points: a long replay run (summarize covers it too) is fitted on this
#: many requests evenly spaced in arrival order, so its memory stays bounded (~2M pairs).
MAX_FIT_POINTS = 2000


def ttft_growth(records) -> dict[str, float] | None:
    """Slope of TTFT (s) on scheduled arrival time (s) over a step's answered requests, with its 95%
    interval (Theil-Sen), or None with fewer than :data:`MIN_REQUESTS`. Requests cut before their first
    token are left out (their TTFT is unknown): a step that cut many reads a little flatter."""
    pts = sorted((r.scheduled_s, r.ttft_s) for r in records if r.ttft_s is not None and r.error is None)
    if len(pts) < MIN_REQUESTS:
        return None
    x, y = np.array(pts).T
    if len(pts) > MAX_FIT_POINTS:
        keep = np.linspace(0, len(pts) - 1, MAX_FIT_POINTS).astype(int)
        x, y = x[keep], y[keep]
    if np.ptp(x) <= 0:
        return None
    slope, _, low, high = theilslopes(y, x, alpha=0.95)
    return {"slope": float(slope), "low": float(low), "high": float(high), "n": float(len(pts))}


class HostAdjustment(BaseModel):
    """How one side's service rate is restated at a common host speed: each step's rate times
    (``at_host_s`` / the step's memory-pass time) ** ``exponent``, the side's elasticity to the host's memory
    (loadgen.host_elasticity fits it: about -1 for a decode-bound configuration, 0 for a prefill-bound one)."""

    at_host_s: float  # seconds of one memory pass (loadgen.host_speed), common to every side compared
    exponent: float
    exponent_se: float = 0.0
    contrasts: int = 0  # the repeated steps it was fitted on (0: the prior alone)
    sweep_df: float = 0.0  # the degrees of freedom the fit took from these sweeps' A/A evidence

    def log_factor(self, step_host_s: float) -> float:
        """What the step's log rate gains when stated at the common host speed."""
        return -self.exponent * math.log(step_host_s / self.at_host_s)

    def describe(self) -> str:
        fitted = f"fitted on {self.contrasts} repeated step(s)" if self.contrasts else "the prior alone"
        return (
            f"at a common host speed ({self.at_host_s * 1e3:.3g} ms per memory pass; rate ~ host^"
            f"{self.exponent:+.2f} +-{self.exponent_se:.2f}, {fitted})"
        )


class ServiceRate(BaseModel):
    """A side's service rate (req/s) over the steps that queued, with the standard error of its log."""

    rate: float | None  # None: no step queued (the engine served every tested rate)
    log_se: float = math.inf
    steps: int = 0  # steps that queued
    max_rate: float = 0.0  # the highest tested rate: with no queued step, mu >= this
    # the host speed the rate is stated at, common to everything compared with it; None: as measured
    host: HostAdjustment | None = None
    # the standard error the exponent's own error adds to the log rate: its se times how far the steps' host
    # lay from the common speed (a verdict adds it to its error: loadgen.verdict.judge_service_rates)
    host_log_se: float = 0.0

    def describe(self) -> str:
        if self.rate is None:
            return f"served every tested rate (up to {self.max_rate:.3g} req/s) without queueing"
        host = f", {self.host.describe()}" if self.host else ""
        return f"{self.rate:.3g} req/s served (queue growth over {self.steps} step(s){host}, +-{self.log_se:.1%})"


def queued(step, min_growth: float = MIN_GROWTH) -> bool:
    """A valid step whose TTFT grew fast enough to say the engine's rate (what :func:`service_rate` reads)."""
    return step.validity == "valid" and bool(step.ttft_growth) and step.ttft_growth["slope"] > min_growth


def step_schedule(step) -> tuple[float, float]:
    """What fixes a step's requests and arrival times: its rate and its length (repeats of one schedule are
    what loadgen.host_elasticity fits a configuration's exponent on)."""
    return round(step.target_rate, 6), round(step.duration_s, 3)


def step_host_s(step) -> float | None:
    """The host's memory-pass time at a step (loadgen.host_speed): the faster of its readings on either
    side of it, or None when it has none. Interference only ever slows a pass, so a burst that filled one
    reading's second does not stand for the whole step (on the prefix-caching launches the faster reading
    left a step's service rate a residual sd of 5.0%, their geometric mean 5.8%, none 7.6%)."""
    readings = [r for r in step.host_memory_pass_s if r > 0]
    return min(readings) if readings else None


def common_host_s(steps, min_growth: float = MIN_GROWTH) -> float | None:
    """The host speed to compare service rates at: the geometric mean memory-pass time over the queued
    steps given (every side and repeat of one comparison), or None when any of them lacks one (then
    nothing is adjusted: a comparison is adjusted everywhere or nowhere)."""
    times = [step_host_s(s) for s in steps if queued(s, min_growth)]
    if not times or any(t is None for t in times):
        return None
    return float(math.exp(np.mean(np.log(times))))


def service_rate(steps, min_growth: float = MIN_GROWTH, *, host: HostAdjustment | None = None) -> ServiceRate | None:
    """The request-weighted geometric mean of lam / (1 + k) over the valid steps that queued, or None when
    no step carries a growth (results recorded before it was measured). ``host``
    (loadgen.host_elasticity.host_adjustment): each step's rate is stated at the comparison's common host
    speed, by how much faster or slower the host's memory was around it (:mod:`loadgen.host_speed`) and
    how much this configuration follows it, so the host's drift between the sweeps compared leaves the
    difference."""
    valid = [s for s in steps if s.validity == "valid"]
    measured = [s for s in valid if s.ttft_growth]
    if not measured:
        return None
    logs, ses, weights, shifts = [], [], [], []
    for step in measured:
        lam, g = step.target_rate, step.ttft_growth
        k = g["slope"]
        if k <= min_growth:
            continue
        logs.append(math.log(lam / (1 + k)))
        if host:
            logs[-1] += host.log_factor(step_host_s(step))
            shifts.append(math.log(step_host_s(step) / host.at_host_s))
        # the slope's interval as a normal one, carried to log(mu) = log(lam) - log(1 + k)
        ses.append(max(g["high"] - g["low"], 1e-6) / (2 * 1.96) / (1 + k))
        weights.append(g["n"])
    top = max(s.target_rate for s in measured)
    if not logs:
        return ServiceRate(rate=None, max_rate=top)
    w = np.array(weights) / np.sum(weights)
    return ServiceRate(
        rate=float(math.exp(np.dot(w, logs))),
        log_se=float(math.sqrt(np.sum((w * np.array(ses)) ** 2))),
        steps=len(logs),
        max_rate=top,
        host=host,
        host_log_se=host.exponent_se * abs(float(np.dot(w, shifts))) if host else 0.0,
    )
