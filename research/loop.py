"""The steps of the research loop, one implementation each, shared by the headless campaign
(research.campaign) and the Dagster research graph (assets/research.py via autoresearch.workflows).

    diagnose_step   request statistics, sweep metrics, the roofline, and (where the engine gives them)
                    a torch profile and diagnostic workloads -> Diagnosis
    propose_step    the orchestrator: LLM subagents or the rule-based proposer -> ProposalBatch
    conditions      the memory's "same conditions" key
    pick_winner     which confirmed change is adopted (the one rule both callers use)

No Dagster imports: the app layer decides where files live and passes folders in.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from pydantic import BaseModel, Field

from specs.config import EndpointSpec
from research.harness import CandidateResult, Progress
from research.proposals import Proposal


# ------------------------------------------------------------------------------------ diagnose
def endpoint_roofline(spec: EndpointSpec):
    """The decode roofline of the endpoint's model on its declared hardware (None when unknown)."""
    from engines import EngineError, resolve_model_dir
    from engines.registry import adapter_class
    from research.roofline import roofline_for

    if not adapter_class(spec.engine.kind).manages_process:  # an engine run elsewhere: weights not here
        return None
    try:
        model_dir = resolve_model_dir(spec)
    except EngineError:
        return None
    return roofline_for(model_dir, spec.hardware.gpu_type, spec.hardware.gpu_count, spec.hardware.memory_bandwidth_gbps)


def diagnose_step(
    spec: EndpointSpec,
    pool: pl.DataFrame,
    sweeps: list,
    *,
    recipes: dict | None = None,
    profile_seconds: float = 0.0,
    workdir: Path | None = None,
    progress: Progress = print,
    sustained_failure: str | None = None,
):
    """Diagnose the configuration ``spec`` declares from its sweeps and the pool (and, when its soak
    found it unstable, why: ``sustained_failure``).

    Evidence every engine gives (client-side latencies against load, the roofline) always; a torch
    profile under steady load and the diagnostic workloads only where the adapter can give them
    (one engine start). The diagnosis notes say which evidence was used."""
    from engines import EngineError, EngineRunInvalid, run_engine
    from engines.registry import adapter_class
    from loadgen.sweep import run_sweep
    from engines.registry import block_size_for
    from research.diagnosis import diagnose, request_stats
    from research.workloads import build_variants, measure_variants, select_recipes

    adapter = adapter_class(spec.engine.kind)
    capacities = [s.capacity_rps for s in sweeps if s.validity == "valid" and s.capacity_rps]
    steady_rate = max(0.25, 0.5 * min(capacities)) if capacities else 0.5
    block = block_size_for(spec)
    chosen = select_recipes(recipes or {}, request_stats(pool, block_size=block)) if recipes else []
    profile_seconds = profile_seconds if adapter.can_give("profile") else 0.0
    profile, workloads, notes = None, [], []
    if not adapter.can_give("profile"):
        notes.append(f"the {spec.engine.kind} engine has no profiler: client-side latencies and the roofline used")
    if not adapter.can_give("metrics"):
        notes.append(f"the {spec.engine.kind} engine exports no /metrics: queueing judged from client-side latencies")
    if adapter.manages_process and (profile_seconds > 0 or chosen):
        try:
            with run_engine(spec, profile=profile_seconds > 0, workdir=workdir, purpose="profile") as engine:
                if profile_seconds > 0:
                    progress(f"{spec.name}: profiling {profile_seconds:g}s at {steady_rate:g} req/s")

                    def profile_the_step(event) -> None:
                        # the profiler starts as the step's schedule does, after the warm-up burst, the cache
                        # reset and the hot prefixes: started before them it traced 18 s for a 6 s step on the
                        # 2-core host, and writing that trace took 43 s of the diagnosis
                        if event.phase == "step" and engine.profile_started is None:
                            engine.start_profile()

                    run_sweep(  # one request suffices: a profile is read per engine step, not as a percentile
                        engine,
                        pool,
                        spec,
                        rates=[steady_rate],
                        step_duration_s=profile_seconds,
                        check_client=False,
                        min_requests=1,
                        progress=profile_the_step,
                    )
                    profile = _parse_newest_profile(engine.stop_profile().parent, notes)
                if chosen:
                    from specs.models import tokenizer_dir
                    from replay.tokenize import ChatTokenizer

                    tok = ChatTokenizer.from_dir(tokenizer_dir(spec.model.path))
                    for recipe in chosen:
                        progress(f"{spec.name}: diagnostic workload {recipe.name}")
                        variants = build_variants(recipe, tok, base_rate=steady_rate, model=engine.served_model)
                        workloads += measure_variants(
                            variants,
                            lambda v: run_sweep(
                                engine, v.pool, spec, rates=[v.rate], step_duration_s=v.duration_s, check_client=False
                            ).steps[0],
                        )
        except EngineRunInvalid as exc:  # failed to start, or died mid-profile: nothing it measured is kept
            profile, workloads = None, []
            notes.append(f"profile/workloads invalid: {exc.reason}")
            if exc.log_tail:
                notes.append("engine log (tail): " + " | ".join(exc.log_tail.strip().splitlines()[-8:]))
            progress(f"{spec.name}: profile/workloads invalid: {exc.reason}")
        except EngineError as exc:  # a diagnosis without a profile is still a diagnosis
            notes.append(f"profile/workloads skipped: {str(exc).splitlines()[0]}")
    elif adapter.can_give("profile") and profile_seconds <= 0:
        notes.append("profiling disabled (campaign profile_seconds: 0)")
    diagnosis = diagnose(
        pool,
        sweeps,
        list(spec.engine.args),
        endpoint=spec.name,
        engine_kind=spec.engine.kind,
        profile=profile,
        workloads=workloads,
        block_size=block,
        roofline=endpoint_roofline(spec),
        sustained_failure=sustained_failure,
        engine_version=adapter.version_for(spec),
    )
    return diagnosis.model_copy(update={"notes": diagnosis.notes + notes}) if notes else diagnosis


def _parse_newest_profile(folder: Path, notes: list[str], wait_s: float = 30.0):
    """Parse the newest trace in ``folder`` that holds operator events; ranks finish writing at
    different times, so retry for a while. None (with a note) when none parses."""
    from research.profile import TraceError, parse_profile

    deadline, problems = time.monotonic() + wait_s, []
    while True:
        traces = sorted(folder.rglob("*.pt.trace.json*"), key=lambda p: p.stat().st_mtime, reverse=True)
        for trace in traces:
            try:
                return parse_profile(trace)
            except (TraceError, OSError, ValueError, EOFError) as exc:
                problems.append(f"{trace.name}: {exc}")
        if time.monotonic() > deadline:
            notes.append("profile not usable: " + ("; ".join(problems[-3:]) or f"no trace in {folder}"))
            return None
        time.sleep(3)


# ------------------------------------------------------------------------------------- propose
def propose_step(
    spec: EndpointSpec,
    diagnosis,
    *,
    n: int,
    mode: str,
    campaign_id: str,
    experiment_id: str,
    baseline: dict,
    memory=None,
    skip: Sequence[str] = (),
    authored_patches: bool = False,
):
    """One proposal round through the orchestrator (LLM subagents when configured, rules otherwise).

    ``spec`` carries the working configuration; ``baseline`` its capacity and noise floor;
    ``memory`` (a memory_db.MemoryStore) gives the subagents findings for the same bottleneck;
    ``authored_patches`` lets the subagents propose patches of the engine's code (engines.authored)."""
    from research.llm_agents import Orchestrator, SubagentContext

    context = SubagentContext(
        campaign_id=campaign_id,
        experiment_id=experiment_id,
        replay_pool_id=f"{spec.name}-{spec.traffic.kind}-{spec.traffic.seed}",
        sla=spec.sla.model_dump(),
        engine_kind=spec.engine.kind,
        engine_args=list(spec.engine.args),
        gpu_count=spec.hardware.gpu_count,
        baseline=baseline,
        authored_patches=authored_patches,
        engine_version=diagnosis.engine_version or "",
    )
    lookup = None
    if memory is not None:

        def lookup(bottleneck: str) -> list[dict]:
            return [f.model_dump(mode="json") for f in memory.findings_for_bottleneck(bottleneck, spec.name)]

    from research.drafter import propose_drafter

    batch = Orchestrator.from_env(mode).propose(diagnosis, context, n, findings_lookup=lookup, skip=list(skip))
    return propose_drafter(spec, diagnosis, batch, n=n, memory=memory, campaign_id=campaign_id, skip=skip)


# ------------------------------------------------------------------------------------- record
def conditions(spec: EndpointSpec, signature: str, engine_version: str):
    """The memory's "same conditions" key: model, hardware, engine and version, workload."""
    from memory_db.records import Conditions

    return Conditions(
        model=spec.model.served_name or spec.model.path,
        model_revision=spec.model.revision,
        hardware=spec.hardware.gpu_type,
        gpu_count=spec.hardware.gpu_count,
        engine=spec.engine.kind,
        engine_version=engine_version,
        workload_signature=signature,
    )


# ---------------------------------------------------------------------------------------- adopt
@dataclass(frozen=True)
class Contender:
    """One experiment as the adoption rule sees it."""

    id: str
    confirmed: bool  # better than the noise floor in every repeat
    lossy: bool
    capacity: float | None  # mean capacity over its repeats (req/s)
    change_size: int  # flags changed against the working baseline
    checked: bool = False  # its outputs were compared with the reference's (a correctness check ran on evidence)


class CandidateRun(BaseModel):
    """One proposal through the harness, as the asset graph passes it on (``candidate_runs``)."""

    proposal: Proposal
    baseline_args: list[str]
    skipped: str | None = None  # memory already decided this change under the same conditions: why
    result: CandidateResult | None = None
    experiment_id: str | None = None
    engine_args: list[str] = Field(default_factory=list)
    lossy: bool = False

    def verdict(self) -> "CandidateVerdict":
        """Its verdict with the evidence (``verdicts``)."""
        base = {
            "proposal_id": self.proposal.proposal_id,
            "baseline_args": self.baseline_args,
            "engine_args": self.engine_args,
            "lossy": self.lossy,
            "experiment_id": self.experiment_id,
        }
        if self.result is None:
            return CandidateVerdict(verdict="skipped", reason=self.skipped, **base)
        r, c = self.result, self.result.comparison
        return CandidateVerdict(
            verdict=r.verdict,
            confirmed=r.confirmed,
            capacity_ratio=c.capacity_ratio if c else None,
            evidence=c.evidence if c else None,
            invalid_reason=r.invalid_reason,
            capacities=[s.capacity_rps for s in r.sweeps],
            correctness=r.correctness.reason if r.correctness else None,
            correctness_unchecked=not (r.correctness is not None and r.correctness.checked),
            **base,
        )


class CandidateVerdict(BaseModel):
    """better / same / worse / invalid / skipped for one proposal, with what the adoption rule needs."""

    proposal_id: str
    verdict: str
    confirmed: bool = False
    capacity_ratio: float | None = None
    capacities: list[float | None] = Field(default_factory=list)
    evidence: str | None = None
    invalid_reason: str | None = None
    reason: str | None = None  # why it was skipped
    correctness: str | None = None
    correctness_unchecked: bool = True  # outputs never compared (no evidence, or no check): flagged, never adopted
    lossy: bool = False
    engine_args: list[str] = Field(default_factory=list)
    baseline_args: list[str] = Field(default_factory=list)
    experiment_id: str | None = None

    def contender(self) -> Contender:
        """As the adoption rule (pick_winner) sees it: the same fields the headless campaign gives it."""
        from specs.engine_args import diff_args

        capacities = [c for c in self.capacities if c is not None]
        return Contender(
            id=self.proposal_id,
            confirmed=self.confirmed,
            lossy=self.lossy,
            capacity=sum(capacities) / len(capacities) if capacities else None,
            change_size=len(diff_args(self.baseline_args, self.engine_args)),
            checked=not self.correctness_unchecked,
        )


class Adoption(BaseModel):
    """What a round adopted (``confirmed_baseline``): the winning verdict, and the wins left to a person
    (lossy ones, and those whose outputs were never compared)."""

    adopted: bool
    best: CandidateVerdict | None = None
    review_needed: list[str] = Field(default_factory=list)


def pick_winner(contenders: Iterable[Contender]) -> Contender | None:
    """The change to adopt: among confirmed lossless ones whose outputs were compared with the reference's,
    the highest mean capacity; a tie goes to the smaller change. Lossy wins, and wins whose outputs were
    never compared (no evidence from the engine), are never adopted by themselves: a person reviews them,
    since a speed-up that was not checked may be one that broke the outputs."""
    eligible = [c for c in contenders if c.confirmed and not c.lossy and c.checked and c.capacity is not None]
    return max(eligible, key=lambda c: (c.capacity, -c.change_size, c.id), default=None)
