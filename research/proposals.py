"""Typed objects of the research loop's thinking half: diagnosis, questions and proposals.

They are pydantic models so that a diagnosis or a proposal can be stored as Dagster metadata or
in the research memory and read back unchanged, and so that an LLM's structured output can be
validated field by field (a small model's junk is rejected with reasons, never trusted).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from specs.enums import ProposalSource

#: the bottleneck vocabulary shared by diagnosis, the rule-based proposer and the LLM prompts.
BOTTLENECKS: dict[str, str] = {
    "batch_limit": "requests queue while the running batch sits at the engine's sequence limit",
    "prefix_cache_unused": "prompts share long prefixes but the engine recomputes them (cache off or missing)",
    "kv_cache_pressure": "KV-cache blocks run out: high usage, preemptions or recomputation",
    "prefill_interference": "long prefills stall running decodes (inter-token latency spikes)",
    "prefill_bound": "time to first token grows steeply with prompt length; prefill dominates",
    "decode_bound": "generation dominates: each step is small and memory-bound, inter-token latency limits capacity",
    "cpu_overhead": "the device idles between steps: kernel launches, scheduling, input preparation, Python overhead",
    "communication": "collective communication (all-reduce, all-gather) takes a large share of step time",
    "matmul_bound": "dense matmuls (or MoE experts) dominate step time",
    "attention_bound": "attention kernels dominate step time",
    "sampling_overhead": "sampling, logits processing or structured-output masks take a large share",
    "speculation_waste": "speculative decoding runs but few draft tokens are accepted",
    "graph_capture_stalls": "CUDA graphs are captured lazily while serving: each new padded shape stalls every request",
    "padding_waste": "inputs are padded far beyond their real size: most attention work reads padding",
    "memory_headroom": "too little device memory is left beyond the KV cache: it OOMs under sustained load",
}

Category = Literal["attention", "matmul", "communication", "sampling", "cpu_scheduling", "memory", "other"]
CATEGORIES: tuple[str, ...] = ("attention", "matmul", "communication", "sampling", "cpu_scheduling", "memory", "other")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Bottleneck(Model):
    """One suspected limit, with the observations that point to it."""

    name: str
    severity: float = Field(ge=0.0, le=1.0)
    evidence: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in BOTTLENECKS:
            raise ValueError(f"unknown bottleneck {value!r}; known: {', '.join(BOTTLENECKS)}")
        return value


class ProfileStep(Model):
    """One engine step found in a trace (vLLM annotates each with its prefill/decode mix)."""

    start_us: float
    duration_us: float
    context_requests: int = 0
    context_tokens: int = 0
    generation_requests: int = 0
    generation_tokens: int = 0


class ProfileBreakdown(Model):
    """Where the time of a profiled window went, by operation category, plus timeline facts."""

    source: str  # trace file name
    device: Literal["cpu", "gpu"]
    window_us: float  # span of the analysed events
    busy_us: float  # union of (device) op time in the window
    category_us: dict[str, float]  # category -> exclusive time (us)
    category_share: dict[str, float]  # category -> fraction of categorised time
    top_ops: list[tuple[str, str, float]] = Field(default_factory=list)  # (name, category, us)
    idle_gap_fraction: float = 0.0  # share of the window with no op running on the device (while work is due)
    idle_gaps: int = 0  # gaps longer than the threshold (short launch gaps count in the fraction only)
    idle_gap_p95_us: float = 0.0
    cpu_gpu_overlap: float | None = None  # GPU traces: share of GPU-busy time with CPU work running too
    steps: int = 0
    mixed_step_fraction: float = 0.0  # steps that run prefill and decode together
    decode_step_ms: float | None = None  # mean duration of decode-only steps
    mixed_step_ms: float | None = None  # mean duration of steps with prefill + decode
    prefill_interrupts_decode: bool = False

    def share(self, category: str) -> float:
        return self.category_share.get(category, 0.0)


class WorkloadResult(Model):
    """One diagnostic-workload variant, measured at a fixed rate (a recipe step's one value)."""

    recipe: str
    step: str
    vary: str
    value: float
    rate: float
    requests: int = 0
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    e2e_p95_ms: float | None = None
    throughput_rps: float | None = None
    error_rate: float = 0.0
    cached_prompt_fraction: float | None = None
    engine_metrics: dict[str, float] = Field(default_factory=dict)


class Diagnosis(Model):
    """What limits one endpoint, with the numbers behind it. Bottlenecks are sorted, worst first."""

    endpoint: str
    engine_kind: str  # engines.registry's kind: which adapter's vocabulary and flags the rules use
    engine_args: list[str] = Field(default_factory=list)
    engine_version: str | None = None  # ``name==version`` of the engine diagnosed (patch recipes are per version)
    bottlenecks: list[Bottleneck] = Field(default_factory=list)
    traits: dict[str, float] = Field(default_factory=dict)
    request_stats: dict[str, float] = Field(default_factory=dict)
    engine_stats: dict[str, float] = Field(default_factory=dict)
    profile: ProfileBreakdown | None = None
    workloads: list[WorkloadResult] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # what could not be measured, and why

    def bottleneck(self, name: str) -> Bottleneck | None:
        return next((b for b in self.bottlenecks if b.name == name), None)

    def summary(self) -> str:
        """A few lines for logs and Dagster metadata."""
        lines = [f"{self.endpoint}: {len(self.bottlenecks)} suspected bottleneck(s)"]
        for b in self.bottlenecks:
            lines.append(f"- {b.name} (severity {b.severity:.2f}): " + "; ".join(b.evidence[:3]))
        return "\n".join(lines)


class Intervention(Model):
    """An exact change: engine-argument diff (specs.engine_args conventions) and/or a patch.

    ``engine_arg_diff`` maps ``--flag`` to a value, ``None`` for a bare switch, or
    ``specs.engine_args.REMOVE`` to delete the flag.
    """

    technique: str
    engine_arg_diff: dict[str, str | None] = Field(default_factory=dict)
    engine_patch: str | None = None  # unified diff against the engine's source
    lossy: bool = False  # changes outputs (quantisation): needs distribution checks and human review

    def describe(self) -> str:
        parts = [f"{flag}={'<switch>' if v is None else v}" for flag, v in self.engine_arg_diff.items()]
        if self.engine_patch:
            parts.append("engine patch")
        return f"{self.technique}: " + (", ".join(parts) or "no change")


class Proposal(Model):
    """One subagent's answer to one research question."""

    proposal_id: str
    question: str
    bottleneck: str
    explanation: str
    observations: list[str] = Field(default_factory=list)
    intervention: Intervention
    alternatives: list[Intervention] = Field(default_factory=list)  # ranked, best first
    prediction: str
    predicted_capacity_ratio: float | None = None
    falsification: str
    source: ProposalSource


class ResearchQuestion(Model):
    """What the orchestrator hands one subagent: the question and explicit context."""

    question_id: str
    bottleneck: str
    question: str
    context: dict = Field(default_factory=dict)


class RejectedProposal(Model):
    """A proposal (or raw model output) that did not pass validation, and why."""

    question_id: str
    reasons: list[str]
    proposal: Proposal | None = None
    raw: str | None = None


class DrafterSuggestion(Model):
    """A proposal to train a draft model on the endpoint's traffic (not an engine diff: a drafter must
    be trained first, with ``command``, and then runs through the harness as a candidate)."""

    endpoint: str
    explanation: str
    evidence: list[str]
    k: int
    draft_cost_ratio: float  # one draft step / one target step (bytes read)
    verify_cost: float  # one verification step of k+1 tokens / one plain decode step, at this load
    break_even_acceptance_length: float  # tokens per target step above which drafting pays
    ngram_acceptance_length: float | None = None  # observed with n-gram speculation, if it ran
    command: str


class ProposalBatch(Model):
    """Everything one proposal round produced; only ``proposals`` may be run."""

    source: ProposalSource
    questions: list[ResearchQuestion] = Field(default_factory=list)
    proposals: list[Proposal] = Field(default_factory=list)
    rejected: list[RejectedProposal] = Field(default_factory=list)
    # The drafter rule (research.rules.drafter_training): train a drafter, and why, or why not.
    drafter: DrafterSuggestion | None = None
    drafter_why_not: str | None = None
