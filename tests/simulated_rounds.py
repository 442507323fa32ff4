"""Paired rounds on the simulated engine of known capacity, in virtual time: the measuring instrument the
verdict tests share (test_verdict_power, test_futility)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loadgen import simengine
from loadgen.capacity import estimate
from loadgen.verdict import between_variance, round_differences
from specs.config import SLASpec

SLA = SLASpec(ttft_ms=300, itl_ms=50, max_error_rate=0.01)


def workload(seed: int, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths (tokens) of ``n`` requests."""
    rng = np.random.default_rng(seed)
    prompts = rng.lognormal(math.log(300), 0.6, n).astype(int) + 8
    return prompts, rng.integers(16, 65, n)


@dataclass
class SimulatedRounds:
    base: simengine.ServiceModel
    prompts: np.ndarray
    outputs: np.ndarray
    step_s: float = 6.0

    def sweep(self, model, rates, round_index, seed, side):
        """One side's sweep of a round: a fresh engine start, the round's schedules (shared by both sides)."""
        start = model.started(seed * 1000 + round_index * 2 + (side == "B"))
        return [
            simengine.virtual_step(
                start,
                r,
                self.step_s,
                self.prompts,
                self.outputs,
                SLA,
                seed=seed * 7919 + int(r * 1000) + round_index,
                run_seed=seed * 31 + k + (side == "B") * 17,
            )
            for k, r in enumerate(rates)
        ]

    def capacity(self) -> float:
        """The base model's capacity measured at length (long virtual steps)."""
        steps = [
            simengine.virtual_step(self.base, 25 * f, 300.0, self.prompts, self.outputs, SLA, seed=900 + k, run_seed=k)
            for k, f in enumerate(np.linspace(0.8, 1.2, 7))
        ]
        return estimate(steps, boot=0).capacity

    def prior(self, capacity: float) -> tuple[float, int]:
        """The noise floor's A/A rounds: the between-run variance of a paired difference."""
        rates = [capacity * f for f in (0.8, 0.9, 1.0, 1.1, 1.2)]
        a = [self.sweep(self.base, rates, i, 500, "A") for i in range(6)]
        b = [self.sweep(self.base, rates, i, 500, "B") for i in range(6)]
        return between_variance(round_differences(a, b))
