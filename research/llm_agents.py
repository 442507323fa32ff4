"""The orchestrator and its subagents: diagnosis -> N research questions -> N proposals.

Agents talk to any OpenAI-compatible server through the ``openai`` client with structured
outputs (``response_format`` json_schema, strict), configured only from the environment:
``AUTORESEARCH_LLM_BASE_URL``, ``AUTORESEARCH_LLM_MODEL`` and the key from
``AUTORESEARCH_LLM_API_KEY`` or ``OPENAI_API_KEY`` (never logged, never stored).

Every model answer is parsed with pydantic and its intervention validated against the engine's
known arguments before it may run; junk is rejected with the reasons. Subagents run
concurrently (a thread pool: the sync client is thread-safe and works inside any event loop).
With no model configured (``proposer: auto``), the rule-based proposer in ``research.rules``
produces the same objects.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specs.enums import ProposerMode
from specs.engine_args import REMOVE
from research import rules
from research.interventions import tunable_flags_for, validate_intervention
from research.proposals import (
    BOTTLENECKS,
    Diagnosis,
    Intervention,
    Proposal,
    ProposalBatch,
    RejectedProposal,
    ResearchQuestion,
)

log = logging.getLogger(__name__)


class LLMNotConfigured(RuntimeError):
    """``proposer: llm`` was asked for but no model is configured in the environment."""


@dataclass(frozen=True)
class LLMConfig:
    """Where the agents' model lives. The key is excluded from repr so it never reaches a log."""

    model: str
    base_url: str | None = None
    api_key: str = field(default="", repr=False)
    timeout_s: float = 180.0
    max_tokens: int = 700
    temperature: float = 0.2
    max_workers: int = 4
    # Cap on every free-text field of an answer (chars); small models fill whatever room they get.
    max_text_chars: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "LLMConfig | None":
        """The configuration in the environment, or None when no model is set."""
        env = os.environ if env is None else env
        model = (env.get("AUTORESEARCH_LLM_MODEL") or "").strip()
        if not model:
            return None
        key = env.get("AUTORESEARCH_LLM_API_KEY") or env.get("OPENAI_API_KEY") or ""
        base_url = (env.get("AUTORESEARCH_LLM_BASE_URL") or "").strip() or None
        if not key and base_url is None:
            return None  # the public API without a key cannot work: treat as not configured
        return cls(model=model, base_url=base_url, api_key=key or "not-needed")

    def client(self):
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s, max_retries=1)


class SubagentContext(BaseModel):
    """The explicit context one subagent gets with its question."""

    model_config = ConfigDict(extra="forbid")

    campaign_id: str
    experiment_id: str
    replay_pool_id: str
    sla: dict = Field(default_factory=dict)
    baseline: dict = Field(default_factory=dict)  # capacity, noise floor, key latencies
    engine_kind: str
    engine_args: list[str] = Field(default_factory=list)
    gpu_count: int = 0
    findings: list[dict] = Field(default_factory=list)  # relevant results from research memory
    engine_version: str = ""  # ``name==version`` of the engine diagnosed (what a patch is written against)
    authored_patches: bool = False  # the campaign runs engine patches a subagent writes (engines.authored)


# ---------------------------------------------------------------- wire formats (strict JSON schema)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Length caps keep a rambling model inside max_tokens (a truncated answer is invalid JSON).
class WireChange(_Wire):
    flag: str = Field(max_length=60)
    value: str | None = Field(max_length=160)


class WireIntervention(_Wire):
    technique: str = Field(max_length=48)
    changes: list[WireChange] = Field(max_length=3)
    engine_patch: str | None = Field(max_length=1500)
    lossy: bool


class WireProposal(_Wire):
    explanation: str = Field(max_length=500)
    observations: list[Annotated[str, Field(max_length=160)]] = Field(max_length=3)
    intervention: WireIntervention
    alternatives: list[WireIntervention] = Field(max_length=2)
    prediction: str = Field(max_length=300)
    predicted_capacity_ratio: float | None
    falsification: str = Field(max_length=300)


class WireQuestion(_Wire):
    bottleneck: str
    question: str = Field(max_length=300)


class WireQuestions(_Wire):
    questions: list[WireQuestion]


def strict_schema(
    model: type[BaseModel], enums: Mapping[str, list[str]] | None = None, max_text_chars: int | None = None
) -> dict:
    """The model's JSON schema in the strict form structured outputs need: $refs inlined, every
    property required, no additional properties; ``enums`` pins string fields by name;
    ``max_text_chars`` tightens every string's maxLength."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(dict(defs[node["$ref"].rsplit("/", 1)[-1]]))
            node = {k: walk(v) for k, v in node.items() if k not in ("title", "default")}
            if max_text_chars and node.get("type") == "string" and "enum" not in node:
                node["maxLength"] = min(node.get("maxLength", max_text_chars), max_text_chars)
            if node.get("type") == "object" and "properties" in node:
                node["required"] = list(node["properties"])
                node["additionalProperties"] = False
                for name, values in (enums or {}).items():
                    if name in node["properties"] and values:
                        node["properties"][name] = {"type": "string", "enum": list(values)}
            return node
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


# ---------------------------------------------------------------- prompts

_SYSTEM = (
    "You are a performance engineer tuning an LLM inference server. Answer ONE research question with ONE "
    "proposal as JSON. Ground it in the observations given. The intervention is an exact change of engine "
    "command-line flags: each change has a flag (like --max-num-seqs) and a value (a string; null for a bare "
    'switch; "REMOVE" to delete the flag). Rank up to two alternatives. Predict what the measurements should '
    "show and say what result would prove the proposal wrong. Mark lossy=true for changes that alter outputs "
    "(quantisation)."
)
_PATCHES_OFF = " engine_patch must be null: this campaign changes flags only."
_PATCHES_ON = (
    " Where no flag reaches the cause, engine_patch may hold a unified diff (--- a/PATH, +++ b/PATH, @@ hunks with "
    "exact context lines) against the installed engine's Python source ({version}); paths start with the engine's "
    "package ({packages}/...). It runs in this candidate's engine only and its outputs are checked against the "
    "reference's. Otherwise null."
)


def system_prompt(context: "SubagentContext") -> str:
    """The subagents' instructions; whether they may write engine patches is the campaign's choice."""
    if not context.authored_patches:
        return _SYSTEM + _PATCHES_OFF
    from engines.registry import adapter_class

    cls = adapter_class(context.engine_kind)
    packages = ", ".join(cls.source_packages) if cls is not None and cls.source_packages else context.engine_kind
    return _SYSTEM + _PATCHES_ON.format(version=context.engine_version or context.engine_kind, packages=packages)


def _question_prompt(question: ResearchQuestion, diagnosis: Diagnosis, context: SubagentContext) -> str:
    bottleneck = diagnosis.bottleneck(question.bottleneck)
    facts = {
        "question": question.question,
        "bottleneck": question.bottleneck,
        "meaning": BOTTLENECKS.get(question.bottleneck, ""),
        "evidence": bottleneck.evidence if bottleneck else [],
        "engine": context.engine_kind,
        "engine_args": " ".join(context.engine_args),
        "engine_version": context.engine_version,
        "gpus": context.gpu_count,
        "sla": context.sla,
        "baseline": context.baseline,
        "traffic": {k: round(v, 3) for k, v in diagnosis.traits.items()},
        "past_findings": context.findings[:3],
        "ids": {"campaign": context.campaign_id, "experiment": context.experiment_id, "pool": context.replay_pool_id},
    }
    return json.dumps(facts, separators=(",", ":"), default=str)


# ---------------------------------------------------------------- orchestrator


def _to_intervention(wire: WireIntervention) -> Intervention:
    diff: dict[str, str | None] = {}
    for change in wire.changes:
        value = change.value
        if isinstance(value, str) and value.strip().upper() in ("REMOVE", REMOVE.upper()):
            value = REMOVE
        diff[change.flag.strip()] = value
    patch = wire.engine_patch if wire.engine_patch and wire.engine_patch.strip() else None
    return Intervention(
        technique=wire.technique.strip() or "unnamed", engine_arg_diff=diff, engine_patch=patch, lossy=wire.lossy
    )


class Orchestrator:
    """Turns a diagnosis into questions, runs one subagent per question, validates the answers."""

    def __init__(self, config: LLMConfig | None = None, *, mode: ProposerMode = "auto", client=None):
        if mode == "llm" and config is None:
            raise LLMNotConfigured(
                "proposer 'llm' needs AUTORESEARCH_LLM_MODEL (and AUTORESEARCH_LLM_BASE_URL or "
                "an API key) in the environment"
            )
        self.config = config if mode != "rules" else None
        self.mode = mode
        self._client = client

    @classmethod
    def from_env(cls, mode: ProposerMode = "auto") -> "Orchestrator":
        return cls(LLMConfig.from_env(), mode=mode)

    @property
    def uses_llm(self) -> bool:
        return self.config is not None

    def client(self):
        if self._client is None:
            self._client = self.config.client()
        return self._client

    def _complete(self, system: str, user: str, name: str, schema: dict) -> str:
        response = self.client().chat.completions.create(
            model=self.config.model,
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            response_format={"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}},
        )
        return response.choices[0].message.content or ""

    # -- questions
    def questions(self, diagnosis: Diagnosis, n: int) -> list[ResearchQuestion]:
        """N research questions about the diagnosed bottlenecks, worst first.

        With a model, it phrases them (bottleneck names are pinned by the schema); anything
        unusable is replaced by the rule-based questions, so this never fails on model junk.
        """
        fallback = rules.questions_for(diagnosis, n)
        names = [b.name for b in diagnosis.bottlenecks]
        if not self.uses_llm or not names:
            return fallback
        schema = strict_schema(WireQuestions, {"bottleneck": names}, self.config.max_text_chars)
        schema["properties"]["questions"]["maxItems"] = n
        user = json.dumps(
            {
                "task": f"Write {n} research questions, one per bottleneck, worst first.",
                "endpoint": diagnosis.endpoint,
                "bottlenecks": [{"name": b.name, "evidence": b.evidence[:2]} for b in diagnosis.bottlenecks[:n]],
            },
            separators=(",", ":"),
        )
        try:
            raw = self._complete("You plan performance experiments. Reply with JSON only.", user, "questions", schema)
            parsed = WireQuestions.model_validate_json(raw)
        except Exception as exc:  # noqa: BLE001 - model/server failure: fall back, say why
            log.warning("orchestrator questions unusable (%s); using rule-based questions", type(exc).__name__)
            return fallback
        out: list[ResearchQuestion] = []
        seen: set[str] = set()
        for q in parsed.questions:
            if q.bottleneck in names and q.bottleneck not in seen and q.question.strip():
                seen.add(q.bottleneck)
                out.append(
                    ResearchQuestion(
                        question_id=f"q{len(out) + 1}-{q.bottleneck}",
                        bottleneck=q.bottleneck,
                        question=q.question.strip(),
                    )
                )
        for q in fallback:  # fill up with the rule-based questions for the bottlenecks left out
            if len(out) >= n:
                break
            if q.bottleneck not in seen:
                seen.add(q.bottleneck)
                out.append(q.model_copy(update={"question_id": f"q{len(out) + 1}-{q.bottleneck}"}))
        return out[:n]

    # -- subagents
    def _subagent(
        self, question: ResearchQuestion, diagnosis: Diagnosis, context: SubagentContext, schema: dict
    ) -> Proposal | RejectedProposal:
        user = _question_prompt(question, diagnosis, context)
        try:
            raw = self._complete(system_prompt(context), user, "proposal", schema)
        except Exception as exc:  # noqa: BLE001 - a server error rejects this answer, not the round
            return RejectedProposal(
                question_id=question.question_id, reasons=[f"model call failed: {type(exc).__name__}: {str(exc)[:300]}"]
            )
        try:
            wire = WireProposal.model_validate_json(raw)
        except ValidationError as exc:
            reasons = [f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors()[:8]]
            return RejectedProposal(question_id=question.question_id, reasons=reasons, raw=raw[:4000])
        proposal = Proposal(
            proposal_id=f"llm-{context.experiment_id}-{question.question_id}",
            question=question.question,
            bottleneck=question.bottleneck,
            explanation=wire.explanation,
            observations=wire.observations,
            intervention=_to_intervention(wire.intervention),
            alternatives=[_to_intervention(a) for a in wire.alternatives],
            prediction=wire.prediction,
            predicted_capacity_ratio=wire.predicted_capacity_ratio,
            falsification=wire.falsification,
            source="llm",
        )
        return check_proposal(proposal, context, question.question_id)

    def run_subagents(
        self, questions: Sequence[ResearchQuestion], diagnosis: Diagnosis, context: SubagentContext
    ) -> ProposalBatch:
        """One subagent per question, concurrently; every answer validated before it is kept."""
        if not self.uses_llm:
            raise LLMNotConfigured("run_subagents needs a configured model; use propose() for the rule-based path")
        flags = tunable_flags_for(context.engine_kind)
        schema = strict_schema(WireProposal, {"flag": flags} if flags else None, self.config.max_text_chars)
        questions = [q.model_copy(update={"context": context.model_dump()}) for q in questions]
        with ThreadPoolExecutor(max_workers=max(1, min(self.config.max_workers, len(questions)))) as pool:
            answers = list(pool.map(lambda q: self._subagent(q, diagnosis, context, schema), questions))
        batch = ProposalBatch(source="llm", questions=list(questions))
        for answer in answers:
            (batch.proposals if isinstance(answer, Proposal) else batch.rejected).append(answer)
        return batch

    def propose(
        self,
        diagnosis: Diagnosis,
        context: SubagentContext,
        n: int = 3,
        *,
        findings_lookup: Callable[[str], list[dict]] | None = None,
        skip: Sequence[str] = (),
    ) -> ProposalBatch:
        """The proposal round: questions, subagents (or rules), validation.

        ``findings_lookup(bottleneck)`` returns research-memory findings for a bottleneck (e.g.
        ``memory_db.findings_for_bottleneck``); ``skip`` lists techniques / diffs already tried.
        In auto mode, when every model answer is rejected, the rule-based proposals fill in.
        """
        questions = self.questions(diagnosis, n)
        if findings_lookup is not None:
            findings = [f for q in questions for f in (findings_lookup(q.bottleneck) or [])][:6]
            context = context.model_copy(update={"findings": findings})
        if not self.uses_llm:
            proposals = rules.propose(diagnosis, n, gpu_count=context.gpu_count, skip=skip, questions=questions)
            return ProposalBatch(source="rules", questions=questions, proposals=proposals)
        batch = self.run_subagents(questions, diagnosis, context)
        tried = set(skip)
        kept = [p for p in batch.proposals if p.intervention.technique not in tried]
        batch = batch.model_copy(update={"proposals": kept})
        if not kept and self.mode == "auto":
            fallback = rules.propose(diagnosis, n, gpu_count=context.gpu_count, skip=skip, questions=questions)
            batch = batch.model_copy(update={"proposals": fallback})
        return batch


def check_proposal(
    proposal: Proposal, context: SubagentContext, question_id: str = "", adapter=None
) -> Proposal | RejectedProposal:
    """Validate a proposal's intervention against the engine; the normalised proposal or a rejection.

    Invalid alternatives are dropped (the main intervention decides acceptance).
    """
    check = validate_intervention(
        proposal.intervention, context.engine_args, context.engine_kind, adapter=adapter, gpu_count=context.gpu_count
    )
    if proposal.intervention.engine_patch and not context.authored_patches:
        reason = "the proposal carries an engine patch and this campaign does not run authored patches"
        return RejectedProposal(question_id=question_id or proposal.proposal_id, reasons=[reason], proposal=proposal)
    if not check.ok:
        return RejectedProposal(
            question_id=question_id or proposal.proposal_id, reasons=check.reasons, proposal=proposal
        )
    alternatives = []
    for alt in proposal.alternatives:
        alt_check = validate_intervention(
            alt, context.engine_args, context.engine_kind, adapter=adapter, gpu_count=context.gpu_count
        )
        if alt_check.ok:
            alternatives.append(alt.model_copy(update={"engine_arg_diff": alt_check.diff, "lossy": alt_check.lossy}))
    main = proposal.intervention.model_copy(update={"engine_arg_diff": check.diff, "lossy": check.lossy})
    return proposal.model_copy(update={"intervention": main, "alternatives": alternatives})
