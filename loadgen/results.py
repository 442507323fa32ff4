"""Result types of measurement runs: the contract between loadgen and everything that judges it.

All are pydantic models so a sweep can be written to JSON, stored in Dagster metadata and
in the research memory, and read back unchanged.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from specs.enums import Validity, Verdict


class RequestRecord(BaseModel):
    """What happened to one request. Times are seconds on the runner's monotonic clock."""

    request_id: str
    scheduled_s: float  # offset from run start when it should have been sent
    sent_s: float | None = None  # offset when it was actually dispatched (connection taken, or opening began)
    ttft_s: float | None = None
    itl_s: list[float] = Field(default_factory=list)  # every inter-token (inter-chunk) gap
    e2e_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    status: int | None = None  # HTTP status; None = never got one
    error: str | None = None
    connect_s: float | None = None  # time spent opening a new connection before the send (None: reused one)
    cut: bool = False  # still in flight at the step's drain deadline: cut, not an error (see loadgen.stats)
    # Closed-loop runs (loadgen.closedloop): the session (or user) and turn, and the turn's recorded
    # production arrival offset (session replay); scheduled_s is then the turn's due time.
    session: str | None = None
    turn: int | None = None
    recorded_s: float | None = None

    @property
    def send_lag_s(self) -> float | None:
        return None if self.sent_s is None else self.sent_s - self.scheduled_s

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200


class LatencySummary(BaseModel):
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None


class StepResult(BaseModel):
    """One held arrival rate of a sweep (or one whole replay run)."""

    target_rate: float  # req/s asked for
    achieved_rate: float  # req/s actually sent
    throughput_rps: float  # completed OK per second
    output_tokens_per_s: float = 0.0
    duration_s: float
    requests: int
    errors: int
    error_rate: float
    ttft_ms: LatencySummary
    itl_ms: LatencySummary
    e2e_ms: LatencySummary
    send_lag_ms: LatencySummary
    # Time per output token of each finished request, (E2E - TTFT) / (tokens - 1): the decode step as
    # the client sees it even where the stream delivers several tokens per event (ITL gaps of 0).
    tpot_ms: LatencySummary = Field(default_factory=LatencySummary)
    cached_prompt_fraction: float | None = None
    within_sla: bool
    sla_violations: list[str] = Field(default_factory=list)  # e.g. "ttft p95 812ms > 500ms"
    validity: Validity = "valid"
    invalid_reason: str | None = None
    engine_metrics: dict[str, float] = Field(default_factory=dict)  # deltas / means over the step
    records_path: str | None = None  # Parquet of RequestRecords, when kept
    # Added by the measurement engineer (extensions, nothing above renamed):
    metrics_samples: list[dict[str, float]] = Field(
        default_factory=list
    )  # /metrics gauges over the step, t = s from start
    send_lag_max_ms: float | None = None
    client_cpu_util: float | None = None  # client CPU seconds / wall seconds of the busiest sender
    senders: int = 1
    connections_opened: int = 0
    error_examples: list[str] = Field(default_factory=list)  # up to 5 distinct error texts
    started_at: float | None = None  # wall clock of the step's schedule start
    # Added for short steps (loadgen.sweep): requests cut at the drain deadline (and how many of them
    # before their first token), judged value / SLA limit per target (None = unresolved: worse than any
    # limit), and the step's wall seconds from idle wait to the end of its drain (warm-up included).
    cut_requests: int = 0
    cut_before_first_token: int = 0
    sla_ratios: dict[str, float | None] = Field(default_factory=dict)
    wall_s: float | None = None
    warmup_wall_s: float | None = None
    device_metrics: dict[str, float] = Field(default_factory=dict)  # NVML GPU telemetry over the step (engines.gpu)
    users: int | None = None  # concurrency mode: closed-loop users held (target_rate is then the rate they sent)
    # Per request and SLA target, values over the limit and of how many (loadgen.capacity.sla_samples):
    # what the capacity estimate fits and bootstraps.
    sla_samples: dict[str, list[float]] = Field(default_factory=dict)
    # TTFT growth per second of arrivals over the step, with its 95% interval and request count
    # (loadgen.queue_rate.ttft_growth): how fast the queue grew, the service-rate estimator's input.
    ttft_growth: dict[str, float] | None = None
    # Arrivals and departures over the step's second half, {arrived, departed, window_s}
    # (loadgen.sustained.backlog): a queue that grows inside the running batch, where TTFT hardly shows it.
    backlog: dict[str, float] | None = None
    # Seconds one core took to read a buffer past the caches, with the engine idle, just before the step and
    # just before the next one (or after the last) (loadgen.host_speed; sweeps with sweep.host_speed_probe):
    # how fast the shared host ran on either side of the step (the faster stands for it:
    # loadgen.queue_rate.step_host_s). Empty: not measured.
    host_memory_pass_s: list[float] = Field(default_factory=list)


class SweepResult(BaseModel):
    endpoint: str
    engine_args: list[str]
    launch_config_hash: str
    started_at: float
    steps: list[StepResult]
    knee_rate: float | None = None
    capacity_rps: float | None = None  # highest tested rate within SLA (0.0 when none was)
    capacity_per_gpu: float | None = None
    validity: Validity = "valid"
    invalid_reason: str | None = None
    client_max_rate: float | None = None  # from calibration, when known
    # Added by the measurement engineer:
    label: str | None = None  # e.g. "baseline#2" (repeats_label)
    sla: dict[str, float | None] = Field(default_factory=dict)
    arrival: str = "poisson"
    step_duration_s: float | None = None
    gpu_divisor: int = 1
    capacity_bounded: bool = True  # False when no tested rate broke the SLA (capacity is a lower bound)
    notes: list[str] = Field(default_factory=list)
    # Added for finite, finely resolved capacity (loadgen.sweep): capacity_rps is interpolated between
    # capacity_tested_rps (highest passing tested rate) and the first failure; capacity_below_rps is set
    # when no tested rate held (capacity_rps is then 0.0 and the capacity lies below it).
    capacity_tested_rps: float | None = None
    # "interpolated" | "tested" (no failure above) | "sustained" (the service rate of steps whose queue grew:
    # loadgen.sustained) | "below_floor" | "none_held"
    capacity_method: str | None = None
    capacity_below_rps: float | None = None
    min_rate: float | None = None  # the floor of the downward extension
    drain_s: float | None = None  # the drain cap steps ran under
    engine_startup_s: float | None = None  # seconds from launch to healthy, when the engine says
    wall_s: float | None = None  # the whole sweep, seconds
    # Concurrency mode (loadgen.closedloop): steps are numbers of closed-loop users, not rates.
    mode: Literal["rate", "users"] = "rate"
    capacity_users: int | None = None  # highest tested users within the SLA below the first failing count
    think_time_s: float | None = None  # think time the users kept (None: the pool's logged ones)
    # Capacity from every step (loadgen.capacity): the fitted SLA crossing with its 95% bootstrap interval.
    capacity_fit_rps: float | None = None
    capacity_fit_low: float | None = None
    capacity_fit_high: float | None = None
    # What the engine's evidence overlay counted by the sweep's end (cumulative since its start; None:
    # unmeasured): step-time breakdown, graph captures and their stalls, padded shapes, memory.
    engine_internals: dict | None = None
    estimator: str = "crossing"  # how verdicts on this sweep judge it (sweep.estimator, loadgen.judge)

    @property
    def valid(self) -> bool:
        return self.validity == "valid"

    def rates(self) -> list[float]:
        """The tested rates, in the order they were run (reuse them for identical repeats)."""
        return [s.target_rate for s in self.steps]


Estimator = Literal["crossing", "service_rate"]


class AAEvidence(BaseModel):
    """One floor's A/A evidence for one estimator: ``sum_sq`` is ``df`` times the variance of a paired
    log difference between two of its runs."""

    estimator: Estimator
    sum_sq: float = 0.0
    df: float = 0.0  # fractional where a fit on the same runs took some (loadgen.host_elasticity)
    sweeps: int = 0  # repeats with an estimate
    # the SLA target whose crossing limits the configuration (None: not resolved): what its noise is pooled by
    limiting: str | None = None
    # a prior's only: the variance a pool with it never falls below (a declared between-launch calibration:
    # a verdict compares launches, so no floor of its class is narrower than they were measured to be)
    least_var: float = 0.0

    @property
    def sd(self) -> float | None:
        return math.sqrt(self.sum_sq / self.df) if self.df else None


class NoiseFloor(BaseModel):
    """Spread of the untouched baseline over K identical sweeps."""

    repeats: int
    capacities: list[float]
    capacity_mean: float
    capacity_std: float
    capacity_rel_spread: float  # (max - min) / mean
    per_rate: dict[str, dict[str, float]] = Field(default_factory=dict)  # rate -> {"ttft_p95_std": ..}
    # Added by the measurement engineer:
    threshold: float = 0.05  # relative capacity change needed to leave the noise (see loadgen.noise)
    validity: Validity = "valid"
    invalid_reason: str | None = None
    labels: list[str | None] = Field(default_factory=list)
    capacity_below: list[float | None] = Field(default_factory=list)  # per repeat: no rate held, capacity < this
    # The interval verdict's inputs (loadgen.verdict): every repeat's steps, and the between-run variance
    # of a paired log-capacity difference (A/A pairs of these repeats pooled with the endpoint's prior).
    steps: list[list[StepResult]] = Field(default_factory=list)
    between_var: float | None = None
    between_df: float = 0
    mde: float | None = None  # minimum detectable effect of a candidate measured like this baseline
    # the least MDE one more sweep could give: one that adds a df and no spread (research.campaign.bench.tighten
    # takes no sweep that cannot bring the floor under its target)
    mde_next_best: float | None = None
    # estimator "service_rate": the MDE of a candidate judged by the SLA crossing alone, at the full alpha, as
    # one is where ITL, not a queue, sets the SLA limit the service rate would speak for (loadgen.judge)
    mde_crossing_alone: float | None = None
    capacity_fit_rps: float | None = None
    estimator: str = "crossing"  # the sweeps' sweep.estimator (loadgen.judge)
    # the service rate's A/A spread (estimator "service_rate"), as between_var/between_df are the crossing's
    service_between_var: float | None = None
    service_between_df: float = 0
    service_rate_rps: float | None = None
    # the floor's own A/A evidence per estimator (loadgen.noise_prior), which later floors of the endpoint pool
    # in, and where its prior came from
    aa_evidence: list[AAEvidence] = Field(default_factory=list)
    prior_source: str | None = None
    # the SLA target that limits this baseline (its noise class: loadgen.noise_prior), and the endpoint's
    # between-run variance per class and estimator, [var, df], for a candidate another target limits
    limiting: str | None = None
    class_noise: dict[str, dict[str, tuple[float, float]]] = Field(default_factory=dict)


class Comparison(BaseModel):
    verdict: Verdict
    capacity_ratio: float | None
    baseline_capacity: float
    candidate_capacities: list[float]
    threshold: float  # relative change needed to leave the noise floor
    evidence: str
    # Added by the measurement engineer:
    baseline_capacities: list[float] = Field(default_factory=list)
    candidate_mean: float | None = None
    invalid_reason: str | None = None
    ratio_bound: Literal["lower", "upper"] | None = None  # capacity_ratio is a bound (a side was below its floor)
    # The interval verdict (loadgen.verdict): effect with its interval, minimum detectable effect, and
    # whether another repeat could still decide it ("undecided" while the interval straddles 0).
    effect: float | None = None
    effect_low: float | None = None
    effect_high: float | None = None
    mde: float | None = None
    decided: bool = True
    decided_by: str | None = None  # the estimator whose interval the verdict states (loadgen.judge)
    confidence: float = 0.95  # the level of effect_low/effect_high (0.975 where two estimators share alpha)
    # the two estimators split (loadgen.judge: VerdictStats.disagreement), said in one sentence for a person
    disagreement: str | None = None


class IntervalResult(BaseModel):
    """One reporting interval of a production-shaped replay."""

    start_s: float
    end_s: float
    target_rate: float  # scheduled requests / interval length
    requests: int
    errors: int
    attainment: float | None  # fraction of requests that met every per-request SLA target (None: no requests)
    ttft_p95_ms: float | None = None
    itl_p95_ms: float | None = None
    e2e_p95_ms: float | None = None
    within_sla: bool = True  # the interval's percentiles and error rate meet the SLA


class SessionDrift(BaseModel):
    """How a session-aware replay kept conversations (loadgen.closedloop.session_drift)."""

    sessions: int
    turns: int
    later_turns: int  # turns after a session's first
    early_turns: int  # later turns sent before their predecessor's reply ended (must be 0)
    drift_s: LatencySummary  # due time - recorded arrival of later turns, seconds (+: later than production)
    turn_send_lag_ms: LatencySummary  # later turns: send - (reply end + think); the client's share of the gap


class ProductionReplayResult(BaseModel):
    endpoint: str
    engine_args: list[str]
    launch_config_hash: str
    started_at: float
    mode: str  # "shaped" (per-interval counts, randomised times) or "exact" (recorded times)
    time_scale: float
    interval_s: float  # reporting interval, replay seconds
    intervals: list[IntervalResult]
    overall: StepResult
    attainment: float | None  # over all requests
    validity: Validity = "valid"
    invalid_reason: str | None = None
    sessions: SessionDrift | None = None  # session-aware replay (pools with multi-turn sessions)
    send_lag_bound_ms: float | None = None  # the client's p99 send lag it was measured under (the endpoint's)


class CalibrationPoint(BaseModel):
    rate: float
    achieved_rate: float
    send_lag_p99_ms: float | None
    errors: int
    sustained: bool
    reason: str | None = None


class CalibrationResult(BaseModel):
    """Highest rate this machine's client sustains on schedule against the null endpoint."""

    max_rate: float  # 0.0 when not even the lowest tried rate was sustained
    senders: int
    lag_p99_ms_bound: float
    rate_ratio_bound: float
    duration_s: float
    points: list[CalibrationPoint]
    host: str
    cpus: int
    client_cpus: list[int] | None = None
    measured_at: float
