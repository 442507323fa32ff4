"""Typed records of the research memory: what the loop writes, one pydantic model per table.

Every record has a stable id. When the caller gives none, the id is derived from the fields
that identify the fact (not from the time), so a re-run of the same Dagster step writes the
same id and the store upserts instead of duplicating. ``to_row()`` flattens a record into the
columns of its table (dicts become canonical JSON text, conditions become columns).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specs.enums import Validity, Verdict

DECIDED_VERDICTS: tuple[str, ...] = ("better", "same", "worse")


def utcnow() -> datetime:
    """Naive UTC timestamp (DuckDB TIMESTAMP has no zone; everything stored is UTC)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: equal values give equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def stable_id(prefix: str, *parts: Any) -> str:
    """Short deterministic id from the parts that identify a record."""
    digest = hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()[:20]
    return f"{prefix}_{digest}"


def change_signature(diff: dict[str, str | None]) -> str:
    """Canonical JSON of an engine-argument diff (flags normalised to ``--name``, keys sorted).

    This is the identity of "the same change" across campaigns and endpoints; it is stored
    as readable text so analysts can filter on it in SQL.
    """
    normalised = {(k if k.startswith("-") else f"--{k}"): (None if v is None else str(v)) for k, v in diff.items()}
    return canonical_json(normalised)


class Record(BaseModel):
    """Base of every stored record: strict fields, one table, one id column.

    ``JSON_FIELDS`` are stored as canonical JSON text; a ``conditions`` field is flattened into
    the seven condition columns (or kept as JSON when ``CONDITIONS_AS_JSON``).
    """

    model_config = ConfigDict(extra="forbid")

    TABLE: ClassVar[str]
    ID_FIELD: ClassVar[str]
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ()
    CONDITIONS_AS_JSON: ClassVar[bool] = False

    @property
    def record_id(self) -> str:
        return getattr(self, self.ID_FIELD)

    def to_row(self) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name == "conditions":
                if self.CONDITIONS_AS_JSON:
                    row[name] = None if value is None else value.key()
                else:
                    row.update(value.model_dump())
            elif name in self.JSON_FIELDS:
                row[name] = None if value is None else canonical_json(value)  # SQL NULL, not 'null'
            else:
                row[name] = value
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Record":
        """Inverse of :meth:`to_row` (extra columns such as ``written_at_ns`` are ignored)."""
        data: dict[str, Any] = {}
        for name in cls.model_fields:
            if name == "conditions":
                if cls.CONDITIONS_AS_JSON:
                    raw = row.get("conditions")
                    data[name] = None if raw is None else json.loads(raw)
                else:
                    data[name] = {key: row[key] for key in Conditions.model_fields}
            elif name in cls.JSON_FIELDS:
                raw = row.get(name)
                if raw is not None:
                    data[name] = json.loads(raw)
            elif name in row and row[name] is not None:
                data[name] = row[name]
        return cls.model_validate(data)


class Conditions(BaseModel):
    """What must match for two results to be "under the same conditions" (endpoint-independent)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    model_revision: str = "main"
    hardware: str = "cpu"  # GPU type, or "cpu"
    gpu_count: int = Field(default=0, ge=0)
    engine: str
    engine_version: str
    workload_signature: str  # short hash of workload traits, computed by the research loop

    def key(self) -> str:
        return canonical_json(self.model_dump())


class EndpointRecord(Record):
    """An endpoint as last seen by the loop (one row per endpoint, upserted)."""

    TABLE: ClassVar[str] = "endpoints"
    ID_FIELD: ClassVar[str] = "endpoint"
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("sla",)

    endpoint: str
    description: str = ""
    model: str
    model_revision: str = "main"
    hardware: str = "cpu"
    gpu_count: int = 0
    engine: str
    engine_version: str = "unknown"
    engine_args: list[str] = Field(default_factory=list)
    sla: dict[str, Any] = Field(default_factory=dict)
    traffic_kind: str | None = None
    price_per_gpu_hour_usd: float | None = None  # hardware.price_per_gpu_hour_usd, when the YAML gives one
    updated_at: datetime = Field(default_factory=utcnow)

    @classmethod
    def from_spec(cls, spec: Any, engine_version: str = "unknown") -> "EndpointRecord":
        """Build from an :class:`specs.config.EndpointSpec`."""
        return cls(
            endpoint=spec.name,
            description=spec.description,
            model=spec.model.served_name or spec.model.path,
            model_revision=spec.model.revision,
            hardware=spec.hardware.gpu_type,
            gpu_count=spec.hardware.gpu_count,
            engine=spec.engine.kind,
            engine_version=engine_version,
            engine_args=list(spec.engine.args),
            sla=spec.sla.model_dump(),
            traffic_kind=spec.traffic.kind,
            price_per_gpu_hour_usd=spec.hardware.price_per_gpu_hour_usd,
        )


class CampaignRecord(Record):
    """One run of a campaign on an endpoint; re-recorded (same id) as it progresses."""

    TABLE: ClassVar[str] = "campaigns"
    ID_FIELD: ClassVar[str] = "campaign_id"

    campaign_id: str  # unique per campaign run, e.g. "<campaign>-<partition key>"
    campaign: str  # the campaign's name (definitions/campaigns/<name>/defs.yaml)
    endpoint: str
    status: Literal["running", "finished", "stopped", "failed"] = "running"
    stop_reason: str | None = None  # deadline, budget, no supported experiment left, ...
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    baseline_config_hash: str | None = None
    baseline_engine_args: list[str] = Field(default_factory=list)
    baseline_capacity: float | None = None  # req/s per GPU of the campaign's original baseline
    best_config_hash: str | None = None
    best_engine_args: list[str] = Field(default_factory=list)
    best_capacity: float | None = None
    total_gain_ratio: float | None = None  # best / original baseline rung capacity
    # the adopted changes' judged effects chained, with their interval (research.campaign.judged_gain)
    judged_gain: float | None = None
    judged_gain_low: float | None = None
    judged_gain_high: float | None = None
    judged_gain_confidence: float | None = None
    dagster_run_ids: list[str] = Field(default_factory=list)
    notes: str = ""


class ExperimentRecord(Record):
    """One candidate experiment and its verdict."""

    TABLE: ClassVar[str] = "experiments"
    ID_FIELD: ClassVar[str] = "experiment_id"
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("change", "correctness", "soak", "overlays")

    experiment_id: str = ""  # derived when empty: campaign, endpoint, change, base config
    endpoint: str
    campaign_id: str
    conditions: Conditions
    # Workload traits that explain disagreements between endpoints (None = unknown).
    decode_share: float | None = None  # fraction of engine time / tokens spent decoding
    prompt_tokens_p50: float | None = None
    output_tokens_p50: float | None = None
    prefix_reuse: float | None = None  # cached-prefix fraction of prompt tokens
    bottleneck: str  # e.g. "queueing", "kv_capacity", "prefill_interference"
    technique: str  # named family, e.g. "max_num_seqs", "prefix_caching"
    change: dict[str, str | None]  # exact engine-argument diff
    change_signature: str = ""  # derived from change when empty
    base_config_hash: str | None = None
    candidate_config_hash: str | None = None
    hypothesis: str = ""
    prediction: str = ""
    falsification: str = ""
    verdict: Verdict
    invalid_reason: str | None = None
    capacity_ratio: float | None = None  # candidate / its baseline
    baseline_capacity: float | None = None
    candidate_capacity: float | None = None
    noise_threshold: float | None = None  # relative change needed to leave the noise floor
    noise_rel_spread: float | None = None
    effect: float | None = None  # interval verdict (loadgen.verdict): relative capacity change
    effect_low: float | None = None  # its interval
    effect_high: float | None = None
    mde: float | None = None  # minimum detectable effect at this noise
    repeats: int | None = None
    lossless: bool = True
    correctness: dict[str, Any] = Field(default_factory=dict)  # KL, top-1 agreement, exact-match, ...
    # The soak before adoption (loadgen.soak.SoakResult without its log): rate, held_s, outcome, ...
    soak: dict[str, Any] | None = None
    # Runtime overlays the candidate's engine ran with, by content hash (engines.overlays), and the diff of
    # an engine patch its proposer authored (engines.authored); None where there was none.
    overlays: dict[str, str] | None = None
    engine_patch: str | None = None
    needs_review: bool = False
    evidence: str = ""
    run_ids: list[str] = Field(default_factory=list)
    dagster_run_ids: list[str] = Field(default_factory=list)
    asset_keys: list[str] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _derive(self) -> "ExperimentRecord":
        if not self.change_signature:
            self.change_signature = change_signature(self.change)
        if not self.experiment_id:
            self.experiment_id = stable_id(
                "exp", self.campaign_id, self.endpoint, self.change_signature, self.base_config_hash
            )
        return self


class ConfirmationRecord(Record):
    """The confirmed_baseline step adopted an experiment's change as the new working baseline."""

    TABLE: ClassVar[str] = "confirmations"
    ID_FIELD: ClassVar[str] = "experiment_id"

    experiment_id: str
    endpoint: str
    campaign_id: str
    new_config_hash: str | None = None
    engine_args: list[str] = Field(default_factory=list)  # the full new working configuration
    note: str = ""
    dagster_run_id: str | None = None
    confirmed_at: datetime = Field(default_factory=utcnow)


class SkipRecord(Record):
    """A candidate the harness did not run, and why (usually a prior decision under the same conditions)."""

    TABLE: ClassVar[str] = "skips"
    ID_FIELD: ClassVar[str] = "skip_id"

    skip_id: str = ""
    endpoint: str
    campaign_id: str
    conditions: Conditions
    technique: str
    change_signature: str
    reason: str
    prior_experiment_id: str | None = None
    prior_verdict: str | None = None
    dagster_run_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _derive(self) -> "SkipRecord":
        if not self.skip_id:
            self.skip_id = stable_id(
                "skip", self.campaign_id, self.endpoint, self.change_signature, self.conditions.key()
            )
        return self


class FindingRecord(Record):
    """What was learned: a finding (about this system) or a lesson (about how to research it)."""

    TABLE: ClassVar[str] = "findings"
    ID_FIELD: ClassVar[str] = "finding_id"
    CONDITIONS_AS_JSON: ClassVar[bool] = True  # optional here, so one JSON column

    finding_id: str = ""
    endpoint: str
    campaign_id: str | None = None
    kind: Literal["finding", "lesson"] = "finding"
    bottleneck: str
    technique: str | None = None
    text: str
    confidence: Literal["low", "medium", "high"] = "medium"
    experiment_ids: list[str] = Field(default_factory=list)
    conditions: Conditions | None = None
    created_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _derive(self) -> "FindingRecord":
        if not self.finding_id:
            self.finding_id = stable_id("find", self.endpoint, self.campaign_id, self.kind, self.bottleneck, self.text)
        return self


class OpenQuestion(Record):
    """Something the campaign could not settle; the next campaign starts from these."""

    TABLE: ClassVar[str] = "open_questions"
    ID_FIELD: ClassVar[str] = "question_id"

    question_id: str = ""
    endpoint: str
    campaign_id: str | None = None
    question: str
    bottleneck: str | None = None
    rationale: str = ""
    status: Literal["open", "answered", "dropped"] = "open"
    answer: str | None = None
    answered_by_campaign_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _derive(self) -> "OpenQuestion":
        if not self.question_id:
            self.question_id = stable_id("q", self.endpoint, self.question)
        return self


class RecipeResult(Record):
    """One step of a diagnostic recipe (vary one workload property, hold the rest) and its outcome."""

    TABLE: ClassVar[str] = "recipe_results"
    ID_FIELD: ClassVar[str] = "result_id"
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("metrics",)

    result_id: str = ""
    endpoint: str
    campaign_id: str | None = None
    recipe: str
    step: str
    vary: str
    value: float
    rate: float | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)  # e.g. ttft_p95_ms, throughput_rps
    conclusion: str = ""
    config_hash: str | None = None
    dagster_run_id: str | None = None
    asset_key: str | None = None
    created_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _derive(self) -> "RecipeResult":
        if not self.result_id:
            self.result_id = stable_id(
                "rcp", self.endpoint, self.campaign_id, self.recipe, self.step, self.value, self.config_hash
            )
        return self


class RunRecord(Record):
    """Summary of one measurement run (a sweep or a replay), so the campaign history can be rebuilt."""

    TABLE: ClassVar[str] = "runs"
    ID_FIELD: ClassVar[str] = "run_id"
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("steps",)

    run_id: str
    endpoint: str
    campaign_id: str | None = None
    experiment_id: str | None = None
    kind: Literal["baseline", "candidate", "noise", "production_replay", "recipe", "other"] = "other"
    config_hash: str
    engine_args: list[str] = Field(default_factory=list)
    capacity_rps: float | None = None
    capacity_per_gpu: float | None = None
    knee_rate: float | None = None
    validity: Validity = "valid"
    invalid_reason: str | None = None
    steps: list[dict[str, Any]] = Field(default_factory=list)  # StepResult dumps
    gpu_divisor: int | None = None  # what capacity_per_gpu and tokens/s/GPU divide by (1 on a CPU host)
    price_per_gpu_hour_usd: float | None = None  # the price that held when it was measured, for $ / M tokens
    started_at: datetime | None = None
    dagster_run_id: str | None = None
    asset_key: str | None = None
    created_at: datetime = Field(default_factory=utcnow)

    @classmethod
    def from_sweep(
        cls,
        sweep: Any,
        *,
        run_id: str,
        kind: str = "other",
        campaign_id: str | None = None,
        experiment_id: str | None = None,
        dagster_run_id: str | None = None,
        asset_key: str | None = None,
        price_per_gpu_hour_usd: float | None = None,
    ) -> "RunRecord":
        """Build from a :class:`loadgen.results.SweepResult` (price: the endpoint's, for cost per token)."""
        started = None
        if sweep.started_at:
            started = datetime.fromtimestamp(sweep.started_at, timezone.utc).replace(tzinfo=None)
        return cls(
            run_id=run_id,
            endpoint=sweep.endpoint,
            campaign_id=campaign_id,
            experiment_id=experiment_id,
            kind=kind,
            config_hash=sweep.launch_config_hash,
            engine_args=list(sweep.engine_args),
            capacity_rps=sweep.capacity_rps,
            capacity_per_gpu=sweep.capacity_per_gpu,
            knee_rate=sweep.knee_rate,
            validity=sweep.validity,
            invalid_reason=sweep.invalid_reason,
            steps=[s.model_dump(mode="json") for s in sweep.steps],
            started_at=started,
            gpu_divisor=sweep.gpu_divisor,
            price_per_gpu_hour_usd=price_per_gpu_hour_usd,
            dagster_run_id=dagster_run_id,
            asset_key=asset_key,
        )


class DrafterRecord(Record):
    """A draft model trained on an endpoint's traffic (issue 15): what it was trained on, how well it
    drafts (offline and as served), and the harness's verdict. ``status`` turns ``stale`` when the
    endpoint's model drifts (its fingerprint no longer equals ``model_signature``): retrain, never reuse."""

    TABLE: ClassVar[str] = "drafters"
    ID_FIELD: ClassVar[str] = "drafter_id"
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("acceptance_offline", "acceptance_served", "train")

    drafter_id: str = ""
    endpoint: str
    model_signature: str  # research.drift.model_fingerprint of the endpoint when trained
    data_signature: str  # research.drafter.data_signature of the on-policy examples
    method: str = "draft_model"
    path: str
    num_speculative_tokens: int
    layers: int
    steps: int
    train_examples: int
    train_tokens: int
    heldout_examples: int = 0
    train_s: float
    train: dict[str, Any] = Field(default_factory=dict)  # lr, loss, data generation time, ...
    acceptance_offline: dict[str, Any] = Field(default_factory=dict)  # research.drafter.OfflineAcceptance
    acceptance_served: dict[str, Any] = Field(default_factory=dict)  # ServedAcceptance, once measured
    verdict: Verdict | None = None  # the harness's, once the candidate ran
    correctness: str | None = None  # its correctness label
    status: Literal["fresh", "stale"] = "fresh"
    stale_reason: str | None = None
    created_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _derive(self) -> "DrafterRecord":
        if not self.drafter_id:
            self.drafter_id = stable_id(
                "drafter",
                self.endpoint,
                self.model_signature,
                self.data_signature,
                self.layers,
                self.steps,
                self.num_speculative_tokens,
            )
        return self


class AAEvidenceRecord(Record):
    """The A/A evidence of one configuration's repeats for one estimator (loadgen.noise_prior): a noise
    floor's sweeps, or an experiment's, share their schedules and say how much two runs differ. Later
    floors of the endpoint measured with the same ``protocol`` pool it into the prior their verdicts start
    from. A floor adopted from an experiment has the experiment's ``source`` and replaces its row."""

    TABLE: ClassVar[str] = "aa_evidence"
    ID_FIELD: ClassVar[str] = "evidence_id"

    evidence_id: str = ""
    endpoint: str
    campaign_id: str | None = None
    source: str  # what was repeated: "reference" (the campaign's first floor) or an experiment's id
    config_hash: str
    protocol: str  # research.campaign.noise.protocol_key: hardware and sweep settings
    estimator: Literal["crossing", "service_rate"]
    sweeps: int
    df: float  # fractional where a fit on the same runs took some (loadgen.host_elasticity)
    sum_sq: float  # df x the variance of a paired log difference of two runs
    limiting: str | None = None  # the SLA target that limits the configuration: its noise class
    created_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _derive(self) -> "AAEvidenceRecord":
        if not self.evidence_id:
            self.evidence_id = stable_id("aa", self.endpoint, self.campaign_id, self.source, self.estimator)
        return self


RECORD_TYPES: dict[str, type[Record]] = {
    cls.TABLE: cls
    for cls in (
        EndpointRecord,
        CampaignRecord,
        ExperimentRecord,
        ConfirmationRecord,
        SkipRecord,
        FindingRecord,
        OpenQuestion,
        RecipeResult,
        RunRecord,
        DrafterRecord,
        AAEvidenceRecord,
    )
}
