"""Verdict of a candidate against the baseline's noise floor: better / same / worse / invalid.

better: the candidates' mean capacity exceeds the baseline mean by more than the noise
        threshold (see loadgen.noise) AND every candidate repeat is above the baseline's max;
worse:  symmetric (mean below by more than the threshold AND every repeat below the baseline's min);
same:   anything else;
invalid: the noise floor or any candidate sweep is invalid (crash, errors, client fell behind).

A side with a repeat below its sweep's floor (no rate held the SLA) has no capacity, only a bound:
that repeat counts at its bound, an upper bound. A baseline below its floor can only be beaten
(``capacity_ratio`` is then a lower bound, ``ratio_bound="lower"``); a candidate below its floor
can only lose (an upper bound, ``ratio_bound="upper"``); both below: same, no ratio. Every ratio
and every percentage in the evidence is finite.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.noise import upper_capacities
from loadgen.results import Comparison, NoiseFloor, SweepResult


def _pct(ratio: float) -> str:
    return f"{ratio - 1:+.1%}"


def compare(
    noise_floor: NoiseFloor, candidate_sweeps: list[SweepResult], *, final: bool = True, futility: bool = True
) -> Comparison:
    """``final``: no further repeat will follow (the interval verdict spends its last look's error rate).
    ``futility``: an early look with no gain in sight stops as ``same`` (a campaign's rule: it adopts gains
    only); off, a loss gets its repeats too, as a user's A/B wants (``autoresearch compare``)."""
    if not candidate_sweeps:
        raise ValueError("compare needs at least one candidate sweep")
    base = np.array(noise_floor.capacities, dtype=np.float64)
    cand = np.array([s.capacity_rps or 0.0 for s in candidate_sweeps], dtype=np.float64)
    base_up = np.array(upper_capacities(noise_floor), dtype=np.float64)
    base_below = [b for b in noise_floor.capacity_below if b is not None]
    cand_below = [
        s.capacity_below_rps if not s.capacity_rps and s.capacity_below_rps else None for s in candidate_sweeps
    ]
    cand_up = np.array([b if b is not None else c for c, b in zip(cand.tolist(), cand_below)], dtype=np.float64)
    n_cand_below = sum(b is not None for b in cand_below)
    b_mean, c_mean = float(noise_floor.capacity_mean), float(cand.mean())
    ratio = c_mean / b_mean if b_mean > 0 and not base_below and not n_cand_below else None
    thr = noise_floor.threshold
    common = dict(
        baseline_capacity=b_mean,
        candidate_capacities=cand.tolist(),
        threshold=thr,
        baseline_capacities=base.tolist(),
        candidate_mean=c_mean,
    )
    reasons = []
    if noise_floor.validity != "valid":
        reasons.append(f"baseline noise floor invalid: {noise_floor.invalid_reason}")
    for i, s in enumerate(candidate_sweeps):
        if s.validity != "valid":
            reasons.append(f"candidate sweep {s.label or i} invalid: {s.invalid_reason}")
    if reasons:
        reason = "; ".join(reasons)
        return Comparison(verdict="invalid", evidence=reason, invalid_reason=reason, capacity_ratio=ratio, **common)
    if noise_floor.steps and _has_samples(candidate_sweeps):
        return _interval_compare(noise_floor, candidate_sweeps, final, futility)
    b_max, b_min = float(base.max()), float(base.min())
    unbounded = [s.label or str(i) for i, s in enumerate(candidate_sweeps) if not s.capacity_bounded]
    facts = (
        f"baseline capacity {b_mean:.3g} req/s (K={len(base)}, range {b_min:.3g}-{b_max:.3g}, "
        f"std {noise_floor.capacity_std:.2g}); candidate {c_mean:.3g} req/s over {len(cand)} repeat(s) "
        f"{[round(c, 3) for c in cand.tolist()]}; noise threshold {thr:.1%}"
    )
    if base_below:
        facts += (
            f"; baseline below its floor in {len(base_below)} of {len(base)} repeat(s) "
            f"(no rate down to {max(base_below):.3g} req/s held the SLA)"
        )
    if n_cand_below:
        facts += (
            f"; candidate below its floor in {n_cand_below} of {len(cand)} repeat(s) "
            f"(no rate down to {max(b for b in cand_below if b is not None):.3g} req/s held the SLA)"
        )
    if unbounded:
        facts += f"; candidate sweeps {unbounded} never broke the SLA (capacity is a lower bound)"
    bound = None
    if base_below and n_cand_below:
        verdict, why = "same", "both baseline and candidate fell below their floors in some repeat: no comparison"
    elif base_below:
        ref, ref_max = float(base_up.mean()), float(base_up.max())
        ratio, bound = c_mean / ref, "lower"
        if c_mean > ref * (1 + thr) and float(cand.min()) > ref_max:
            verdict = "better"
            why = (
                f"baseline at most {ref:.3g} req/s (floor bounds), candidate {c_mean:.3g}: at least "
                f"x{ratio:.2f} ({_pct(ratio)}) > {thr:.1%} and every repeat > the baseline's bound"
            )
        else:
            verdict = "same"
            why = (
                f"baseline below its floor (at most {ref:.3g} req/s); the candidate does not clear that bound "
                f"by the noise threshold in every repeat"
            )
    elif n_cand_below:
        up = float(cand_up.mean())
        ratio, bound = (up / b_mean, "upper") if b_mean > 0 else (None, None)
        if b_mean > 0 and up < b_mean * (1 - thr) and float(cand_up.max()) < b_min:
            verdict = "worse"
            why = (
                f"candidate at most {up:.3g} req/s (floor bounds): at most x{ratio:.2f} ({_pct(ratio)}), "
                f"below -{thr:.1%} and every repeat < baseline min"
            )
        else:
            verdict = "same"
            why = "candidate below its floor in some repeat, but its bound does not clear the noise floor"
    elif b_mean <= 0:
        verdict, why = "same", "baseline capacity 0 with no floor bound recorded: no ratio"
    elif c_mean > b_mean * (1 + thr) and float(cand.min()) > b_max:
        verdict = "better"
        why = f"mean {_pct(c_mean / b_mean)} > {thr:.1%} and every repeat > baseline max"
    elif c_mean < b_mean * (1 - thr) and float(cand.max()) < b_min:
        verdict = "worse"
        why = f"mean {_pct(c_mean / b_mean)} < -{thr:.1%} and every repeat < baseline min"
    else:
        verdict = "same"
        why = "change within the noise floor or not repeated by every candidate sweep"
    return Comparison(verdict=verdict, evidence=f"{why}. {facts}", capacity_ratio=ratio, ratio_bound=bound, **common)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _has_samples(sweeps: list[SweepResult]) -> bool:
    steps = [st for s in sweeps for st in s.steps if st.validity == "valid"]
    return bool(steps) and all(st.sla_samples for st in steps)


def _priors(floor: NoiseFloor, cand_steps: list[list]) -> tuple[dict[str, tuple[float, float]], str | None]:
    """The between-run variance each estimator's verdict starts from, and what it says of the noise classes.
    A candidate the baseline's own SLA target limits has the baseline's class noise; one another target
    limits (or whose class is not resolved: "any") adds its class's variance to the baseline's
    (loadgen.noise_prior.combine), since the paired difference is as noisy as both sides together."""
    from loadgen.noise_prior import combine, limiting_target

    own = {
        "crossing": (floor.between_var or 0.0, floor.between_df),
        "service_rate": (floor.service_between_var or 0.0, floor.service_between_df),
    }
    if floor.limiting is None or not floor.class_noise:
        return own, None
    theirs = limiting_target(cand_steps)
    if theirs == floor.limiting:
        return own, f"both sides limited by {theirs}: that class's noise"
    cls = theirs if theirs in floor.class_noise else "any"
    other = floor.class_noise.get(cls, {})
    # "any" holds the baseline's own evidence too: not independent of it, so no more df than either side
    combined = {e: combine(own[e], tuple(other[e]), shared=cls == "any") if e in other else own[e] for e in own}
    said = f"candidate limited by {theirs}" if theirs else "the candidate's limiting target not resolved"
    source = f"the {theirs} class's noise" if cls == theirs else "every class's noise pooled"
    return combined, f"{said}, baseline by {floor.limiting}: both sides' variances ({source} for the candidate)"


def _interval_compare(
    noise_floor: NoiseFloor, candidate_sweeps: list[SweepResult], final: bool, futility: bool = True
) -> Comparison:
    """The interval verdict (loadgen.verdict) of candidate sweeps against a baseline measured with
    per-request samples: effect, interval, minimum detectable effect; ``decided`` is False while the
    interval still straddles the decision (the harness may add a repeat)."""
    from loadgen.judge import judge
    from loadgen.verdict import LOOKS

    cand_steps = [[st for st in s.steps if st.validity == "valid"] for s in candidate_sweeps]
    priors, noise_said = _priors(noise_floor, cand_steps)
    stats = judge(
        noise_floor.steps,
        cand_steps,
        estimator=noise_floor.estimator,
        max_rounds=len(cand_steps) + (0 if final else 1),
        looks=LOOKS,
        crossing_prior=priors["crossing"],
        service_prior=priors["service_rate"],
        futility=futility,  # a campaign spends a repeat only while a gain is in sight (loadgen.verdict)
    )
    decided = stats.verdict != "undecided"
    verdict = "same" if not decided else stats.verdict
    # a crossing beyond every tested rate is estimated as inf: the record keeps the sweeps' ladder capacity
    # instead (JSON has no infinity: it would be written as null and the state would not load again)
    by_service = stats.decided_by == "service rate"  # its rates are served req/s, not SLA capacities
    baseline_rps = noise_floor.capacity_fit_rps if by_service else _finite(stats.baseline_rps)
    baseline_rps = noise_floor.capacity_mean if baseline_rps is None else baseline_rps
    if verdict == "invalid":
        return Comparison(
            verdict="invalid",
            evidence=stats.reason or "invalid",
            invalid_reason=stats.reason,
            capacity_ratio=None,
            baseline_capacity=noise_floor.capacity_mean,
            candidate_capacities=[s.capacity_rps or 0.0 for s in candidate_sweeps],
            threshold=noise_floor.threshold,
            baseline_capacities=list(noise_floor.capacities),
        )
    per_sweep = [
        s.capacity_fit_rps if s.capacity_fit_rps is not None else (s.capacity_rps or 0.0) for s in candidate_sweeps
    ]
    if stats.effect is not None:
        ratio = 1 + stats.effect
    elif verdict == "better" and stats.low is not None:
        ratio = 1 + stats.low  # a crossing beyond the tested rates: the ratio is a lower bound (ratio_bound)
    elif verdict == "worse" and stats.high is not None:
        ratio = 1 + stats.high
    else:
        ratio = None
    head = stats.sentence() if decided else f"undecided so far: {stats.sentence().split(': ', 1)[-1]}"
    evidence = (
        f"{head}. baseline {stats.baseline} over {len(noise_floor.steps)} sweep(s); candidate "
        f"{stats.candidate} over {len(cand_steps)} sweep(s); between-run sd of a paired difference "
        f"{math.sqrt(priors['crossing'][0]):.1%} ({priors['crossing'][1]:.3g} df)"
    )
    if noise_floor.estimator == "service_rate":
        evidence += (
            f", of the service rate {math.sqrt(priors['service_rate'][0]):.1%} ({priors['service_rate'][1]:.3g} df)"
        )
    if noise_said:
        evidence += f" ({noise_said})"
    if stats.reason:
        evidence += f"; {stats.reason}"
    return Comparison(
        verdict=verdict,
        capacity_ratio=_finite(ratio),
        baseline_capacity=baseline_rps,
        candidate_capacities=per_sweep,
        threshold=_finite(stats.mde) if _finite(stats.mde) is not None else noise_floor.threshold,
        evidence=evidence,
        baseline_capacities=list(noise_floor.capacities),
        candidate_mean=float(np.mean(per_sweep)) if by_service else _finite(stats.candidate_rps),
        effect=_finite(stats.effect),
        effect_low=_finite(stats.low),
        effect_high=_finite(stats.high),
        mde=_finite(stats.mde),
        decided=decided,
        decided_by=stats.decided_by or "SLA crossing",
        confidence=stats.confidence,
        disagreement=stats.disagreement,
        ratio_bound=None
        if stats.effect is not None or ratio is None
        else ("lower" if verdict == "better" else "upper"),
    )
