"""The between-run noise a verdict starts from: A/A evidence, and the endpoint's prior it pools into.

A verdict's interval needs the variance of a paired difference between two runs of one configuration
(loadgen.verdict). A floor's own repeats give little of it: K = 2 sweeps are one A/A pair, one degree of
freedom, and Student's t on 5 df (with the default prior's 4) asks for a third more effect than the
normal quantile. Every floor an endpoint has measured is more evidence of the same thing, so:

* :func:`repeat_evidence` reads one floor's A/A evidence from all its K repeats (they share their
  schedules): K - 1 degrees of freedom, not the K / 2 of disjoint pairs;
* :class:`NoisePrior` is what a new floor starts from: the default (:data:`PRIOR_SD` over
  :data:`PRIOR_DF`) pooled with the evidence of the endpoint's earlier floors, measured with the same
  protocol on the same hardware (the research memory keeps it: memory_db ``aa_evidence``);
* :func:`pool` adds a floor's own evidence to that prior, never below the between-launch noise the
  endpoint declared for its class (a floor's own repeats are one launch; a verdict compares two).

Configurations of one endpoint are not equally noisy: on vLLM CPU those an ITL tail limits moved 9-35%
between runs, those the queue (TTFT) limits 0.1-3.9% (docs/measurement.md). So every piece of evidence
carries its configuration's *noise class*, the SLA target whose crossing limits it, and a floor pools
only its own class (:meth:`NoisePrior.for_limit`); evidence without a class pools into every class.
A candidate another target limits is judged with both sides' variances (:func:`combine`: the paired
difference's variance is sigma_A^2 + sigma_B^2, not twice one shared sigma^2).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from pydantic import BaseModel, Field

from loadgen.capacity import CapacityEstimate, estimate
from loadgen.host_elasticity import host_adjustment
from loadgen.queue_rate import HostAdjustment, service_rate
from loadgen.results import AAEvidence, Estimator, StepResult, SweepResult

#: The between-run spread a new endpoint starts from: sd 3% of a paired log-capacity difference, worth
#: 4 A/A pairs of evidence (the vLLM CPU trials' 24 s steps measured 2.7-3.0%; the main job's protocol
#: measured 6.4% over five configurations: docs/measurement.md).
PRIOR_SD, PRIOR_DF = 0.03, 4


def _log_crossing(steps: list[StepResult], host: HostAdjustment | None = None) -> float | None:
    est = estimate(steps, boot=0)
    return math.log(est.capacity) if est and not est.censored and est.capacity > 0 else None


def _log_service_rate(steps: list[StepResult], host: HostAdjustment | None = None) -> float | None:
    served = service_rate(steps, host=host)
    return math.log(served.rate) if served and served.rate else None


#: One sweep's log estimate, given how its side is stated at its comparison's host speed (the crossing
#: ignores it).
PER_SWEEP: dict[str, Callable[[list[StepResult], HostAdjustment | None], float | None]] = {
    "crossing": _log_crossing,
    "service_rate": _log_service_rate,
}


def noise_class(fit: CapacityEstimate | None) -> str | None:
    """The noise class of a configuration: the SLA target whose crossing limits its repeats' pooled fit
    (None when the crossing lies outside the tested rates). The one rule; a caller with a fit in hand
    (the floor's, with its bootstrap) passes it, others call :func:`limiting_target`."""
    return fit.limiting if fit and not fit.censored else None


def limiting_target(sweeps_steps: list[list[StepResult]]) -> str | None:
    """:func:`noise_class` of the repeats' pooled steps, fitted without a bootstrap (the class needs none)."""
    return noise_class(estimate([st for steps in sweeps_steps for st in steps], boot=0))


def repeat_evidence(
    sweeps_steps: list[list[StepResult]], estimator: Estimator, limiting: str | None = None
) -> AAEvidence:
    """A/A evidence from K repeats of one configuration: the sample variance of their log estimates
    (K - 1 df) times 2, the variance of a difference of two runs. K = 2 gives the pair's squared
    difference, as disjoint pairs do; K = 4 gives 3 df where pairs give 2. ``limiting``: the
    configuration's noise class (:func:`limiting_target`, computed once by the caller for both estimators).
    The service rate is stated at one host speed where every step has a reading, with the exponent fitted
    on these repeats (loadgen.host_elasticity), and the df that fit took are not counted."""
    host = None
    if estimator == "service_rate":
        host = host_adjustment(sweeps_steps, sweeps_steps)
    logs = [x for x in (PER_SWEEP[estimator](steps, host) for steps in sweeps_steps) if x is not None]
    evidence = log_evidence(logs, estimator, taken_df=host.sweep_df if host else 0.0)
    return evidence.model_copy(update={"limiting": limiting}) if evidence.df else evidence


def log_evidence(logs: list[float], estimator: Estimator, taken_df: float = 0.0) -> AAEvidence:
    """A/A evidence from the log estimates of K runs of one configuration (see :func:`repeat_evidence`);
    ``taken_df``: degrees of freedom a fit on these runs took (their K - 1 less that, never below 0)."""
    if len(logs) < 2:
        return AAEvidence(estimator=estimator, sweeps=len(logs))
    dev = np.asarray(logs) - np.mean(logs)
    df = max(0.0, len(logs) - 1 - taken_df)
    return AAEvidence(estimator=estimator, sum_sq=2 * float(np.sum(dev**2)), df=df, sweeps=len(logs))


def sweeps_evidence(sweeps: list[SweepResult]) -> list[AAEvidence]:
    """The A/A evidence of one configuration's valid rate sweeps, per estimator ([] without per-request
    samples, or with fewer than two such sweeps)."""
    steps = [[st for st in s.steps if st.validity == "valid"] for s in sweeps if s.mode == "rate" and s.valid]
    if len(steps) < 2 or not all(st.sla_samples for r in steps for st in r):
        return []
    limiting = limiting_target(steps)
    return [ev for ev in (repeat_evidence(steps, e, limiting) for e in ("crossing", "service_rate")) if ev.df]


class NoisePrior(BaseModel):
    """What a floor's between-run variance starts from, per estimator, and where it came from."""

    crossing: AAEvidence = Field(default_factory=lambda: _default("crossing"))
    service_rate: AAEvidence = Field(default_factory=lambda: _default("service_rate"))
    floors: int = 0  # repeated configurations of this endpoint pooled in
    source: str = f"default sd {PRIOR_SD:.0%} over {PRIOR_DF} df"
    history: list[AAEvidence] = Field(default_factory=list)  # every class's evidence (for_limit filters it)
    where: str = "earlier floors"
    # between-launch noise declared for the endpoint (its calibration): no prior or floor of a class is narrower
    bounds: list[AAEvidence] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # what was left out and why (a calibration that does not apply)

    @classmethod
    def from_history(
        cls,
        history: list[AAEvidence],
        floors: int,
        where: str = "earlier floors",
        limiting: str | None = None,
        bounds: list[AAEvidence] = (),
        notes: list[str] = (),
    ) -> "NoisePrior":
        """The default pooled with the endpoint's recorded evidence (``floors`` of them, ``where``); with
        ``limiting``, only the evidence of that class (and evidence without one). ``bounds``: between-launch
        evidence whose sd the pooled one of its estimator and class never falls below (with no class given,
        the widest of every class's); ``notes``: said in the source."""
        pooled = {e: _default(e) for e in ("crossing", "service_rate")}
        for ev in history:
            if limiting is not None and ev.limiting not in (None, limiting):
                continue
            base = pooled[ev.estimator]
            pooled[ev.estimator] = AAEvidence(
                estimator=ev.estimator,
                sum_sq=base.sum_sq + ev.sum_sq,
                df=base.df + ev.df,
                sweeps=base.sweeps + ev.sweeps,
            )
        source = cls.model_fields["source"].default
        if floors:
            extra = ", ".join(
                f"{name} {pooled[e].df - PRIOR_DF:.3g} df"
                for e, name in (("crossing", "crossing"), ("service_rate", "service rate"))
            )
            source += f" + {floors} {where}{f' that {limiting} limits' if limiting else ''} ({extra})"
        for e, ev in pooled.items():
            least = max(
                (b.sum_sq / b.df for b in bounds if b.df and b.estimator == e and b.limiting in (None, limiting))
                if limiting
                else (b.sum_sq / b.df for b in bounds if b.df and b.estimator == e),
                default=0.0,
            )
            if least:
                pooled[e] = ev.model_copy(update={"least_var": least, "sum_sq": max(ev.sum_sq, least * ev.df)})
                source += f"; {e.replace('_', ' ')} at least sd {math.sqrt(least):.1%} (declared between launches)"
        source += "".join(f"; {n}" for n in notes)
        return cls(
            floors=floors,
            source=source,
            history=list(history),
            where=where,
            bounds=list(bounds),
            notes=list(notes),
            **pooled,
        )

    def classes(self) -> list[str]:
        """The noise classes the history has evidence of."""
        return sorted({ev.limiting for ev in self.history if ev.limiting and ev.df})

    def for_limit(self, limiting: str | None) -> "NoisePrior":
        """The prior of a configuration ``limiting`` limits: the default and that class's evidence (every
        class when None). The number of configurations is that of the class."""
        if limiting is None:
            return self
        mine = [ev for ev in self.history if ev.df and ev.limiting in (None, limiting)]
        floors = min(self.floors, max((sum(ev.estimator == e for ev in mine) for e in PER_SWEEP), default=0))
        return NoisePrior.from_history(self.history, floors, self.where, limiting, self.bounds, self.notes)


def _default(estimator: Estimator) -> AAEvidence:
    return AAEvidence(estimator=estimator, sum_sq=PRIOR_DF * PRIOR_SD**2, df=PRIOR_DF)


def pool(own: AAEvidence, prior: AAEvidence) -> tuple[float, float]:
    """(variance of a paired difference, df): a floor's own evidence pooled with its prior."""
    df = prior.df + own.df
    return (max((prior.sum_sq + own.sum_sq) / df, prior.least_var) if df else 0.0), df


def combine(a: tuple[float, float], b: tuple[float, float], *, shared: bool = False) -> tuple[float, float]:
    """(variance of a paired difference, df) between a run of class A and one of class B, from each class's
    variance of a paired difference of its own runs (2 sigma^2): sigma_A^2 + sigma_B^2 = (v_A + v_B) / 2,
    on Welch-Satterthwaite's degrees of freedom (never more than the two together). ``shared``: b's evidence
    includes a's, so the df are no more than the fewer of the two."""
    (va, dfa), (vb, dfb) = a, b
    if not dfa or not dfb:
        return (va, dfa) if dfa else (vb, dfb)
    var = (va + vb) / 2
    if shared:
        return var, min(dfa, dfb)
    denom = (va / 2) ** 2 / dfa + (vb / 2) ** 2 / dfb
    df = int((var**2) / denom) if denom > 0 else dfa + dfb
    return var, max(1, min(df, dfa + dfb))
