"""The paired, sequential verdict: better / same / worse with a stated error rate.

Design (docs/measurement.md has the reasoning and the measured error rates):

* **Paired.** Baseline (A) and candidate (B) are measured on the same rates, with the same
  requests and arrival schedules (common random numbers), in interleaved rounds A B, B A, A B, ...
  so that a drift of the host cancels instead of landing on one side.
* **Capacity from every step** (:mod:`loadgen.capacity`): the fitted SLA crossing of all steps of
  a side, with a bootstrap over requests.
* **The effect** is d = log(capacity B / capacity A). Its standard error is the larger of the
  bootstrap's and the between-run one: the variance of a paired per-round difference, from this
  verdict's rounds pooled with A/A evidence (the noise floor's repeats and the endpoint's prior, :mod:`loadgen.noise_prior`),
  which holds the between-run noise a bootstrap over requests cannot see; t on the pooled df.
* **Sequential.** After each round the interval d +- t SE is checked: wholly above 0 is
  ``better``, wholly below ``worse``, wholly inside +-``equivalence`` is ``same`` (decided); else
  another round, up to ``max_rounds``, then ``same``. The early looks share alpha / 4, the last gets
  3 alpha / 4 (Bonferroni, :func:`spent_alpha`), so the chance of a false better-or-worse over all
  looks is at most ``alpha``. :mod:`loadgen.sequential` drives the rounds.
* **Futility** (``futility=True``, a campaign's looks): at the look before the last, an effect under a
  third of that look's minimum detectable effect (:data:`FUTILITY_SHARE`) stops as ``same`` (``stopped``
  "futile"). Even if the effect were what that look reads, the last round would make it ``better`` one
  time in fifty or less; a stop that can only say ``same`` adds no false better-or-worse; and a true gain
  at the final look's MDE reads that low in 3-6% of such looks (docs/measurement.md). Earlier looks,
  with more rounds to come, never stop for futility.
* **Minimum detectable effect**: the smallest true effect this noise would call better with 80%
  power at the final look's z: (z + 0.84) SE.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, Field
from scipy.stats import norm
from scipy.stats import t as student_t

from loadgen.capacity import CapacityEstimate, estimate
from loadgen.host_elasticity import host_adjustment
from loadgen.noise_prior import PER_SWEEP
from loadgen.queue_rate import HostAdjustment, service_rate
from loadgen.results import StepResult

ALPHA = 0.05
#: futility: an early look stops as ``same`` when its effect is under this share of its MDE
FUTILITY_SHARE = 1 / 3
LOOKS = 3  # a harness verdict is looked at after its planned repeats and after up to two more
POWER_Z = float(norm.ppf(0.8))


class VerdictStats(BaseModel):
    """How sure a verdict is. Effects are relative capacity changes (+0.12 = 12% more req/s)."""

    verdict: str  # better | same | worse | invalid
    effect: float | None = None
    low: float | None = None  # interval at the decision's level (family-wise 1 - alpha)
    high: float | None = None
    confidence: float = 1 - ALPHA
    mde: float | None = None  # minimum detectable effect (80% power) at this noise
    rounds: int = 0
    stopped: str = ""  # decided | equivalent | futile | max_rounds | invalid
    baseline: str | None = None  # the capacity estimates, described
    candidate: str | None = None
    baseline_censored: str | None = None  # "above" / "below": that side's crossing lies outside the tested rates
    candidate_censored: str | None = None
    baseline_rps: float | None = None
    candidate_rps: float | None = None
    se_bootstrap: float | None = None
    se_between: float | None = None
    rates: list[float] = Field(default_factory=list)
    reason: str | None = None
    decided_by: str | None = None  # "SLA crossing" or "service rate" (loadgen.judge)
    # loadgen.judge: the two estimators split (the crossing overruled the service rate, or decided against
    # its whole interval), said in one sentence for a person
    disagreement: str | None = None

    def sentence(self) -> str:
        if self.verdict == "invalid":
            return f"invalid: {self.reason}"
        if self.effect is None:
            return f"{self.verdict}: {self.reason or 'no effect estimate'}"
        mde = f"; smallest effect it could see {self.mde:.1%}" if self.mde is not None else ""
        by = f" by the {self.decided_by}" if self.decided_by else ""
        level = f"{self.confidence:.1%}".replace(".0%", "%")
        futile = "; stopped early: no gain in sight" if self.stopped == "futile" else ""
        return (
            f"{self.verdict}: {self.effect:+.1%}{by} ({level} interval {self.low:+.1%} to "
            f"{self.high:+.1%}; {self.rounds} round(s){mde}{futile})"
        )


def spent_alpha(alpha: float, looks: int, final: bool) -> float:
    """The error rate one look may spend (Bonferroni, weighted to the last look): the early looks share
    a quarter of ``alpha``, the final look gets the rest, so early stops need overwhelming evidence and
    the last look keeps most of the power. Over all looks at most ``alpha`` is spent."""
    if looks <= 1:
        return alpha
    return 0.75 * alpha if final else 0.25 * alpha / (looks - 1)


def _crit(alpha: float, looks: int, df: float | None, final: bool = True) -> float:
    q = 1 - spent_alpha(alpha, looks, final) / 2
    return float(norm.ppf(q)) if df is None else float(student_t.ppf(q, df))


def _differences(
    per_sweep,
    a_rounds: list[list[StepResult]],
    b_rounds: list[list[StepResult]],
    hosts: tuple[HostAdjustment | None, HostAdjustment | None] = (None, None),
) -> list[float]:
    pairs = ((per_sweep(a, hosts[0]), per_sweep(b, hosts[1])) for a, b in zip(a_rounds, b_rounds))
    return [lb - la for la, lb in pairs if la is not None and lb is not None]


def round_differences(a_rounds: list[list[StepResult]], b_rounds: list[list[StepResult]]) -> list[float]:
    """log(capacity B / capacity A) of each round on its own (rounds whose crossings are resolved)."""
    return _differences(PER_SWEEP["crossing"], a_rounds, b_rounds)


def service_rate_differences(a_rounds: list[list[StepResult]], b_rounds: list[list[StepResult]]) -> list[float]:
    """log(service rate B / service rate A) of each round on its own (rounds where both sides queued), at
    one host speed for all of them where every step measured it (:func:`host_adjustments`)."""
    return _differences(PER_SWEEP["service_rate"], a_rounds, b_rounds, host_adjustments(a_rounds, b_rounds))


def host_adjustments(
    a_rounds: list[list[StepResult]], b_rounds: list[list[StepResult]]
) -> tuple[HostAdjustment | None, HostAdjustment | None]:
    """How each side is stated at the host speed common to both (loadgen.host_elasticity): each with the
    exponent its own rounds fit (one sweep: the prior's), since two configurations follow the host's memory
    differently."""
    every = a_rounds + b_rounds
    return host_adjustment(a_rounds, every), host_adjustment(b_rounds, every)


def between_variance(
    diffs: list[float], prior_var: float = 0.0, prior_df: float = 0, taken_df: float = 0.0
) -> tuple[float | None, float]:
    """(variance of one round's difference, degrees of freedom): this verdict's rounds pooled with
    the noise floor's A/A rounds (``prior_var`` over ``prior_df`` degrees of freedom); ``taken_df``: what
    a fit on these rounds took from their own (loadgen.host_elasticity)."""
    df = prior_df + max(0.0, len(diffs) - 1 - taken_df)
    if df == 0:
        return None, 0
    own = float(np.var(diffs, ddof=1)) * (len(diffs) - 1) if len(diffs) > 1 else 0.0
    return (prior_df * prior_var + own) / df, df


def judge_rounds(
    a_rounds: list[list[StepResult]],
    b_rounds: list[list[StepResult]],
    *,
    alpha: float = ALPHA,
    max_rounds: int = 4,
    equivalence: float = 0.02,
    final: bool = False,
    seed: int = 0,
    prior_var: float = 0.0,
    prior_df: float = 0,
    looks: int | None = None,
    futility: bool = False,
) -> VerdictStats:
    """The verdict on the sweeps measured so far (each round: the steps of one sweep); sweep i of A
    and of B share their schedules (same seed per rate), so they pair. A and B may have different
    numbers of sweeps (a baseline measured K times, a candidate once so far).

    ``prior_var``/``prior_df``: the between-run variance of a paired difference from A/A pairs
    (the noise floor's repeats, the endpoint's prior). Without any, a verdict needs rounds of its
    own to see that variance. ``looks``: how many times this verdict may be taken (alpha is split).
    ``futility``: an early look with no gain in sight stops as ``same`` (the module doc)."""
    k = min(len(a_rounds), len(b_rounds))
    ka, kb = len(a_rounds), len(b_rounds)
    looks = looks or max_rounds
    est_a = estimate([s for r in a_rounds for s in r], seed=seed)
    est_b = estimate([s for r in b_rounds for s in r], seed=seed)  # same seed: paired resampling
    if est_a is None or est_b is None:
        return VerdictStats(
            verdict="invalid",
            rounds=k,
            stopped="invalid",
            reason="no capacity estimate (steps without per-request SLA samples, or none valid)",
        )
    common = dict(
        rounds=k,
        baseline=est_a.describe(),
        candidate=est_b.describe(),
        baseline_rps=est_a.capacity,
        candidate_rps=est_b.capacity,
        rates=sorted(set(est_a.rates) | set(est_b.rates)),
        baseline_censored=est_a.censored,
        candidate_censored=est_b.censored,
    )
    if est_a.censored or est_b.censored:
        return _censored(est_a, est_b, final, common)
    if not (math.isfinite(est_a.log_se) and math.isfinite(est_b.log_se)):  # many bootstrap draws unresolved
        # no standard error to pool: only the two sides' own intervals, which must not overlap
        unresolved = "baseline" if not math.isfinite(est_a.log_se) else "candidate"
        why = f"the {unresolved}'s crossing is not resolved by many bootstrap draws: judged on the two intervals"
        finite = est_a.capacity > 0 and est_a.low > 0 and est_a.high > 0  # no ratio is ever infinite
        effect = est_b.capacity / est_a.capacity - 1 if finite else None
        low = est_b.low / est_a.high - 1 if finite else None  # the ratio's widest bounds
        high = est_b.high / est_a.low - 1 if finite else None
        if est_b.high < est_a.low:
            verdict, stopped = "worse", "decided"
        elif est_b.low > est_a.high:
            verdict, stopped = "better", "decided"
        elif final or kb >= max_rounds:
            verdict, stopped, why = "same", "max_rounds", why + " (they overlap)"
        else:
            verdict, stopped = "undecided", ""
        return VerdictStats(verdict=verdict, stopped=stopped, effect=effect, low=low, high=high, reason=why, **common)
    d = math.log(est_b.capacity / est_a.capacity)
    se_boot = float(np.std(est_b.draws - est_a.draws))
    diffs = round_differences(a_rounds[:k], b_rounds[:k])
    return _interval_verdict(
        d,
        se_boot,
        diffs,
        ka,
        kb,
        prior_var,
        prior_df,
        alpha,
        looks,
        final or kb >= max_rounds,
        equivalence,
        common,
        futility=futility,
        max_rounds=max_rounds,
    )


def _standard_error(se_own: float, se_between: float | None, df: float) -> tuple[float, float | None]:
    """(standard error of the effect, its degrees of freedom): the larger of the estimate's own error and
    the between-run one; Student's t on ``df`` only where the between-run spread decides it, else the
    normal quantile (None). One rule for verdicts and for the floor's MDE that promises what they see."""
    if se_between is not None and se_between >= se_own:
        return se_between, df
    return se_own, None


def _interval_verdict(
    d: float,
    se_own: float,
    diffs: list[float],
    ka: int,
    kb: int,
    prior_var: float,
    prior_df: float,
    alpha: float,
    looks: int,
    last: bool,
    equivalence: float,
    common: dict,
    min_diffs: int = 0,
    futility: bool = False,
    max_rounds: int = 0,
    taken_df: float = 0.0,
    host_se: float = 0.0,
) -> VerdictStats:
    """The test both estimators share: the effect d = log(B / A) with the larger of its own standard error
    (``se_own``: a bootstrap, or the slopes' intervals) and the between-round one (the rounds' differences
    ``diffs`` pooled with the A/A prior), the interval at this look's spent alpha, and the decision. A
    verdict waits for another round while it has no between-run spread (df 0) or fewer than ``min_diffs``
    round differences of its own, unless this is its last look; with ``futility``, at the look before the
    last (``kb`` + 1 = ``max_rounds``: one repeat left, the rule's derivation), an effect under
    FUTILITY_SHARE of the MDE stops as ``same`` instead. ``host_se``: the error the host adjustment's
    exponents add to ``d`` (loadgen.queue_rate.ServiceRate.host_log_se), added to either error."""
    var, df = between_variance(diffs, prior_var, prior_df, taken_df)
    # var is that of one paired difference (2 x one run's variance): the means of ka and kb runs differ by
    # var / 2 x (1/ka + 1/kb)
    se_between = math.sqrt(var / 2 * (1 / ka + 1 / kb)) if var is not None else None
    if host_se:
        se_own = math.hypot(se_own, host_se)
        se_between = math.hypot(se_between, host_se) if se_between is not None else None
    se, use_df = _standard_error(se_own, se_between, df)
    z = _crit(alpha, looks, use_df, last)
    lo, hi = d - z * se, d + z * se
    eq = math.log1p(equivalence)
    if (df == 0 or len(diffs) < min_diffs) and not last:
        verdict, stopped = "undecided", ""  # no measure of the between-run noise yet: another round
    elif lo > 0:
        verdict, stopped = "better", "decided"
    elif hi < 0:
        verdict, stopped = "worse", "decided"
    elif -eq < lo and hi < eq:
        verdict, stopped = "same", "equivalent"
    else:
        verdict, stopped = ("same", "max_rounds") if last else ("undecided", "")
    mde = (_crit(alpha, looks, use_df, True) + POWER_Z) * se  # log scale
    before_last = kb + 1 >= max_rounds  # an undecided look is never the last
    if verdict == "undecided" and futility and before_last and d < FUTILITY_SHARE * mde:
        verdict, stopped = "same", "futile"
    return VerdictStats(
        verdict=verdict,
        effect=math.expm1(d),
        low=math.expm1(lo),
        high=math.expm1(hi),
        mde=math.expm1(mde),
        stopped=stopped,
        se_bootstrap=se_own,
        se_between=se_between,
        confidence=1 - alpha,
        **common,
    )


def judge_service_rates(
    a_rounds: list[list[StepResult]],
    b_rounds: list[list[StepResult]],
    *,
    alpha: float = ALPHA,
    max_rounds: int = 4,
    equivalence: float = 0.02,
    final: bool = False,
    seed: int = 0,
    prior_var: float = 0.0,
    prior_df: float = 0,
    looks: int | None = None,
    futility: bool = False,
) -> VerdictStats:
    """:func:`judge_rounds` with the engine's service rate from queue growth (:mod:`loadgen.queue_rate`)
    in place of the SLA crossing: d = log(mu B / mu A) over every queued step of each side; its standard
    error is the larger of the slopes' own (their Theil-Sen intervals) and the between-round one, pooled
    with the A/A prior as in judge_rounds, and the host adjustment's own (``host_se``). A side with no
    queued step served every tested rate: the driver widens the rates upward (``*_censored`` "above").
    Every queued step is read, whether or not the other side queued at its rate and length: reading only
    the steps both sides shared (the same requests) did not pay on recorded A/A launches
    (benchmarks/results/verdict_coverage.md). ``seed`` is unused (nothing is resampled)."""
    k = min(len(a_rounds), len(b_rounds))
    ka, kb = len(a_rounds), len(b_rounds)
    looks = looks or max_rounds
    host_a, host_b = host_adjustments(a_rounds, b_rounds)  # both sides at one host speed (None: as measured)
    sa = service_rate([s for r in a_rounds for s in r], host=host_a)
    sb = service_rate([s for r in b_rounds for s in r], host=host_b)
    if sa is None or sb is None:
        return VerdictStats(
            verdict="invalid", rounds=k, stopped="invalid", reason="no TTFT growth measured (steps without records)"
        )
    common = dict(
        rounds=k,
        baseline=sa.describe(),
        candidate=sb.describe(),
        baseline_rps=sa.rate,
        candidate_rps=sb.rate,
        rates=sorted({s.target_rate for r in a_rounds + b_rounds for s in r}),
        baseline_censored=None if sa.rate else "above",
        candidate_censored=None if sb.rate else "above",
    )
    last = final or kb >= max_rounds
    if sa.rate is None or sb.rate is None:
        if sb.rate is None and sa.rate is not None and sa.rate * math.exp(2 * sa.log_se) < sb.max_rate:
            low = sb.max_rate / (sa.rate * math.exp(2 * sa.log_se)) - 1
            why = "the candidate served every tested rate without queueing"
            return VerdictStats(verdict="better", stopped="decided", low=low, reason=why, **common)
        if sa.rate is None and sb.rate is not None and sb.rate * math.exp(2 * sb.log_se) < sa.max_rate:
            high = sb.rate * math.exp(2 * sb.log_se) / sa.max_rate - 1
            why = "the baseline served every tested rate without queueing"
            return VerdictStats(verdict="worse", stopped="decided", high=high, reason=why, **common)
        verdict, stopped = ("same", "max_rounds") if last else ("undecided", "")
        return VerdictStats(
            verdict=verdict, stopped=stopped, reason="a side never queued: no rate to compare", **common
        )
    d = math.log(sb.rate / sa.rate)
    hosts = host_adjustments(a_rounds[:k], b_rounds[:k])
    diffs = _differences(PER_SWEEP["service_rate"], a_rounds[:k], b_rounds[:k], hosts)
    taken = sum(h.sweep_df for h in hosts if h)  # what each side's exponent took from the rounds' spread
    # the larger of the runs' spread and the slopes' own; a verdict waits for a second round's spread of its
    # own (the prior alone is not it): queued requests are not independent, so the slopes may be optimistic
    return _interval_verdict(
        d,
        math.hypot(sa.log_se, sb.log_se),
        diffs,
        ka,
        kb,
        prior_var,
        prior_df,
        alpha,
        looks,
        last,
        equivalence,
        common,
        min_diffs=2,
        futility=futility,
        max_rounds=max_rounds,
        taken_df=taken,
        # each side's exponent is an estimate: its error, carried through the host's distance from the
        # common speed, is part of the effect's (one side's error taken as independent of the other's)
        host_se=math.hypot(sa.host_log_se, sb.host_log_se),
    )


def _censored(a: CapacityEstimate, b: CapacityEstimate, final: bool, common: dict) -> VerdictStats:
    """A side whose crossing lies outside the tested rates: decided only when the other side's
    interval clears the tested range; else the driver widens the rates and measures again."""
    if b.censored == "above" and a.censored is None and a.high < max(b.rates):
        return VerdictStats(
            verdict="better",
            stopped="decided",
            low=max(b.rates) / a.high - 1,
            reason="the candidate held the SLA beyond every tested rate",
            **common,
        )
    if b.censored == "below" and a.censored is None and a.low > min(b.rates):
        return VerdictStats(
            verdict="worse",
            stopped="decided",
            high=min(b.rates) / a.low - 1,
            reason="the candidate's fitted SLA crossing lies under every tested rate",
            **common,
        )
    if a.censored == "below" and b.censored is None and b.low > min(a.rates):
        return VerdictStats(
            verdict="better",
            stopped="decided",
            low=b.low * 1.25 / min(a.rates) - 1,
            reason="the baseline's fitted SLA crossing lies under every tested rate",
            **common,
        )
    if final:
        return VerdictStats(
            verdict="same",
            stopped="max_rounds",
            reason="a capacity lies outside the tested rates in every round",
            **common,
        )
    return VerdictStats(verdict="undecided", reason="widening the rates", **common)


def floor_mde(
    est: CapacityEstimate | None,
    k: int,
    var: float,
    df: float,
    *,
    looks: int = 1,
    alpha: float = ALPHA,
    candidate_rounds: int | None = None,
    own_scale: float = 1.0,
) -> float | None:
    """Minimum detectable effect (80% power) of a candidate measured like this baseline: ``est`` is the
    baseline's pooled estimate over its ``k`` sweeps, and the candidate gets as many, or at most
    ``candidate_rounds`` (a campaign's repeats and extra repeats). ``var``/``df``: the floor's between-run
    variance; the verdict at its last round adds its rounds' differences' df to it. ``own_scale`` scales
    the estimate's own error (a projection to more sweeps' worth of steps: loadgen.noise)."""
    # est: a CapacityEstimate (censored: no crossing), or a ServiceRate (rate None: nothing queued)
    if est is None or k == 0 or getattr(est, "censored", None) or getattr(est, "rate", 1.0) is None:
        return None
    # the verdict at its k-th round pools the rounds' k - 1 df with the floor's (between_variance); with no
    # variance measured (df 0) there is nothing they would pool into
    kc = candidate_rounds or k
    df += min(k, kc) - 1 if df > 0 else 0
    own = est.log_se * math.sqrt(2) * own_scale
    # var is that of one paired difference: the means of k and kc runs differ by var / 2 x (1/k + 1/kc)
    se, use_df = _standard_error(own, math.sqrt(var / 2 * (1 / k + 1 / kc)), df)
    mde = math.expm1((_crit(alpha, looks, use_df) + POWER_Z) * se)
    # a fit with no spread to speak of (two rates, one each side of the SLA: log_se inf) sees no effect size
    return mde if math.isfinite(mde) else None
