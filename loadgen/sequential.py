"""The sequential driver: measure baseline and candidate in interleaved rounds until the verdict decides.

The verdict itself (the test, its error rate, the minimum detectable effect) is :mod:`loadgen.verdict`;
this module spends the rounds: A B, B A, ... on the same requests and schedules, each round's rates
recentred on the capacities measured so far, stopping at the first decided look, at ``max_rounds``, or
when the caller's time runs out. Benchmarks and tests drive it; a campaign's harness takes its repeats
one sweep at a time (:mod:`loadgen.compare`) and judges them with the same functions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from loadgen.results import StepResult
from loadgen.verdict import ALPHA, VerdictStats, judge_rounds

#: (side "A"/"B", round index, rates) -> the steps of one sweep at those rates
MeasureFn = Callable[[str, int, list[float]], list[StepResult]]


def default_grid(capacity_guess: float, factors: tuple[float, ...] = (0.6, 0.8, 1.0, 1.2, 1.4)) -> list[float]:
    """Rates around a capacity guess: where the fitted crossing is best resolved (+-40%)."""
    return [float(f"{capacity_guess * f:.4g}") for f in factors]


#: After the first round, rates around what it measured (+-20%): the steps near the crossing are
#: those whose requests say where it lies; the first round's wider grid allowed for a poor guess.
RECENTRED = (0.8, 0.9, 1.0, 1.1, 1.2)


def _recentred(rates: list[float], stats: VerdictStats, factors: tuple[float, ...] = RECENTRED) -> list[float]:
    """The next round's rates: around the geometric mean of the two capacities measured so far, when
    both are resolved inside the tested rates; else the rates so far, widened where a crossing lies
    outside them. The same for both sides of the round, so they still share schedules."""
    a, b = stats.baseline_rps, stats.candidate_rps
    resolved = stats.baseline_censored is None and stats.candidate_censored is None
    if resolved and a and b and math.isfinite(a) and math.isfinite(b):
        return default_grid(math.sqrt(a * b), factors)
    return _widen(rates, stats)


def sequential_verdict(
    measure: MeasureFn,
    capacity_guess: float,
    *,
    alpha: float = ALPHA,
    max_rounds: int = 4,
    min_rounds: int = 1,
    equivalence: float = 0.02,
    seed: int = 0,
    prior_var: float = 0.0,
    prior_df: float = 0,
    progress: Callable[[str], None] | None = None,
    time_left: Callable[[], float] | None = None,
    measured: dict[str, list[list[StepResult]]] | None = None,
    recentre: bool = True,
    recentred: tuple[float, ...] = RECENTRED,
    judge: Callable[..., VerdictStats] = judge_rounds,
) -> tuple[VerdictStats, dict]:
    """Measure A and B in interleaved rounds (A B, B A, ...) until the verdict is decided.

    ``recentre``: after each undecided round, the next one's rates sit around the capacities measured
    so far (``recentred``, factors of their geometric mean), not around the first guess.

    ``judge``: the estimator's judgement, :func:`judge_rounds` (the SLA crossing) or
    :func:`judge_service_rates` (the service rate from queue growth).

    ``measured``: rounds already measured (a verdict resumed after a call's time limit, on fresh
    engines). They count as this verdict's first rounds and their looks as early looks: an earlier
    stop for time judged them at the laxer final level and did not decide, so it does not decide at
    an early look's level either, and the error rate over all looks stays at most ``alpha``.

    ``time_left``: seconds the caller can still spend; a round is not begun when the last one took
    longer than that, and the rounds measured so far are judged as final (their error rate is that
    of the last look, so a budget cut never inflates it).

    Returns the verdict and the steps measured per side ({"A": [[steps of round 1], ...], "B": ...}).
    A step that is invalid (crash, client behind) makes the verdict invalid with its reason."""
    rates = default_grid(capacity_guess)
    rounds: dict[str, list[list[StepResult]]] = {
        "A": list((measured or {}).get("A", [])),
        "B": list((measured or {}).get("B", [])),
    }
    first = min(len(rounds["A"]), len(rounds["B"]))
    rounds = {side: steps[:first] for side, steps in rounds.items()}
    stats = VerdictStats(verdict="invalid", reason="no round measured")

    def look(look_seed: int, final: bool = False) -> VerdictStats:
        """The verdict on every round measured so far."""
        return judge(
            rounds["A"],
            rounds["B"],
            alpha=alpha,
            max_rounds=max_rounds,
            equivalence=equivalence,
            final=final,
            seed=look_seed,
            prior_var=prior_var,
            prior_df=prior_df,
        )

    if first:
        stats = look(seed + first - 1)
        if stats.verdict != "undecided":
            return stats, rounds
        for steps in rounds["A"] + rounds["B"]:  # the resumed rounds' rates, widenings included
            rates = sorted(set(rates) | {s.target_rate for s in steps})
        if recentre:
            rates = _recentred(rates, stats, recentred)
    round_s = 0.0
    for i in range(first, max_rounds):
        if i >= min_rounds and time_left is not None and time_left() < round_s:
            stats = look(seed + i, final=True)
            if progress:
                progress(f"out of time after {i} round(s): {stats.sentence()}")
            return stats.model_copy(update={"verdict": "same"} if stats.verdict == "undecided" else {}), rounds
        round_began = time.monotonic()
        for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
            steps = measure(side, i, list(rates))
            bad = next((s for s in steps if s.validity != "valid"), None)
            if bad is not None:
                reason = (
                    f"{'baseline' if side == 'A' else 'candidate'} round {i + 1} at {bad.target_rate:g} req/s: "
                    f"{bad.invalid_reason}"
                )
                return VerdictStats(verdict="invalid", rounds=i, stopped="invalid", reason=reason), rounds
            rounds[side].append(steps)
        round_s = time.monotonic() - round_began
        stats = look(seed + i, final=i + 1 == max_rounds)
        if progress and i + 1 >= min_rounds:
            progress(f"round {i + 1}: {stats.sentence()}")
        if stats.verdict != "undecided" and i + 1 >= min_rounds:
            return stats, rounds
        rates = _recentred(rates, stats, recentred) if recentre else _widen(rates, stats)
    return stats, rounds


def _widen(rates: list[float], stats: VerdictStats) -> list[float]:
    """Add a rate beyond the tested range on the side where a crossing lies outside it."""
    out = list(rates)
    for censored in (stats.baseline_censored, stats.candidate_censored):
        if censored == "above":
            out.append(float(f"{max(out) * 1.3:.4g}"))
        elif censored == "below":
            out.insert(0, float(f"{min(out) / 1.3:.4g}"))
    return sorted(set(out))
