"""Noise floor: how much the untouched baseline's capacity and latencies move between identical sweeps.

The relative threshold a change must exceed to count is

    threshold = max(2 * cv, rel_spread, min_rel)

with cv = sample std / mean of the K capacities, rel_spread = (max - min) / mean, and
min_rel = 5 % (a floor so that K identical capacities, std 0, do not make any wiggle count).
Why 2 x cv: a verdict of better also needs every candidate repeat above the baseline's max, and
the research loop's confirmation needs every repeat beyond the threshold on its own; with K = 3
(std from 2 degrees of freedom) one repeat clears 2 x cv by chance about 9 % of the time, two
repeats under 1 %. 3 x cv asked for gains of +60 % on a one-rung-noisy ladder and missed real ones.

A repeat in which no rate held the SLA (down to the sweep's floor) has capacity 0.0 and its bound
in ``capacity_below`` (the capacity lies below it); :func:`reference_capacity` gives the number to
take ratios against, and says when it is only an upper bound.
"""

from __future__ import annotations


import numpy as np

from loadgen.host_elasticity import host_adjustment
from loadgen.noise_prior import NoisePrior, noise_class, pool, repeat_evidence
from loadgen.results import AAEvidence, NoiseFloor, SweepResult

MIN_REL = 0.05


def rate_key(rate: float) -> str:
    return f"{rate:g}"


def noise_floor(
    sweeps: list[SweepResult],
    min_rel: float = MIN_REL,
    prior: NoisePrior | None = None,
    candidate_rounds: int | None = None,
) -> NoiseFloor:
    """Spread of capacity and of per-rate latency percentiles over K baseline sweeps.

    ``prior``: the between-run noise the interval verdict starts from (the endpoint's earlier floors,
    :mod:`loadgen.noise_prior`); the default one when None. ``candidate_rounds``: the most sweeps a
    candidate judged against this floor gets (its MDE is that candidate's); K when None.

    Invalid sweeps make the noise floor invalid (their reasons are kept); a floor from fewer
    than two sweeps has no measured spread and uses ``min_rel`` only.
    """
    if not sweeps:
        raise ValueError("noise_floor needs at least one sweep")
    invalid = [f"{s.label or i}: {s.invalid_reason}" for i, s in enumerate(sweeps) if s.validity != "valid"]
    invalid += [
        f"{s.label or i}: capacity {s.capacity_rps} is not a number"
        for i, s in enumerate(sweeps)
        if s.capacity_rps is not None and not np.isfinite(s.capacity_rps)
    ]
    caps = np.array([s.capacity_rps or 0.0 for s in sweeps], dtype=np.float64)
    mean = float(caps.mean())
    std = float(caps.std(ddof=1)) if caps.size > 1 else 0.0
    spread = float((caps.max() - caps.min()) / mean) if mean > 0 else 0.0
    cv = std / mean if mean > 0 else 0.0
    per_rate: dict[str, dict[str, float]] = {}
    rates = sorted({step.target_rate for s in sweeps for step in s.steps if step.validity == "valid"})
    for rate in rates:
        steps = [step for s in sweeps for step in s.steps if step.target_rate == rate and step.validity == "valid"]
        row: dict[str, float] = {"n": float(len(steps))}
        for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
            for level in ("p50", "p95", "p99"):
                values = np.array(
                    [
                        getattr(getattr(st, metric), level)
                        for st in steps
                        if getattr(getattr(st, metric), level) is not None
                    ],
                    dtype=np.float64,
                )
                if values.size:
                    name = f"{metric.removesuffix('_ms')}_{level}"
                    row[f"{name}_mean"] = float(values.mean())
                    row[f"{name}_std"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
                    row[f"{name}_min"] = float(values.min())
                    row[f"{name}_max"] = float(values.max())
        tput = np.array([st.throughput_rps for st in steps])
        row["throughput_mean"] = float(tput.mean())
        row["throughput_std"] = float(tput.std(ddof=1)) if tput.size > 1 else 0.0
        row["within_sla_fraction"] = float(np.mean([st.within_sla for st in steps]))
        per_rate[rate_key(rate)] = row
    threshold = max(2 * cv, spread, min_rel)
    interval = _interval_inputs(sweeps, prior or NoisePrior(), candidate_rounds) if not invalid else {}
    if interval.get("mde") is not None and np.isfinite(interval["mde"]):
        threshold = interval["mde"]  # the smallest effect the interval verdict can see (loadgen.verdict)
    return NoiseFloor(
        repeats=len(sweeps),
        capacities=caps.tolist(),
        capacity_mean=mean,
        capacity_std=std,
        capacity_rel_spread=spread,
        per_rate=per_rate,
        threshold=threshold,
        **interval,
        validity="invalid" if invalid else "valid",
        invalid_reason="; ".join(invalid) if invalid else None,
        labels=[s.label for s in sweeps],
        capacity_below=[_below(s) for s in sweeps],
    )


def _interval_inputs(sweeps: list[SweepResult], prior: NoisePrior, candidate_rounds: int | None = None) -> dict:
    """What the interval verdict needs from the baseline: its steps, the A/A between-run variance of its
    repeats pooled with the endpoint's prior (per estimator), and the minimum detectable effect. {} for
    sweeps without samples."""
    from loadgen.capacity import estimate
    from loadgen.queue_rate import service_rate
    from loadgen.verdict import ALPHA, LOOKS, floor_mde

    steps = [[st for st in s.steps if st.validity == "valid"] for s in sweeps if s.mode == "rate"]
    if not steps or not all(st.sla_samples for r in steps for st in r):
        return {}
    estimator = sweeps[0].estimator
    fit = estimate([st for r in steps for st in r])
    limiting = noise_class(fit)
    mine = prior.for_limit(limiting)  # a floor pools the evidence of its own noise class only
    own = [repeat_evidence(steps, "crossing", limiting)]
    var, df = pool(own[0], mine.crossing)
    k = len(steps)

    def mdes(alpha: float, *estimates) -> tuple[float | None, float | None]:
        """(the MDE, the least MDE one more sweep could give) over ``estimates`` of (estimate, var, df):
        that sweep at the mean adds a df and no spread, and its steps (as many requests as each earlier
        sweep's) shrink the estimate's own error at best to k / (k + 1) of it, as exact slopes would."""
        now = [
            floor_mde(e, k, v, d, looks=LOOKS, alpha=alpha, candidate_rounds=candidate_rounds) for e, v, d in estimates
        ]
        best = [
            floor_mde(
                e,
                k + 1,
                v * d / (d + 1),
                d + 1,
                looks=LOOKS,
                alpha=alpha,
                candidate_rounds=candidate_rounds,
                own_scale=k / (k + 1),
            )
            for e, v, d in estimates
        ]
        # never above the MDE now: where the slopes' own error decides (the normal quantile), a projection the
        # runs' spread decides (Student's t) could read higher though both errors shrink
        best = [b if n is None or b is None else min(b, n) for n, b in zip(now, best)]
        now, best = [m for m in now if m is not None], [m for m in best if m is not None]
        return (min(now) if now else None), (min(best) if best else None)

    mde, mde_next = mdes(ALPHA, (fit, var, df))
    out = {
        "steps": steps,
        "estimator": estimator,
        "between_var": var,
        "between_df": df,
        "capacity_fit_rps": fit.capacity if fit and not fit.censored else None,
        "prior_source": mine.source,
        "limiting": limiting,
    }
    if estimator == "service_rate":  # both tests at alpha / 2 (loadgen.judge): either one's MDE bounds it
        out["mde_crossing_alone"] = mde  # the crossing's alone, at the full alpha (a change ITL limits)
        served = service_rate([st for r in steps for st in r], host=host_adjustment(steps, steps))
        own.append(repeat_evidence(steps, "service_rate", limiting))
        s_var, s_df = pool(own[1], mine.service_rate)
        mde, mde_next = mdes(ALPHA / 2, (fit, var, df), (served, s_var, s_df))
        out |= {
            "service_between_var": s_var,
            "service_between_df": s_df,
            "service_rate_rps": served.rate if served else None,
        }
    out |= {"mde": mde, "mde_next_best": mde_next}
    out["class_noise"] = _class_noise(prior, own, limiting)
    return out | {"aa_evidence": own}


def _class_noise(prior: NoisePrior, own: list[AAEvidence], limiting: str | None) -> dict:
    """Per noise class the endpoint has evidence of, and "any" (every class pooled, for a candidate whose
    class is unknown): [variance of a paired difference, df] per estimator, with this floor's own
    evidence in its class and in "any". What a verdict needs for a candidate another target limits."""
    out = {}
    for cls in [*prior.classes(), "any"]:
        if cls == limiting:
            continue
        theirs = prior.for_limit(None if cls == "any" else cls)
        # "any" holds this floor too; another class's variance is that class's alone
        out[cls] = {
            ev.estimator: pool(
                ev if cls == "any" else AAEvidence(estimator=ev.estimator), getattr(theirs, ev.estimator)
            )
            for ev in own
        }
    return out


def _below(sweep: SweepResult) -> float | None:
    return sweep.capacity_below_rps if not sweep.capacity_rps and sweep.capacity_below_rps else None


def upper_capacities(floor: NoiseFloor) -> list[float]:
    """Per repeat: the capacity, or for a repeat below its floor the rate it is below (an upper bound)."""
    below = list(floor.capacity_below) + [None] * (len(floor.capacities) - len(floor.capacity_below))
    return [b if b is not None else c for c, b in zip(floor.capacities, below)]


def reference_capacity(floor: NoiseFloor) -> tuple[float, bool]:
    """(capacity, is_upper_bound): the mean capacity to take gains against. When some repeat had no
    rate within the SLA, its bound stands in and the mean is an upper bound (a gain against it is a
    lower bound, and finite)."""
    values = upper_capacities(floor)
    return (float(np.mean(values)) if values else 0.0, any(b is not None for b in floor.capacity_below))
