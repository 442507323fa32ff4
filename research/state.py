"""Campaign persistence: one JSON file per campaign, rewritten atomically after every experiment.

Why: a campaign runs for tens of minutes to hours; a killed process must resume where it
stopped without re-running (and re-paying for) finished experiments. Everything needed to
continue lives here: the reference and working baselines with their sweeps and noise
floors, each round's proposals (so a resumed round tries the same ones, even when an LLM
proposed them), every finished experiment, the cached reference outputs of the correctness
check, and the budget already spent.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from loadgen.results import Comparison, NoiseFloor, SweepResult, Verdict
from loadgen.soak import SoakResult
from research.correctness import CorrectnessReport, ReferenceOutputs

STATE_VERSION = 1
ExperimentKind = Literal["candidate", "combination", "ablation", "control"]


class BaselineRecord(BaseModel):
    """A measured configuration that candidates are judged against."""

    engine_args: list[str]
    sweeps: list[SweepResult]
    noise: NoiseFloor
    source_experiment: str | None = None  # experiment id that produced it (None = the campaign's start)
    identity: dict[str, Any] = Field(default_factory=dict)  # engine, version, launch command, config hash
    wall_s: float = 0.0  # time its measurement took (for cost estimates)
    soak: SoakResult | None = None  # the baseline's own soak (an unstable baseline is a finding)
    adopted_at: float = Field(default_factory=time.time)
    notes: list[str] = Field(default_factory=list)  # how its floor was measured (Bench.tighten's sweeps)

    @property
    def capacity(self) -> float:
        return self.noise.capacity_mean


class ProposalRecord(BaseModel):
    """What the proposer suggested, reduced to what the campaign needs to run and report it."""

    proposal_id: str
    title: str
    technique: str
    bottleneck: str = ""
    engine_arg_diff: dict[str, str | None]
    engine_patch: str | None = None  # a unified diff the proposer authored (engines.authored)
    lossy: bool = False
    explanation: str = ""
    prediction: str = ""
    falsification: str = ""
    source: str = "rules"  # "rules" or "llm"
    raw: dict[str, Any] = Field(default_factory=dict)  # the full proposal object, for the report

    @property
    def predicted_capacity_ratio(self) -> float | None:
        value = self.raw.get("predicted_capacity_ratio")
        return float(value) if isinstance(value, (int, float)) else None


class ExperimentState(BaseModel):
    """One finished (or skipped) experiment. ``experiment_id`` is stable across resumes."""

    experiment_id: str
    round: int
    kind: ExperimentKind = "candidate"
    proposal_ids: list[str]
    title: str
    baseline_args: list[str]
    engine_args: list[str]
    diff: dict[str, str | None]
    lossy: bool = False
    verdict: Verdict | Literal["skipped"]
    confirmed: bool = False  # better in every repeat (beyond the noise floor)
    invalid_reason: str | None = None
    skip_reason: str | None = None
    sweeps: list[SweepResult] = Field(default_factory=list)
    comparison: Comparison | None = None
    correctness: CorrectnessReport | None = None
    capacity_ratio_vs_reference: float | None = None
    started_at: float = 0.0
    finished_at: float = 0.0
    wall_s: float = 0.0
    cost_hours: float = 0.0
    identity: dict[str, Any] = Field(default_factory=dict)
    log_tail: str | None = None
    notes: list[str] = Field(default_factory=list)
    soak: SoakResult | None = None  # sustained load before adoption (loadgen.soak)
    engine_patch: str | None = None  # the diff a proposer authored, applied through an overlay (engines.authored)

    @property
    def capacity_mean(self) -> float | None:
        caps = [s.capacity_rps or 0.0 for s in self.sweeps if s.validity == "valid"]
        return sum(caps) / len(caps) if caps else None


class RoundRecord(BaseModel):
    round: int
    baseline_args: list[str]
    diagnosis: dict[str, Any] = Field(default_factory=dict)
    proposals: list[ProposalRecord] = Field(default_factory=list)
    experiment_ids: list[str] = Field(default_factory=list)
    finished: bool = False
    adopted: str | None = None  # experiment id that became the working baseline
    outcome: str | None = None  # why the round ended without a change (no proposal, nothing won, ...)
    diagnosis_s: float = 0.0  # wall time of its diagnosis (0: the previous round's diagnosis stood)


class CampaignState(BaseModel):
    version: int = STATE_VERSION
    campaign: str
    campaign_id: str  # unique per campaign run (memory records use it)
    endpoint: str
    created_at: float = Field(default_factory=time.time)
    active_seconds: float = 0.0  # wall-clock time spent running, summed over resumes
    gpu_hours_used: float = 0.0
    reference: BaselineRecord | None = None
    working: BaselineRecord | None = None
    baselines: list[BaselineRecord] = Field(default_factory=list)  # every adopted baseline, in order
    reference_outputs: dict[str, ReferenceOutputs] = Field(default_factory=dict)  # config hash -> outputs
    rounds: list[RoundRecord] = Field(default_factory=list)
    experiments: dict[str, ExperimentState] = Field(default_factory=dict)
    failed_baseline: dict[str, Any] | None = None  # the invalid baseline measurement, for the report
    production_check: dict[str, Any] | None = None  # research.production_check.ProductionCheck, at the end
    finished: bool = False
    end_reason: str | None = None
    # a research-memory or review write that failed (what, and the error): the campaign stops at the end of
    # its step, and the next run records this whole state again (writes are idempotent) before going on
    unrecorded: str | None = None
    open_questions: list[str] = Field(default_factory=list)
    resumes: int = 0
    dagster_run_ids: list[str] = Field(default_factory=list)  # the Dagster runs that ran it (one per resume)
    # Measured on this campaign's host: engine launch-to-healthy and whole-sweep wall times (the
    # budget estimator's evidence; see research.campaign.budget.estimate_seconds).
    startup_s: list[float] = Field(default_factory=list)
    sweep_s: list[float] = Field(default_factory=list)


def experiment_id(kind: str, baseline_args: list[str], engine_args: list[str], repeats: int) -> str:
    """Stable id of an experiment: the same change on the same baseline is the same experiment."""
    payload = json.dumps({"kind": kind, "base": baseline_args, "cand": engine_args, "repeats": repeats})
    return f"{kind[:4]}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"


class StateStore:
    """Reads and atomically writes one campaign's state file."""

    def __init__(self, state_dir: Path | str, campaign: str):
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"{campaign}.state.json"
        self._clock_start = time.monotonic()

    def load(self) -> CampaignState | None:
        if not self.path.exists():
            return None
        try:
            state = CampaignState.model_validate_json(self.path.read_text())
        except ValueError as exc:
            raise ValueError(f"{self.path}: campaign state is unreadable ({exc}); move it away to start over") from exc
        if state.version != STATE_VERSION:
            raise ValueError(f"{self.path}: state version {state.version}, this code reads {STATE_VERSION}")
        return state

    def save(self, state: CampaignState) -> None:
        """Write to a temporary file in the same folder, fsync, then rename over the old file."""
        now = time.monotonic()
        state.active_seconds += now - self._clock_start
        self._clock_start = now
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.dir)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(state.model_dump_json(indent=1))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def elapsed_s(self, state: CampaignState) -> float:
        """Active time including the part of this session not saved yet."""
        return state.active_seconds + (time.monotonic() - self._clock_start)
