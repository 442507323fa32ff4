"""Result types of measurement runs: the contract between loadgen and everything that judges it.

All are pydantic models so a sweep can be written to JSON, stored in Dagster metadata and
in the research memory, and read back unchanged.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class RequestRecord(BaseModel):
    """What happened to one request. Times are seconds on the runner's monotonic clock."""

    request_id: str
    scheduled_s: float  # offset from run start when it should have been sent
    sent_s: float | None = None  # offset when it was actually sent
    ttft_s: float | None = None
    itl_s: list[float] = Field(default_factory=list)  # every inter-token (inter-chunk) gap
    e2e_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    status: int | None = None  # HTTP status; None = never got one
    error: str | None = None

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


Validity = Literal["valid", "invalid"]


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
    cached_prompt_fraction: float | None = None
    within_sla: bool
    sla_violations: list[str] = Field(default_factory=list)  # e.g. "ttft p95 812ms > 500ms"
    validity: Validity = "valid"
    invalid_reason: str | None = None
    engine_metrics: dict[str, float] = Field(default_factory=dict)  # deltas / means over the step
    records_path: str | None = None  # Parquet of RequestRecords, when kept


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


class NoiseFloor(BaseModel):
    """Spread of the untouched baseline over K identical sweeps."""

    repeats: int
    capacities: list[float]
    capacity_mean: float
    capacity_std: float
    capacity_rel_spread: float  # (max - min) / mean
    per_rate: dict[str, dict[str, float]] = Field(default_factory=dict)  # rate -> {"ttft_p95_std": ..}


Verdict = Literal["better", "same", "worse", "invalid"]


class Comparison(BaseModel):
    verdict: Verdict
    capacity_ratio: float | None
    baseline_capacity: float
    candidate_capacities: list[float]
    threshold: float  # relative change needed to leave the noise floor
    evidence: str
