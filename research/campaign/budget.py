"""The campaign's budget: its limits, the time an experiment is expected to take, the launch check
before every experiment, and charging what a measurement cost.

The launch check counts the campaign's deadline and GPU-hour budget (an end reason when the next
experiment cannot fit) and this call's own time window (``stop_after_s``: :class:`Paused`, the
campaign resumes from its state file next time).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from loadgen.replay import replay_seconds
from loadgen.step import drain_cap
from specs.config import CampaignSpec, EndpointSpec
from research.campaign.context import CampaignContext
from research.harness import CandidateResult
from research.state import CampaignState, StateStore


@dataclass(frozen=True)
class Limits:
    """Budget of one campaign: the tighter of the campaign's and the endpoint's declarations."""

    deadline_s: float
    gpu_hours: float
    units: int  # GPUs charged per wall-clock hour (a CPU host counts as 1)

    @classmethod
    def of(cls, campaign: CampaignSpec, endpoint: EndpointSpec) -> "Limits":
        return cls(
            deadline_s=60 * min(campaign.deadline_minutes, endpoint.budget.wall_clock_minutes),
            gpu_hours=min(campaign.gpu_hours, endpoint.budget.gpu_hours),
            units=endpoint.hardware.capacity_divisor,
        )


#: before this campaign has measured anything: a launch, and per step its duration plus warm-up and
#: drain (a GPU step took ~77 s for 15 s of load before drains were capped: be pessimistic)
PRIOR_STARTUP_S = 60.0
PRIOR_STEP_OVERHEAD = 1.6
PRIOR_STEP_EXTRA_S = 10.0


def estimate_seconds(state: CampaignState, endpoint: EndpointSpec, sweeps: int, launches: int = 1) -> float:
    """Expected wall time of ``launches`` engine starts and ``sweeps`` sweeps.

    Uses this campaign's own measurements (engine start, whole sweeps with their warm-ups and
    drains) as soon as it has any; before that, a pessimistic prior from the sweep spec."""
    startup = (sum(state.startup_s) / len(state.startup_s)) if state.startup_s else PRIOR_STARTUP_S
    if state.sweep_s:
        per_sweep = max(state.sweep_s[-6:])  # recent sweeps; the slowest, since ladders differ in length
    else:
        steps = (
            (len(endpoint.sweep.rates) + endpoint.sweep.refine_steps)
            if endpoint.sweep.rates
            else endpoint.sweep.max_steps
        )
        per_sweep = steps * (endpoint.sweep.step_duration_s * PRIOR_STEP_OVERHEAD + PRIOR_STEP_EXTRA_S)
    return launches * startup + sweeps * per_sweep


def budget_problem(
    state: CampaignState,
    store: StateStore,
    limits: Limits,
    estimate_s: float,
    running_s: float = 0.0,
    reserved_s: float = 0.0,
    what: str = "the next experiment",
) -> str | None:
    """Why the next experiment must not start (launch check), or None when it fits.

    ``running_s``: estimated seconds of the experiments still running beside it (parallel candidates);
    not charged yet, their GPU-hours are counted as committed. ``reserved_s``: kept back for what must
    run after it (the production-shaped verification)."""
    elapsed = store.elapsed_s(state)
    kept = f", {reserved_s / 60:.1f} min kept for the production-shaped verification" if reserved_s else ""
    if elapsed + estimate_s + reserved_s > limits.deadline_s:
        return (
            f"deadline: {what} (about {estimate_s / 60:.1f} min) would not finish within the "
            f"{limits.deadline_s / 60:.0f} min deadline ({elapsed / 60:.1f} min used{kept})"
        )
    cost = (estimate_s + reserved_s) / 3600 * limits.units
    committed = state.gpu_hours_used + running_s / 3600 * limits.units
    if committed + cost > limits.gpu_hours:
        return (
            f"budget: {what} (about {estimate_s / 3600 * limits.units:.3f} GPU-h) would exceed the "
            f"{limits.gpu_hours} GPU-h budget ({state.gpu_hours_used:.3f} used"
            + (f", {committed - state.gpu_hours_used:.3f} running" if running_s else "")
            + kept
            + ")"
        )
    return None


class Paused(Exception):
    """This call's time window is spent; the campaign resumes from its state file next time."""


class Budget:
    """One call's budget keeper: the launch check before each experiment, and the charge after it."""

    def __init__(
        self,
        ctx: CampaignContext,
        limits: Limits,
        stop_after_s: float | None,
        call_started: float,
        production_check: bool = True,
    ):
        self.ctx, self.limits = ctx, limits
        self.stop_after_s, self.call_started = stop_after_s, call_started
        self.production_check = production_check  # False: nothing is measured at the end (no engine of ours)

    def estimate(self, sweeps: int) -> float:
        """Expected seconds of one engine start and ``sweeps`` sweeps (:func:`estimate_seconds`)."""
        return estimate_seconds(self.ctx.state, self.ctx.endpoint, sweeps)

    def production_check_s(self) -> float:
        """Expected seconds of the production-shaped verification at the end, 0 when none is declared:
        two engine starts, and each configuration's replay of the pool's first ``production_check_s``
        seconds, whose sessions run on to their last turn (loadgen.replay.replay_seconds), with the warm-up
        burst before it (kept as ``sweep.warmup_timeout_s``, the bound of a sweep's burst: the replay's own
        burst is neither clipped nor cut, so this is an estimate) and a step's drain for the last replies
        (run 22 kept 4.1 min without the warm-up, and the verification took 4.9)."""
        seconds = self.ctx.campaign.production_check_s
        if seconds <= 0 or not self.production_check:
            return 0.0
        endpoint = self.ctx.endpoint
        sweep = endpoint.sweep
        replay = sweep.warmup_timeout_s + replay_seconds(self.ctx.pool, seconds) + drain_cap(endpoint.sla, sweep)
        return estimate_seconds(self.ctx.state, endpoint, 0, launches=2) + 2 * replay

    def check(self, estimate_s: float, running_s: float = 0.0) -> str | None:
        """The launch check before an experiment: an end reason when the campaign's deadline or budget
        cannot fit it with the production-shaped verification after it (so that a campaign that adopts a
        change can still show it in production shape); raises Paused when only this call's window
        (``stop_after_s``) cannot."""
        problem = budget_problem(
            self.ctx.state, self.ctx.store, self.limits, estimate_s, running_s, reserved_s=self.production_check_s()
        )
        if problem is None and self.stop_after_s is not None:
            used = time.monotonic() - self.call_started
            # a call's window must also hold a soak (a winner, or any candidate of an unstable baseline,
            # is soaked): an experiment cut by the window's end is lost, a paused one is not. One hold:
            # the soak begins no back-off past the window's end (window_end, loadgen.soak.run_soak)
            need = estimate_s + self.ctx.endpoint.soak.pass_s
            if used + need > self.stop_after_s:
                raise Paused(
                    f"paused: the next experiment (about {need / 60:.1f} min with its soak) does not fit the "
                    f"{max(0.0, self.stop_after_s - used) / 60:.1f} min left of this call's "
                    f"{self.stop_after_s / 60:.1f} min; run the campaign again to resume"
                )
        return problem

    def window_end(self) -> float:
        """When the measuring must end (``time.monotonic()``): the earlier of this call's window and the
        campaign's deadline less the production-shaped verification's time. The harness begins no extra
        repeat and the soak no back-off past it."""
        now = time.monotonic()
        left = self.limits.deadline_s - self.ctx.store.elapsed_s(self.ctx.state) - self.production_check_s()
        ends = [now + left]
        if self.stop_after_s is not None:
            ends.append(self.call_started + self.stop_after_s)
        return min(ends)

    def cost_hours(self, wall_s: float) -> float:
        """GPU-hours of ``wall_s`` seconds of measurement."""
        return wall_s / 3600 * self.limits.units

    def charge(self, result: CandidateResult) -> None:
        """Charge a measurement to the budget and keep its timings for the estimator."""
        state = self.ctx.state
        state.gpu_hours_used += self.cost_hours(result.wall_s)
        if result.startup_s is not None:
            state.startup_s.append(round(result.startup_s, 2))
        state.sweep_s.extend(round(t, 2) for t in result.sweep_wall_s)
