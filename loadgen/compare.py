"""Verdict of a candidate against the baseline's noise floor: better / same / worse / invalid.

better: the candidates' mean capacity exceeds the baseline mean by more than the noise
        threshold (see loadgen.noise) AND every candidate repeat is above the baseline's max;
worse:  symmetric (mean below by more than the threshold AND every repeat below the baseline's min);
same:   anything else;
invalid: the noise floor or any candidate sweep is invalid (crash, errors, client fell behind).
"""

from __future__ import annotations

import numpy as np

from loadgen.results import Comparison, NoiseFloor, SweepResult


def compare(noise_floor: NoiseFloor, candidate_sweeps: list[SweepResult]) -> Comparison:
    if not candidate_sweeps:
        raise ValueError("compare needs at least one candidate sweep")
    base = np.array(noise_floor.capacities, dtype=np.float64)
    cand = np.array([s.capacity_rps or 0.0 for s in candidate_sweeps], dtype=np.float64)
    b_mean, c_mean = float(noise_floor.capacity_mean), float(cand.mean())
    ratio = c_mean / b_mean if b_mean > 0 else None
    thr = noise_floor.threshold
    common = dict(capacity_ratio=ratio, baseline_capacity=b_mean, candidate_capacities=cand.tolist(), threshold=thr,
                  baseline_capacities=base.tolist(), candidate_mean=c_mean)
    reasons = []
    if noise_floor.validity != "valid":
        reasons.append(f"baseline noise floor invalid: {noise_floor.invalid_reason}")
    for i, s in enumerate(candidate_sweeps):
        if s.validity != "valid":
            reasons.append(f"candidate sweep {s.label or i} invalid: {s.invalid_reason}")
    if reasons:
        reason = "; ".join(reasons)
        return Comparison(verdict="invalid", evidence=reason, invalid_reason=reason, **common)
    b_max, b_min = float(base.max()), float(base.min())
    unbounded = [s.label or str(i) for i, s in enumerate(candidate_sweeps) if not s.capacity_bounded]
    facts = (f"baseline capacity {b_mean:.3g} req/s (K={len(base)}, range {b_min:.3g}-{b_max:.3g}, "
             f"std {noise_floor.capacity_std:.2g}); candidate {c_mean:.3g} req/s over {len(cand)} repeat(s) "
             f"{[round(c, 3) for c in cand.tolist()]}; noise threshold {thr:.1%}")
    if unbounded:
        facts += f"; candidate sweeps {unbounded} never broke the SLA (capacity is a lower bound)"
    if c_mean > b_mean * (1 + thr) and float(cand.min()) > b_max:
        verdict = "better"
        why = f"mean +{(c_mean / b_mean - 1) if b_mean > 0 else float('inf'):.1%} > {thr:.1%} and every repeat > baseline max"
    elif c_mean < b_mean * (1 - thr) and float(cand.max()) < b_min:
        verdict = "worse"
        why = f"mean {(c_mean / b_mean - 1):.1%} < -{thr:.1%} and every repeat < baseline min"
    else:
        verdict = "same"
        why = "change within the noise floor or not repeated by every candidate sweep"
    return Comparison(verdict=verdict, evidence=f"{why}. {facts}", **common)
