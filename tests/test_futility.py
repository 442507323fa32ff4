"""Futility stops on the simulated engine of known capacity (virtual time, several seeds): an early look with
no gain in sight ends as ``same`` and says so, A/A trials stop sooner and are never judged better or worse
more often, and a real gain is not cut short."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from loadgen import simengine
from loadgen.sequential import sequential_verdict
from loadgen.verdict import FUTILITY_SHARE, judge_rounds
from simulated_rounds import SimulatedRounds, workload

# more between-run jitter than test_verdict_power's engine: first looks that do not decide, as on a CPU host
BASE = simengine.ServiceModel(run_jitter_cv=0.04)
ROUNDS = SimulatedRounds(BASE, *workload(11))
_sweep = ROUNDS.sweep


@pytest.fixture(scope="module")
def capacity() -> float:
    return ROUNDS.capacity()


@pytest.fixture(scope="module")
def prior(capacity) -> tuple[float, int]:
    return ROUNDS.prior(capacity)


def _trial(effect: float, seed: int, capacity: float, prior, futility: bool):
    candidate = BASE.planted(effect)

    def measure(side, i, rates):
        return _sweep(BASE if side == "A" else candidate, rates, i, seed, side)

    judge = partial(judge_rounds, futility=futility)
    return sequential_verdict(measure, capacity, seed=seed, prior_var=prior[0], prior_df=prior[1], judge=judge)[0]


def test_aa_trials_stop_sooner_and_are_not_judged_better_or_worse_more_often(capacity, prior):
    plain = [_trial(0.0, seed, capacity, prior, futility=False) for seed in range(1, 13)]
    futile = [_trial(0.0, seed, capacity, prior, futility=True) for seed in range(1, 13)]
    false = [sum(s.verdict in ("better", "worse") for s in group) for group in (plain, futile)]
    assert false[1] <= max(false[0], 1), [s.sentence() for s in futile]
    assert np.mean([s.rounds for s in futile]) < np.mean([s.rounds for s in plain]) - 0.5
    stopped = [s for s in futile if s.stopped == "futile"]
    assert stopped, [s.sentence() for s in futile]
    for s in stopped:  # a futile stop is a `same` that says why, with the effect under a third of its MDE
        assert s.verdict == "same" and "no gain in sight" in s.sentence()
        assert math.log1p(s.effect) < FUTILITY_SHARE * math.log1p(s.mde)


def test_a_real_gain_is_not_cut_short(capacity, prior):
    plain = [_trial(0.3, seed, capacity, prior, futility=False) for seed in range(1, 9)]
    futile = [_trial(0.3, seed, capacity, prior, futility=True) for seed in range(1, 9)]
    assert sum(s.verdict == "better" for s in futile) >= sum(s.verdict == "better" for s in plain) - 1
    assert sum(s.verdict == "better" for s in futile) >= 6, [s.sentence() for s in futile]
    assert not any(s.stopped == "futile" for s in futile)


def test_a_loss_is_never_called_a_gain_and_costs_fewer_rounds(capacity, prior):
    plain = [_trial(-0.2, seed, capacity, prior, futility=False) for seed in range(1, 9)]
    futile = [_trial(-0.2, seed, capacity, prior, futility=True) for seed in range(1, 9)]
    assert not any(s.verdict == "better" for s in futile)
    assert all(s.verdict == "worse" or s.stopped == "futile" for s in futile), [s.sentence() for s in futile]
    assert sum(s.rounds for s in futile) <= sum(s.rounds for s in plain)


def test_the_final_look_is_never_futile(capacity, prior):
    rates = [capacity * f for f in (0.8, 0.9, 1.0, 1.1, 1.2)]
    a, b = [_sweep(BASE, rates, 0, 5, "A")], [_sweep(BASE, rates, 0, 5, "B")]
    last = judge_rounds(a, b, prior_var=prior[0], prior_df=prior[1], final=True, futility=True)
    assert last.stopped != "futile" and last.verdict in ("same", "better", "worse")
