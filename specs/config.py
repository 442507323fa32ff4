"""Typed, validated declarations: endpoints, campaigns and diagnostic recipes.

These models are the schemas of the Dagster component types in ``dagster_project.lib`` (one
``defs.yaml`` per endpoint, campaign or recipe under ``definitions/``). Every model forbids
unknown fields so a typo is an error, not a silently ignored setting. This module is the bottom
layer: it imports nothing of the project. Load a folder with ``dagster_project.lib.load_definitions``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from specs.enums import ArrivalKind, ProposerMode

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"  # usable as a Dagster group name and asset key part


_ENV_REF = re.compile(r"\$\{([A-Z0-9_]+)\}")


def _expand_env(value):
    """``${VAR}`` in a path expands from the environment (an unset one stays as written, so the error
    names it); secrets never live in YAML."""
    return _ENV_REF.sub(lambda m: os.environ.get(m.group(1), m.group(0)), value) if isinstance(value, str) else value


EnvPath = Annotated[str, BeforeValidator(_expand_env)]


@dataclass(frozen=True)
class DefinitionIssue:
    """One problem in one YAML file, located precisely enough to fix it."""

    file: Path
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class DefinitionError(ValueError):
    """One or more declarations are invalid; lists every issue found."""

    def __init__(self, issues: list[DefinitionIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(Strict):
    """Which weights the engine serves.

    ``path`` is a local directory, or ``builtin:smollm2-135m-instruct`` / ``builtin:tiny-random``
    for the models this project builds itself (see specs.models).
    """

    path: EnvPath
    served_name: str | None = None
    revision: str = "main"
    #: ``random``: a real model shape with random weights (an engine's dummy loader): throughput is real,
    #: output quality is not, so a lossy change is measured and left for review, never adopted
    weights: Literal["trained", "random"] = "trained"


# An adapter registered in engines.registry (vllm, sglang, transformers, external, or one a user adds):
# the spec layer does not know the engines, so the kind is checked where definitions load
# (dagster_project.lib.components) and where an adapter is looked up (engines.registry.adapter_class).
EngineKind = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class EngineSpec(Strict):
    kind: EngineKind
    # Extra command-line arguments, an argument list (never a shell string).
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # For kind=external: the base URL of an already-running OpenAI-compatible server.
    url: str | None = None
    # Override of the interpreter that runs the engine (default: the engine venv, see specs.paths).
    python: str | None = None
    port: int | None = None
    startup_timeout_s: float = 300.0


class HardwareSpec(Strict):
    gpu_type: str = "cpu"  # "cpu" or a GPU name such as "H200"
    gpu_count: int = Field(default=0, ge=0)
    # Memory bandwidth for the roofline (GB/s); None = the GPU's data sheet, or measured on a CPU host.
    memory_bandwidth_gbps: float | None = Field(default=None, gt=0)
    # What one GPU (or, on a CPU host, the host) costs per hour: gives $ per million output tokens at
    # capacity in the review report, the research memory and the Pareto plot. None = no cost shown.
    price_per_gpu_hour_usd: float | None = Field(default=None, gt=0)

    @property
    def capacity_divisor(self) -> int:
        """Capacity is reported per GPU; a CPU host counts as one unit."""
        return max(self.gpu_count, 1)


# Modal's GPU names (https://modal.com/docs/guide/gpu, 2026): "!" pins the exact type (no upgrade
# to a faster one), "+" allows it. Checked here so a typo is a file:line error, not a failed deploy.
MODAL_GPU_TYPES = (
    "T4",
    "L4",
    "A10",
    "A10G",
    "A100",
    "A100-40GB",
    "A100-80GB",
    "L40S",
    "H100",
    "H100!",
    "H200",
    "B200",
    "B200+",
)


class LocalLauncher(Strict):
    """The engine runs as a child process of this host (the default; also where an experiment
    unit starts its engine inside a remote container)."""

    kind: Literal["local"] = "local"


class ModalLauncher(Strict):
    """The engine and the load generator run together in one Modal container (see launchers.modal_app).

    GPU type and count default to the endpoint's ``hardware``; the volume holds the model weights.
    """

    kind: Literal["modal"]
    # Modal's spelling of the endpoint's GPU, e.g. "H100!" for hardware.gpu_type H100 (None = hardware.gpu_type).
    gpu_type: str | None = None
    gpu_count: int | None = Field(default=None, ge=1)
    app_name: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
    )  # None = autoresearch-<endpoint>
    weights_volume: str = Field(default="autoresearch-weights", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    # Wall-clock limit of one experiment's container (Modal allows up to 24 h).
    timeout_s: int = Field(default=3600, ge=60, le=86400)
    region: str | None = None

    @field_validator("gpu_type")
    @classmethod
    def _known_gpu(cls, value: str | None) -> str | None:
        if value is not None and value.upper() not in MODAL_GPU_TYPES:
            raise ValueError(f"unknown Modal GPU {value!r}; Modal names: {', '.join(MODAL_GPU_TYPES)}")
        return value.upper() if value else value


LauncherSpec = Annotated[LocalLauncher | ModalLauncher, Field(discriminator="kind")]


def modal_gpu(hardware: HardwareSpec, launcher: ModalLauncher) -> str:
    """Modal's GPU string for this endpoint, e.g. "H200:1" (type from the launcher or the hardware)."""
    gpu_type = launcher.gpu_type or hardware.gpu_type.upper()
    return f"{gpu_type}:{launcher.gpu_count or hardware.gpu_count}"


class SLASpec(Strict):
    """Latency targets. Each target is a percentile (50, 90, 95, 99) and a limit in milliseconds."""

    ttft_ms: float = Field(gt=0)
    ttft_percentile: float = Field(default=95, gt=0, lt=100)
    itl_ms: float | None = Field(default=None, gt=0)
    itl_percentile: float = Field(default=95, gt=0, lt=100)
    e2e_ms: float | None = Field(default=None, gt=0)
    e2e_percentile: float = Field(default=95, gt=0, lt=100)
    max_error_rate: float = Field(default=0.01, ge=0, le=1)


class TrafficSpec(Strict):
    """Where production traffic comes from.

    kinds: ``request_log`` (JSONL of chat requests), ``azure`` (CSV token-count trace),
    ``mooncake`` (JSONL with prefix-block hashes), ``sample`` (the bundled generator).
    """

    kind: Literal["request_log", "azure", "mooncake", "sample"]
    path: EnvPath | None = None
    seed: int = 0
    # Cap on requests taken from the source (None = all); token-count traces are long.
    limit: int | None = Field(default=None, gt=0)
    # Scale factor for synthesised lengths of token-count traces (CPU models have short contexts).
    length_scale: float = Field(default=1.0, gt=0)
    max_prompt_tokens: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    # A source whose malformed lines exceed this fraction of the lines read fails the pool build
    # (naming its first bad lines); the last good pool stays in place. 0 = no bad line allowed.
    max_malformed_fraction: float = 0.05

    @field_validator("max_malformed_fraction", mode="before")
    @classmethod
    def _fraction(cls, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(
                f"traffic.max_malformed_fraction must be a fraction of the source's lines between 0 "
                f"and 1 (0.05 = 5%), got {value!r}"
            )
        return float(value)

    @model_validator(mode="after")
    def _path_needed(self) -> "TrafficSpec":
        if self.kind != "sample" and not self.path:
            raise ValueError(f"traffic.kind '{self.kind}' needs traffic.path")
        if self.kind in ("request_log", "sample") and (self.length_scale != 1.0 or self.max_prompt_tokens):
            raise ValueError(
                f"traffic.length_scale and traffic.max_prompt_tokens apply to token-count traces only "
                f"(azure, mooncake); a {self.kind} replays the logged prompts as they are"
            )
        return self


class FidelitySpec(Strict):
    """Maximum allowed distances between replay pool and production (see replay.fidelity)."""

    prompt_tokens_ks: float = 0.1
    output_tokens_ks: float = 0.1
    cached_fraction_abs: float = 0.02
    interarrival_ks: float = 0.15
    burstiness_rel: float = 0.25
    concurrency_ks: float = 0.2
    # Multi-turn request logs only (replay.sessions): turns per session and think times.
    turns_per_session_ks: float = 0.1
    think_time_ks: float = 0.1


class SweepSpec(Strict):
    """How capacity sweeps are run for this endpoint."""

    rates: list[float] | None = None  # explicit ladder (req/s); None = automatic search
    step_duration_s: float = Field(default=15.0, gt=0)
    # A step is held long enough for this many requests (up to max_step_s): the percentiles of a
    # handful of requests are noise.
    min_requests: int = Field(default=12, ge=1)
    # The longest a step is stretched for min_requests (None: 4x step_duration_s). Low rates below
    # capacity are where steps grow long; the steps past it, which the service rate reads, are not.
    max_step_s: float | None = Field(default=None, gt=0)
    warmup_requests: int = Field(default=4, ge=0)
    max_steps: int = Field(default=8, ge=1)
    # Explicit ladders only: after the first SLA failure, this many geometric bisection steps
    # between the last passing and the first failing rate (finer capacity, less quantisation noise).
    refine_steps: int = Field(default=0, ge=0, le=4)
    arrival: ArrivalKind = "poisson"
    burstiness: float = Field(default=1.0, gt=0)
    seed: int = 0
    repeats: int = Field(default=3, ge=1)  # baseline sweeps for the noise floor
    # What a verdict compares (loadgen.judge): "crossing", the SLA crossing fitted on every step; or
    # "service_rate", the engine's service rate from queue growth AND the crossing, each tested at alpha / 2
    # (the crossing decides where both do). The service rate reads every request of a step that queued, so
    # it is several times tighter where the queue sets capacity; the crossing keeps the SLA in view.
    estimator: Literal["crossing", "service_rate"] = "crossing"
    # Client send-lag bounds (None = derived from the SLA, see loadgen.sweep.sweep_lag_bounds).
    max_send_lag_ms: float | None = Field(default=None, gt=0)
    min_rate_ratio: float = Field(default=0.98, gt=0, le=1)
    # When the lowest rate already breaks the SLA, the sweep halves the rate until one holds, down
    # to this floor (req/s; None = the sweep's first rate / 16). Below it: "capacity below the floor".
    min_rate: float | None = Field(default=None, gt=0)
    # Requests still in flight this long after a step's schedule ends are cut and counted (None =
    # the larger of the TTFT and E2E limits, at least 2 s: a request cut then has already missed them).
    drain_s: float | None = Field(default=None, ge=0)
    # Warm-up before an engine's first step: a short burst of warmup_requests, replies clipped to this many tokens,
    # cut after warmup_timeout_s (it warms the engine, it measures nothing).
    warmup_max_tokens: int = Field(default=16, ge=1)
    warmup_timeout_s: float = Field(default=10.0, gt=0)
    # After each step's prefix-cache reset, on an engine whose cache is on: one request from each of
    # the pool's warm_prefix_groups most frequent prefix groups (system prompt + tools), its reply
    # clipped to one token, sent and completed. A production server keeps its hot shared prefixes
    # cached; a step that starts cold instead charges a miss to the first request of every group,
    # which in a short step sets TTFT p95 by itself. 0 = steps start with an empty cache.
    warm_prefix_groups: int = Field(default=8, ge=0)
    # Once per engine start, before its first step: an open-loop run of this many seconds at
    # engine_warmup_rps (None = half the ladder's highest rate) with the pool's own replies, measured
    # by nobody. Engines that capture CUDA graphs per batch shape as they first meet it
    # (transformers serve) otherwise spend their first sweep capturing: on the H200 every
    # configuration's first sweep held 3.6 req/s and its second 5.1 (docs/gpu.md). 0 = none.
    engine_warmup_s: float = Field(default=0.0, ge=0)
    engine_warmup_rps: float | None = Field(default=None, gt=0)
    # Before each step, with the engine idle: how long one core takes to read a buffer past the caches
    # (loadgen.host_speed, about 1 s per step), and service rates compared at a common host speed. For an
    # engine that computes on the CPU of a shared host, whose rate follows the host's memory speed; a GPU
    # engine's does not. Only the service rate uses it (estimator: service_rate).
    host_speed_probe: bool = False
    # Concurrency mode (loadgen.closedloop): numbers of concurrent users, each sending its next
    # request when its previous reply ended plus a think time; swept after the open-loop rates.
    # None = no concurrency sweep. The open-loop capacity stays the basis of verdicts.
    users: list[int] | None = None
    # Think time of a user between a reply and its next request, seconds (None = the pool's logged
    # think times where it has sessions, else 0).
    think_time_s: float | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _no_queued_step_s(cls, data):
        if isinstance(data, dict) and "queued_step_s" in data:
            raise ValueError(
                "sweep.queued_step_s is no longer honoured: a step's length follows its rate alone, so repeats "
                "serve the same requests whichever way their ladder went; remove it, and raise min_requests "
                "(up to max_step_s) to lengthen the steps past capacity"
            )
        return data

    @model_validator(mode="after")
    def _probe_needs_service_rate(self):
        if self.host_speed_probe and self.estimator != "service_rate":
            raise ValueError(
                "sweep.host_speed_probe adjusts the service rate only, and this sweep judges by the SLA "
                "crossing: set sweep.estimator: service_rate, or remove host_speed_probe"
            )
        return self

    @field_validator("users")
    @classmethod
    def _users_increasing(cls, users):
        if users is not None and (not users or any(u < 1 for u in users) or sorted(set(users)) != list(users)):
            raise ValueError(f"sweep.users must be increasing positive integers, e.g. [1, 2, 4, 8]; got {users}")
        return users


class SoakSpec(Strict):
    """Before a configuration is adopted (and on every campaign baseline): held at its measured
    capacity for ``hold_s``, then at ``overload_factor`` times it for ``overload_s``, then at half of
    it for ``recovery_s`` (loadgen.soak). Short sweep steps never show an engine that OOMs after a
    minute or a queue that grows without bound. Minutes on a GPU, less on a CPU; 0 = no soak."""

    hold_s: float = Field(default=60.0, ge=0)
    overload_factor: float = Field(default=1.3, gt=1)
    overload_s: float = Field(default=20.0, ge=0)
    recovery_s: float = Field(default=20.0, ge=0)
    # At capacity each SLA target's fraction over its limit is its allowance (5% for a p95); the hold
    # breaks the SLA when a fraction exceeds this many times the allowance (clearly past the edge,
    # not the capacity estimate's own uncertainty).
    sla_tolerance: float = Field(default=3.0, ge=1)
    # A queue that grows (or an SLA broken) at the short-step capacity may only mean that short steps
    # overstate what is sustainable: the hold is tried again at ``backoff_factor`` times the rate, up to
    # ``backoffs`` times. A configuration is then judged by the rate it sustains (research.harness);
    # a death, an OOM or errors are never backed off.
    backoffs: int = Field(default=2, ge=0)
    backoff_factor: float = Field(default=0.8, gt=0, lt=1)

    @property
    def pass_s(self) -> float:
        """Seconds of one pass of the soak (its hold, overload and recovery): what a time window must hold
        for a soak to begin, or for one more back-off."""
        return self.hold_s + self.overload_s + self.recovery_s


class BudgetSpec(Strict):
    gpu_hours: float = Field(default=1.0, gt=0)
    wall_clock_minutes: float = Field(default=60.0, gt=0)


class CalibrationProtocol(Strict):
    """The sweep settings a calibration's noise depends on (SweepSpec's fields of the same names), compared with
    the run's at use: another ladder, step length or estimator measures another noise. The number of repeats is
    not one of them: a calibration is the noise of one run's difference, which more repeats do not change."""

    rates: list[float] | None
    step_duration_s: float
    min_requests: int
    max_step_s: float | None
    estimator: Literal["crossing", "service_rate"]
    host_speed_probe: bool

    @classmethod
    def of(cls, sweep: "SweepSpec") -> "CalibrationProtocol":
        return cls(**{k: getattr(sweep, k) for k in cls.model_fields})

    def differences(self, sweep: "SweepSpec") -> list[str]:
        """How ``sweep`` differs from this protocol, one phrase a setting ([] when it matches)."""
        run = self.of(sweep)
        return [
            f"{k} {getattr(self, k)} (this run {getattr(run, k)})"
            for k in type(self).model_fields
            if getattr(self, k) != getattr(run, k)
        ]


class NoiseCalibration(Strict):
    """Between-run noise of the endpoint measured before a campaign, on its hardware with its sweep protocol:
    the sd of a paired log-capacity difference between two runs of one configuration, by ``estimator``,
    for the configurations whose SLA crossing ``limiting`` limits (their noise class; None: every class),
    over ``df`` degrees of freedom. ``source``: where it was measured (a benchmark's recorded output).

    It applies only where it can speak for a verdict, which sets two launches side by side
    (research.campaign.steps.endpoint_prior): ``scope`` between_launches (a within_launch sd, two sweeps of
    one engine start, is ignored), ``hardware`` equal to the run's (research.campaign.steps.run_hardware, e.g.
    "cpu x 2") and ``protocol`` equal to the run's sweep settings. Then every floor's prior pools it as it
    pools an earlier campaign's A/A evidence, and the prior and the floor of its class are never narrower
    than it (loadgen.noise_prior); else the prior says why it was ignored."""

    estimator: Literal["crossing", "service_rate"]
    limiting: Literal["ttft", "itl", "e2e", "errors"] | None = None
    sd: float = Field(gt=0, lt=1)
    df: float = Field(gt=0)
    source: str = Field(min_length=1)
    scope: Literal["between_launches", "within_launch"]
    hardware: str = Field(min_length=1)
    protocol: CalibrationProtocol


class EndpointSpec(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    model: ModelSpec
    engine: EngineSpec
    hardware: HardwareSpec = HardwareSpec()  # before launcher: the launcher's check reads it
    # Where the engine runs (what it is is engine.kind); engine.kind external is the "existing host" launcher.
    launcher: LauncherSpec = LocalLauncher()
    sla: SLASpec
    traffic: TrafficSpec
    budget: BudgetSpec = BudgetSpec()
    fidelity: FidelitySpec = FidelitySpec()
    sweep: SweepSpec = SweepSpec()
    soak: SoakSpec = SoakSpec()
    noise_calibration: list[NoiseCalibration] = Field(default_factory=list)

    @field_validator("launcher")
    @classmethod
    def _launcher_fits(cls, launcher, info):
        """A Modal launch needs a GPU in hardware (capacity is per GPU); whether it can start the engine is
        the engine adapter's to say (``EngineAdapter.spec_problems``)."""
        if not isinstance(launcher, ModalLauncher):
            return launcher
        hardware = info.data.get("hardware")
        if hardware is None:
            return launcher
        if hardware.gpu_type.lower() == "cpu" or hardware.gpu_count < 1:
            raise ValueError(
                "launcher.kind modal needs a GPU: set hardware.gpu_type (e.g. H200) and hardware.gpu_count >= 1"
            )
        if launcher.gpu_count is not None and launcher.gpu_count != hardware.gpu_count:
            raise ValueError(
                f"launcher.gpu_count {launcher.gpu_count} differs from hardware.gpu_count "
                f"{hardware.gpu_count} (capacity is reported per GPU of hardware)"
            )
        if launcher.gpu_type and launcher.gpu_type.rstrip("!+").split("-")[0] != hardware.gpu_type.upper():
            raise ValueError(
                f"launcher.gpu_type {launcher.gpu_type!r} is not hardware.gpu_type "
                f"{hardware.gpu_type!r} (the measurement must run on the hardware it reports)"
            )
        return launcher

    def launch_config_hash(self) -> str:
        """Stable hash of everything that changes what the engine does."""
        payload = {
            "model": self.model.model_dump(),
            "engine": self.engine.model_dump(exclude={"startup_timeout_s"}),
            # the price changes no engine behaviour (and leaves existing hashes as they were)
            "hardware": self.hardware.model_dump(exclude={"price_per_gpu_hour_usd"}),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def with_engine_args(self, args: list[str]) -> "EndpointSpec":
        return self.model_copy(update={"engine": self.engine.model_copy(update={"args": list(args)})})


class CampaignSpec(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    endpoint: str
    deadline_minutes: float = Field(default=60.0, gt=0)
    gpu_hours: float = Field(default=1.0, gt=0)
    max_concurrent_gpus: int = Field(default=1, ge=1)
    subagents: int = Field(default=3, ge=1)
    repeats: int = Field(default=2, ge=1)  # candidate sweeps per experiment
    # Sweeps a candidate may add, one at a time, while its verdict's interval still straddles the
    # decision (the sequential rule of loadgen.verdict); 0 judges on `repeats` sweeps alone.
    extra_repeats: int = Field(default=2, ge=0)
    max_rounds: int = Field(default=4, ge=1)
    # The sequential rule applied to a floor: while a baseline's minimum detectable effect is over this
    # (0.10: a 10% change), one more baseline sweep on a fresh engine, up to `floor_max_sweeps` and as the
    # budget allows. None measures the endpoint's `sweep.repeats` sweeps and no more.
    floor_target_mde: float | None = Field(default=None, gt=0, lt=1)
    # The campaign's target: the median MDE of the verdicts it makes (research.verdict_mde), which the
    # review and the console summary state as measured against it. A floor's MDE above is an input to
    # those verdicts, not their MDE. None states no target.
    target_mde: float | None = Field(default=None, gt=0, lt=1)
    floor_max_sweeps: int = Field(default=4, ge=2)
    proposer: ProposerMode = "auto"
    recipes: list[str] = Field(default_factory=list)
    # Diagnosis: seconds of torch profiling under steady load (0 disables it, e.g. where the
    # engine's profiler is unreliable or too heavy for the host).
    profile_seconds: float = Field(default=6.0, ge=0)
    # Production-shaped verification at the end (research.production_check): seconds of the pool's own
    # arrival pattern replayed on the reference and on the adopted configuration, when a change was
    # adopted; 0 (the default) runs none. Two engine starts and twice this long.
    production_check_s: float = Field(default=0.0, ge=0)
    # Patches of the engine's code that a proposer (an LLM subagent) authored: run them, each in its own
    # candidate's engine only (engines.authored). Off by default: it runs code a model wrote. When off, a
    # proposal that carries a patch is rejected with the reason, never run without it.
    authored_patches: bool = False

    def concurrent_engines(self, endpoint: "EndpointSpec") -> int:
        """How many engines of ``endpoint`` this campaign may run at once: the GPU cap divided by the
        GPUs one engine takes, at least 1. A CPU endpoint (gpu_count 0) runs one engine at a time,
        because the engine and the load generator share the host's cores (see docs/architecture.md,
        "The GPU cap")."""
        if endpoint.hardware.gpu_count == 0:
            return 1
        return max(1, self.max_concurrent_gpus // endpoint.hardware.gpu_count)


class RecipeStep(Strict):
    name: str
    # What one property of the traffic is changed, the rest held fixed.
    vary: Literal["prompt_tokens", "output_tokens", "shared_prefix_fraction", "long_prompt_interference"]
    values: list[float]
    fixed: dict[str, float] = Field(default_factory=dict)
    rate: float | None = None  # req/s; None = half the baseline capacity
    duration_s: float = 10.0


class RecipeSpec(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    applies_when: dict[str, str] = Field(default_factory=dict)  # trait -> condition, e.g. {"prefix_reuse": ">0.3"}
    steps: list[RecipeStep]


class DefinitionSet(BaseModel):
    """Everything declared under one defs folder (see dagster_project.lib)."""

    endpoints: dict[str, EndpointSpec] = {}
    campaigns: dict[str, CampaignSpec] = {}
    recipes: dict[str, RecipeSpec] = {}
    sources: dict[str, str] = {}  # name -> file it came from

    def endpoint(self, name: str) -> EndpointSpec:
        if name not in self.endpoints:
            known = ", ".join(sorted(self.endpoints)) or "none"
            raise KeyError(f"no endpoint named {name!r}; declared endpoints: {known}")
        return self.endpoints[name]

    def campaign_of(self, endpoint: str) -> CampaignSpec:
        """The endpoint's campaign: its first declared one, else one with the defaults (the one place
        the CLI, the assets and the sensors resolve it)."""
        for campaign in self.campaigns.values():
            if campaign.endpoint == endpoint:
                return campaign
        return CampaignSpec(name=f"{endpoint}_campaign", endpoint=endpoint)


def read_declaration(file: Path, model: type[BaseModel]):
    """One defs.yaml's ``attributes`` as ``model``, with pydantic alone: for a host without Dagster
    (the GPU machine's minimal wheels, docs/gpu.md). Everything else reads the defs folder through
    ``dagster_project.lib.load_definitions`` (file:line errors, checks that span files)."""
    return model.model_validate(yaml.safe_load(Path(file).read_text(encoding="utf-8"))["attributes"])
