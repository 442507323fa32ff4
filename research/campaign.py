"""Campaign control: the research loop run headless, within its deadline and budget, resumable.

    baseline (K sweeps -> noise floor, reference outputs)
      -> diagnose -> proposals (N subagents)
      -> for each proposal: already run? decided in memory? valid? fits the budget? -> harness -> verdict
      -> two or more confirmed wins: their combination, with ablations
      -> best confirmed lossless win becomes the working baseline -> diagnose again ...
    until the deadline, the GPU-hour budget, max_rounds, or no supported experiment remains;
    then save the best configuration, the open questions and the review report.

The candidates of one round are independent: they run in parallel up to the campaign's GPU cap
(``CampaignSpec.concurrent_engines``: max_concurrent_gpus // GPUs per engine; 1 on a CPU host), each
engine on GPUs of its own (engines.gpu_lease). Their records are kept in proposal order, so the
verdicts and the winner do not depend on which finished first.

The campaign's first baseline stays the reference for total gain. State is written atomically
after every experiment (research.state), so a killed process resumes without re-running
finished experiments. Lossy wins are never adopted automatically: they are reported for
human review. Nothing is deployed.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, Field

from specs.config import CampaignSpec, EndpointSpec
from specs.engine_args import REMOVE, apply_diff, diff_args
from loadgen.results import Comparison, NoiseFloor, SweepResult
from research.correctness import CorrectnessThresholds
from research.harness import CandidateResult, Progress, SweepFn, run_candidate, stop_orphan
from research.loop import Contender, pick_winner
from research.state import (
    BaselineRecord,
    CampaignState,
    ExperimentRecord,
    ProposalRecord,
    RoundRecord,
    StateStore,
    experiment_id,
)

NoiseFn = Callable[[list[SweepResult]], NoiseFloor]
CompareFn = Callable[[NoiseFloor, list[SweepResult]], Comparison]
#: (endpoint, working baseline, pool, state) -> diagnosis as a plain dict (the Diagnosis model dump)
DiagnoseFn = Callable[[EndpointSpec, BaselineRecord, pl.DataFrame, CampaignState], dict[str, Any]]
#: (endpoint, diagnosis dict, state, how many, diff signatures already tried on this baseline) -> proposals
ProposeFn = Callable[[EndpointSpec, dict[str, Any], CampaignState, int, list[str]], list[ProposalRecord]]


class CampaignOutcome(BaseModel):
    """What a campaign run ended with (also written as ``<campaign>.outcome.json``)."""

    @property
    def failure(self) -> str | None:
        """Why this outcome is a failure for the caller (non-zero exit), or None.

        A campaign fails when it has no valid baseline (invalid, or refused by its deadline or
        budget) or when no experiment could be measured to a verdict. A paused one (not finished)
        has not failed: it resumes when run again."""
        if not self.finished:
            return None
        if self.reference_capacity is None:
            return f"no valid baseline: {self.end_reason}"
        if self.experiments_measured == 0:
            return f"no experiment could run: {self.end_reason}"
        return None

    campaign: str
    campaign_id: str
    endpoint: str
    finished: bool
    end_reason: str | None
    reference_args: list[str] = Field(default_factory=list)
    reference_capacity: float | None = None
    best_args: list[str] = Field(default_factory=list)
    best_capacity: float | None = None
    total_gain: float | None = None  # best / reference capacity
    total_gain_is_lower_bound: bool = False  # the reference held no rate down to its floor
    adopted_experiments: list[str] = Field(default_factory=list)
    experiments_run: int = 0
    experiments_measured: int = 0  # run to a verdict of better / same / worse (not invalid)
    experiments_skipped: int = 0
    resumed: int = 0
    gpu_hours_used: float = 0.0
    active_minutes: float = 0.0
    open_questions: list[str] = Field(default_factory=list)
    state_path: str
    report_path: str | None = None
    best_config_path: str | None = None


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
    state: CampaignState, store: StateStore, limits: Limits, estimate_s: float, running_s: float = 0.0
) -> str | None:
    """Why the next experiment must not start (launch check), or None when it fits.

    ``running_s``: estimated seconds of the experiments still running beside it (parallel candidates);
    not charged yet, their GPU-hours are counted as committed."""
    elapsed = store.elapsed_s(state)
    if elapsed + estimate_s > limits.deadline_s:
        return (
            f"deadline: the next experiment (about {estimate_s / 60:.1f} min) would not finish within the "
            f"{limits.deadline_s / 60:.0f} min deadline ({elapsed / 60:.1f} min used)"
        )
    cost = estimate_s / 3600 * limits.units
    committed = state.gpu_hours_used + running_s / 3600 * limits.units
    if committed + cost > limits.gpu_hours:
        return (
            f"budget: the next experiment (about {cost:.3f} GPU-h) would exceed the {limits.gpu_hours} GPU-h "
            f"budget ({state.gpu_hours_used:.3f} used"
            + (f", {committed - state.gpu_hours_used:.3f} running" if running_s else "")
            + ")"
        )
    return None


def total_gain(reference: BaselineRecord | None, best: BaselineRecord | None) -> tuple[float | None, bool]:
    """(best / reference capacity, is a lower bound). A reference whose repeats held no rate down to
    their floor counts at that floor: the gain is then a finite lower bound, never "inf"."""
    from loadgen.noise import reference_capacity

    if reference is None or best is None:
        return None, False
    ref, bound = reference_capacity(reference.noise)
    if ref <= 0:
        return None, False
    return best.capacity / ref, bound


def contender(record: ExperimentRecord) -> Contender:
    """An experiment record as the adoption rule (research.loop.pick_winner) sees it."""
    return Contender(
        id=record.experiment_id,
        confirmed=record.confirmed,
        lossy=record.lossy,
        capacity=record.capacity_mean,
        change_size=len(record.diff),
    )


def workload_signature(pool: pl.DataFrame) -> str:
    """Short hash of the pool's shape (lengths and prefix sharing): 'same workload' for the memory."""
    n = max(pool.height, 1)
    traits = {
        "prompt_p50": round(float(pool["prompt_tokens"].median() or 0), -1),
        "prompt_p90": round(float(pool["prompt_tokens"].quantile(0.9) or 0), -1),
        "output_p50": round(float(pool["expected_output_tokens"].median() or 0), -1),
        "prefix_groups_per_100": round(100 * pool["prefix_group"].n_unique() / n),
    }
    return hashlib.sha256(json.dumps(traits, sort_keys=True).encode()).hexdigest()[:12]


def _config_hash(endpoint: EndpointSpec, args: list[str]) -> str:
    return endpoint.with_engine_args(args).launch_config_hash()


# ----------------------------------------------------------------------------------- defaults
def _default_noise(sweeps: list[SweepResult]) -> NoiseFloor:
    from loadgen.noise import noise_floor

    return noise_floor(sweeps)


def _default_compare(noise: NoiseFloor, sweeps: list[SweepResult]) -> Comparison:
    from loadgen.compare import compare

    return compare(noise, sweeps)


def _default_diagnose(campaign: CampaignSpec, workdir: Path, progress: Progress) -> DiagnoseFn:
    """research.loop.diagnose_step on the working baseline's own sweeps and the pool."""

    def diagnose(
        endpoint: EndpointSpec, baseline: BaselineRecord, pool: pl.DataFrame, state: CampaignState
    ) -> dict[str, Any]:
        from research.loop import diagnose_step

        spec = endpoint.with_engine_args(list(baseline.engine_args))
        found = diagnose_step(
            spec,
            pool,
            baseline.sweeps,
            profile_seconds=campaign.profile_seconds,
            workdir=workdir / f"diagnosis-{len(state.rounds) + 1}",
            progress=progress,
        )
        return found.model_dump(mode="json")

    return diagnose


def proposal_record(proposal: Any) -> ProposalRecord:
    """Reduce a research.proposals.Proposal to what the campaign stores."""
    iv = proposal.intervention
    return ProposalRecord(
        proposal_id=proposal.proposal_id,
        title=iv.describe(),
        technique=iv.technique,
        bottleneck=proposal.bottleneck,
        engine_arg_diff=dict(iv.engine_arg_diff),
        lossy=iv.lossy,
        explanation=proposal.explanation,
        prediction=proposal.prediction,
        falsification=proposal.falsification,
        source=proposal.source,
        raw=proposal.model_dump(mode="json"),
    )


def _default_propose(mode: str, memory=None) -> ProposeFn:
    """The orchestrator (research.loop.propose_step): LLM subagents when configured, rules otherwise."""

    def propose(
        endpoint: EndpointSpec, diagnosis: dict[str, Any], state: CampaignState, n: int, skip: list[str]
    ) -> list[ProposalRecord]:
        from research.loop import propose_step
        from research.proposals import Diagnosis

        working = state.working
        batch = propose_step(
            endpoint.with_engine_args(list(working.engine_args)),
            Diagnosis.model_validate(diagnosis),
            n=n,
            mode=mode,
            campaign_id=state.campaign_id,
            experiment_id=f"round-{len(state.rounds) + 1}",
            memory=memory,
            skip=skip,
            baseline={
                "capacity_rps": working.capacity,
                "noise_threshold": working.noise.threshold,
                "capacities": working.noise.capacities,
            },
        )
        return [proposal_record(p) for p in batch.proposals]

    return propose


# ----------------------------------------------------------------------------------- the loop
class Paused(Exception):
    """This call's time window is spent; the campaign resumes from its state file next time."""


class _Campaign:
    def __init__(
        self,
        campaign: CampaignSpec,
        endpoint: EndpointSpec,
        state_dir: Path,
        memory,
        proposer: str,
        progress: Progress,
        pool: pl.DataFrame | None,
        sweep_fn: SweepFn | None,
        noise_fn: NoiseFn | None,
        compare_fn: CompareFn | None,
        diagnose_fn: DiagnoseFn | None,
        propose_fn: ProposeFn | None,
        thresholds: CorrectnessThresholds | None,
        stop_after_s: float | None = None,
    ):
        self.campaign, self.endpoint, self.memory, self.progress = campaign, endpoint, memory, progress
        self.stop_after_s, self.call_started = stop_after_s, time.monotonic()
        self.state_dir = Path(state_dir)
        self.store = StateStore(self.state_dir, campaign.name)
        self.limits = Limits.of(campaign, endpoint)
        self.concurrent = campaign.concurrent_engines(endpoint)
        from engines.registry import adapter_class

        if self.concurrent > 1 and adapter_class(endpoint.engine.kind).manages_process:
            from engines.gpu_lease import host_gpus

            if not host_gpus():  # nothing to pin engines to: parallel engines would share GPUs
                progress(
                    f"no GPUs known on this host (AUTORESEARCH_GPUS unset, no NVML): experiments run "
                    f"one at a time, not {self.concurrent}"
                )
                self.concurrent = 1
        self.sweep_fn, self.thresholds = sweep_fn, thresholds
        self.noise_fn = noise_fn or _default_noise
        self.compare_fn = compare_fn or _default_compare
        self.workdir = self.state_dir / f"{campaign.name}.runs"
        self.diagnose_fn = diagnose_fn or _default_diagnose(campaign, self.workdir, progress)
        kind = proposer if proposer != "auto" else campaign.proposer
        if propose_fn is None and kind == "llm":  # fail before the baseline, not after it
            from research.llm_agents import Orchestrator

            Orchestrator.from_env("llm")
        self.propose_fn = propose_fn or _default_propose(kind, memory)
        self.baseline_repeats = max(endpoint.sweep.repeats, 2)
        self.repeats = campaign.repeats
        loaded = self.store.load()
        if loaded is not None:
            loaded.resumes += 1
            self.state = loaded
            progress(
                f"resuming campaign {campaign.name} ({len(loaded.experiments)} experiments recorded, "
                f"{loaded.active_seconds / 60:.1f} min used)"
            )
        else:
            self.state = CampaignState(
                campaign=campaign.name,
                endpoint=endpoint.name,
                campaign_id=f"{campaign.name}-{time.strftime('%Y%m%dT%H%M%S')}",
            )
        self.pool = pool if pool is not None else self._pool()
        self.signature = workload_signature(self.pool)

    # -- plumbing -----------------------------------------------------------------------------
    def save(self) -> None:
        self.store.save(self.state)

    def _pool(self) -> pl.DataFrame:
        """The replay pool, built once per campaign and kept beside the state (same pool on resume)."""
        path = self.state_dir / f"{self.campaign.name}.pool.parquet"
        if path.exists():
            return pl.read_parquet(path)
        from specs.models import tokenizer_dir
        from replay.build import build_pool

        self.progress(f"building the replay pool for {self.endpoint.name}")
        build = build_pool(self.endpoint, tokenizer_dir(self.endpoint.model.path), self.state_dir / "pool")
        if not build.fidelity.passed:
            self.progress(
                "  warning: the replay pool fails its fidelity check: "
                + ", ".join(r.name for r in build.fidelity.failures)
            )
        pool = build.pool
        pool.write_parquet(path)
        return pool

    def _memory(self, what: str, fn: Callable[[], Any]) -> Any:
        if self.memory is None:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - the memory must never end a campaign
            self.progress(f"  warning: research memory ({what}) failed: {exc!r}")
            return None

    def _conditions(self):
        from research.loop import conditions

        ident = self.state.reference.identity if self.state.reference else {}
        return conditions(self.endpoint, self.signature, ident.get("engine_version", "unknown"))

    def _budget(self, estimate_s: float, running_s: float = 0.0) -> str | None:
        """The launch check before an experiment: an end reason when the campaign's deadline or budget
        cannot fit it; raises Paused when only this call's window (``stop_after_s``) cannot."""
        problem = budget_problem(self.state, self.store, self.limits, estimate_s, running_s)
        if problem is None and self.stop_after_s is not None:
            used = time.monotonic() - self.call_started
            if used + estimate_s > self.stop_after_s:
                raise Paused(
                    f"paused: the next experiment (about {estimate_s / 60:.1f} min) does not fit the "
                    f"{self.stop_after_s / 60:.1f} min left to this call ({used / 60:.1f} min used); "
                    "run the campaign again to resume"
                )
        return problem

    def _charge(self, result: CandidateResult) -> None:
        """Charge a measurement to the budget and keep its timings for the estimator."""
        self.state.gpu_hours_used += result.wall_s / 3600 * self.limits.units
        if result.startup_s is not None:
            self.state.startup_s.append(round(result.startup_s, 2))
        self.state.sweep_s.extend(round(t, 2) for t in result.sweep_wall_s)

    def _measure(
        self,
        args: list[str],
        repeats: int,
        *,
        noise: NoiseFloor | None,
        lossy: bool = False,
        capture: bool = False,
        check: bool = True,
        progress: Progress | None = None,
    ) -> CandidateResult:
        reference = None
        if check and not capture and self.state.reference is not None:
            reference = self.state.reference_outputs.get(_config_hash(self.endpoint, self.state.reference.engine_args))
        label = (
            "baseline"
            if capture
            else experiment_id("run", self.state.working.engine_args if self.state.working else [], args, repeats)
        )
        workdir = self.workdir / f"{label}-{len(self.state.experiments)}-{int(time.time())}"
        # one active file per engine: parallel experiments each record their own (see stop_orphan)
        return run_candidate(
            self.endpoint,
            args,
            self.pool,
            noise,
            repeats,
            lossy=lossy,
            reference=reference,
            capture=capture,
            thresholds=self.thresholds,
            workdir=workdir,
            active_file=self.workdir / f"active_engine.{label}.json",
            sweep_fn=self.sweep_fn,
            compare_fn=self.compare_fn,
            progress=progress or self.progress,
            extra_repeats=self.campaign.extra_repeats,
            baseline_sustained=self.state.working.soak.sustained_rate
            if self.state.working is not None and self.state.working.soak is not None
            else None,
        )

    # -- steps --------------------------------------------------------------------------------
    def baseline(self) -> str | None:
        """Measure the starting configuration (reference) once; return an end reason on failure."""
        if self.state.reference is not None:
            return None
        args = list(self.endpoint.engine.args)
        problem = self._budget(estimate_seconds(self.state, self.endpoint, self.baseline_repeats))
        if problem:
            return problem
        self.progress(f"baseline: {' '.join(args)} ({self.baseline_repeats} sweeps)")
        result = self._measure(args, self.baseline_repeats, noise=None, capture=True)
        self._charge(result)
        if result.verdict == "invalid" or result.reference is None:
            self.state.failed_baseline = result.model_dump(mode="json", exclude={"reference"})
            self.save()
            return f"baseline invalid: {result.invalid_reason or 'no reference outputs'}"
        noise = self.noise_fn(result.sweeps)
        record = BaselineRecord(
            engine_args=args,
            sweeps=result.sweeps,
            noise=noise,
            identity=result.identity,
            wall_s=result.wall_s,
            soak=result.soak,
        )
        self.state.reference = self.state.working = record
        self.state.baselines.append(record)
        self.state.reference_outputs[_config_hash(self.endpoint, args)] = result.reference
        self.progress(
            f"baseline capacity {noise.capacity_mean:.3g} req/s (spread {noise.capacity_rel_spread:.1%} "
            f"over {noise.repeats} sweeps: {noise.capacities})"
        )
        self._memory("campaign", lambda: self.memory.record_campaign(self._campaign_record("running")))
        for i, sweep in enumerate(result.sweeps):
            self._record_run(sweep, f"{self.state.campaign_id}-baseline-{i}", "baseline", None)
        self.save()
        return None

    def _record_run(self, sweep: SweepResult, run_id: str, kind: str, experiment: str | None) -> None:
        if self.memory is None:  # no memory here (a GPU machine): recorded later by record_campaign
            return
        from memory_db.records import RunRecord

        self._memory(
            "run",
            lambda: self.memory.record_run(
                RunRecord.from_sweep(
                    sweep,
                    run_id=run_id,
                    kind=kind,
                    campaign_id=self.state.campaign_id,
                    experiment_id=experiment,
                    price_per_gpu_hour_usd=self.endpoint.hardware.price_per_gpu_hour_usd,
                )
            ),
        )

    def _campaign_record(self, status: str):
        from memory_db.records import CampaignRecord

        ref, best = self.state.reference, self.state.working
        return CampaignRecord(
            campaign_id=self.state.campaign_id,
            campaign=self.campaign.name,
            endpoint=self.endpoint.name,
            status=status,
            stop_reason=self.state.end_reason,
            baseline_config_hash=_config_hash(self.endpoint, ref.engine_args) if ref else None,
            baseline_engine_args=ref.engine_args if ref else [],
            baseline_capacity=ref.capacity if ref else None,
            best_config_hash=_config_hash(self.endpoint, best.engine_args) if best else None,
            best_engine_args=best.engine_args if best else [],
            best_capacity=best.capacity if best else None,
            total_gain_ratio=total_gain(ref, best)[0],
            dagster_run_ids=list(self.state.dagster_run_ids),
            notes="; ".join(self.state.open_questions[:5]),
        )

    def current_round(self) -> RoundRecord | str:
        """The unfinished round, or a new one (diagnosis + proposals); a string = why the campaign ends."""
        rounds = self.state.rounds
        if rounds and not rounds[-1].finished:
            return rounds[-1]
        if len(rounds) >= self.campaign.max_rounds:
            return f"max rounds: {self.campaign.max_rounds} rounds done"
        working = self.state.working
        previous = rounds[-1] if rounds else None
        tried = sorted(
            {
                json.dumps(e.diff, sort_keys=True)
                for e in self.state.experiments.values()
                if e.baseline_args == working.engine_args
            }
            | {
                json.dumps(p.engine_arg_diff, sort_keys=True)
                for r in rounds
                if r.baseline_args == working.engine_args
                for p in r.proposals
            }
        )
        if previous is not None and previous.baseline_args == working.engine_args:
            diagnosis = previous.diagnosis  # same baseline: the diagnosis stands
        else:
            self.progress(f"round {len(rounds) + 1}: diagnosing {' '.join(working.engine_args)}")
            diagnosis = self.diagnose_fn(self.endpoint, working, self.pool, self.state)
            for b in diagnosis.get("bottlenecks", [])[:4]:
                self.progress(f"  bottleneck {b.get('name')} (severity {b.get('severity', 0):.2f})")
        offered = self.propose_fn(self.endpoint, diagnosis, self.state, self.campaign.subagents, tried)
        proposals = [p for p in offered if not self._already_tried(p, working.engine_args)]
        if not proposals and previous is not None and previous.baseline_args == working.engine_args:
            proposals = [p for p in self._alternatives(previous) if not self._already_tried(p, working.engine_args)]
        proposals = self._below_mde(proposals, working)
        record = RoundRecord(
            round=len(rounds) + 1,
            baseline_args=list(working.engine_args),
            diagnosis=diagnosis,
            proposals=proposals[: self.campaign.subagents],
        )
        if not proposals:  # the round is kept: the review shows what was diagnosed and why nothing ran
            named = ", ".join(b.get("name", "?") for b in diagnosis.get("bottlenecks", [])) or "no bottleneck"
            record.finished = True
            record.outcome = f"no experiment to run: diagnosed {named}; " + (
                f"all {len(offered)} proposal(s) for this baseline were tried already"
                if offered
                else f"no technique of the {self.endpoint.engine.kind} engine addresses it (or every one was tried)"
            )
            rounds.append(record)
            self.save()
            self.progress(f"  {record.outcome}")
            return "no supported experiment remains: " + record.outcome
        rounds.append(record)
        self.save()
        for p in record.proposals:
            self.progress(f"  proposal {p.proposal_id}: {p.title}" + (" [lossy]" if p.lossy else ""))
        return record

    def _alternatives(self, previous: RoundRecord) -> list[ProposalRecord]:
        from research.proposals import Proposal

        out = []
        for p in previous.proposals:
            try:
                proposal = Proposal.model_validate(p.raw)
            except Exception:  # noqa: BLE001 - a record without a full proposal has no alternatives
                continue
            for i, alt in enumerate(proposal.alternatives):
                out.append(
                    proposal_record(
                        proposal.model_copy(
                            update={
                                "proposal_id": f"{proposal.proposal_id}-alt{i + 1}",
                                "intervention": alt,
                                "alternatives": [],
                            }
                        )
                    )
                )
        return out

    def _already_tried(self, proposal: ProposalRecord, base: list[str]) -> bool:
        after = apply_diff(base, proposal.engine_arg_diff)
        return after == base or any(
            e.baseline_args == base and e.engine_args == after for e in self.state.experiments.values()
        )

    def run_round(self, rnd: RoundRecord) -> str | None:
        """Run the round's proposals, then combinations; adopt the best win. Returns an end reason or None."""
        working = self.state.working
        reason = self._run_proposals(rnd, working)
        if reason:
            return reason
        winners = [
            self.state.experiments[e]
            for e in rnd.experiment_ids
            if self.state.experiments[e].confirmed
            and not self.state.experiments[e].lossy
            and self.state.experiments[e].kind == "candidate"
        ]
        winners.sort(key=lambda e: -(e.capacity_mean or 0))
        candidates = list(winners)
        if len(winners) >= 2:
            combo, reason = self._combination(rnd, winners[:3], working)
            if reason:
                return reason
            if combo is not None and combo.confirmed:
                candidates.append(combo)
        for e in (self.state.experiments[e] for e in rnd.experiment_ids):
            if e.confirmed and e.lossy:
                self._question(
                    f"Lossy change {e.title} beat the noise floor ({self._ratio(e)}); a person must "
                    f"review its correctness evidence before it is used.",
                    e,
                )
        winner = pick_winner(contender(e) for e in candidates)
        if winner is not None:
            reason = self._adopt(rnd, self.state.experiments[winner.id])
            if reason:
                return reason
        else:
            verdicts = [self.state.experiments[e].verdict for e in rnd.experiment_ids]
            rnd.outcome = (
                "no lossless change beat the noise floor in every repeat (verdicts: "
                + (", ".join(verdicts) or "none")
                + ")"
            )
        rnd.finished = True
        self.save()
        return None

    def _ratio(self, e: ExperimentRecord) -> str:
        c = e.comparison
        return f"capacity x{c.capacity_ratio:.2f} vs working baseline" if c and c.capacity_ratio else "no ratio"

    def _below_mde(self, proposals: list, working: BaselineRecord) -> list:
        """Order proposals so that those the harness can see run first: a proposal predicted to gain less
        than the minimum detectable effect at this noise goes after them, and when the round has no slot
        left for it (``subagents``) it waits, as an open question with the reason (a `same` for it would
        say nothing). A slot the visible proposals leave free still runs it: a prediction is a guess (prefix
        caching was predicted +46% on the CPU default and measured x4), and the verdict's interval says how
        little it could see."""
        mde = working.noise.mde
        if mde is None:
            return proposals
        visible = [p for p in proposals if p.predicted_capacity_ratio is None or p.predicted_capacity_ratio - 1 >= mde]
        below = sorted((p for p in proposals if p not in visible), key=lambda p: -(p.predicted_capacity_ratio or 0))
        slots = max(0, self.campaign.subagents - len(visible))
        for p in below[slots:]:
            self._question(
                f"{p.title} is predicted to gain {p.predicted_capacity_ratio - 1:+.1%}, below the "
                f"harness's minimum detectable effect {mde:.1%} at this noise: queued until the harness "
                "can see it (more repeats, longer steps, a quieter host)"
            )
        return visible + below[:slots]

    def _question(self, text: str, e: ExperimentRecord | None = None) -> None:
        if text in self.state.open_questions:
            return
        self.state.open_questions.append(text)

    def _prepare(
        self, rnd: RoundRecord, proposal: ProposalRecord, working: BaselineRecord
    ) -> tuple[str, ExperimentRecord | None]:
        """(experiment id, the experiment to measure) for a proposal; None when nothing is to be
        measured: already run (resume), rejected before launch, or skipped on a prior decision in
        memory (recorded here)."""
        from research.interventions import validate_intervention
        from research.proposals import Intervention

        base = working.engine_args
        intervention = Intervention(
            technique=proposal.technique, engine_arg_diff=proposal.engine_arg_diff, lossy=proposal.lossy
        )
        check = validate_intervention(
            intervention, base, self.endpoint.engine.kind, gpu_count=self.endpoint.hardware.gpu_count
        )
        after = check.args_after or apply_diff(base, proposal.engine_arg_diff)
        lossy = check.lossy
        eid = experiment_id("candidate", base, after, self.repeats)
        if eid in self.state.experiments:
            if eid not in rnd.experiment_ids:
                rnd.experiment_ids.append(eid)
            return eid, None
        record = ExperimentRecord(
            experiment_id=eid,
            round=rnd.round,
            kind="candidate",
            proposal_ids=[proposal.proposal_id],
            title=proposal.title,
            baseline_args=list(base),
            engine_args=list(after),
            diff=diff_args(base, after),
            lossy=lossy,
            verdict="skipped",
            started_at=time.time(),
        )
        if not check.ok:
            record.verdict, record.invalid_reason = "invalid", "rejected before launch: " + "; ".join(check.reasons)
            self.progress(f"  {proposal.proposal_id}: {record.invalid_reason}")
            return eid, self._finish(rnd, record, proposal, memory=False)
        prior = self._prior(record)
        if prior is not None:
            record.skip_reason = f"memory: {prior.reason}"
            self.progress(f"  {proposal.proposal_id}: skipped ({record.skip_reason})")
            self._memory(
                "skip",
                lambda: self.memory.record_skip(
                    endpoint=self.endpoint.name,
                    campaign_id=self.state.campaign_id,
                    conditions=self._conditions(),
                    technique=proposal.technique,
                    change=record.diff,
                    prior=prior,
                ),
            )
            return eid, self._finish(rnd, record, proposal, memory=False)
        return eid, record

    def _run_proposals(self, rnd: RoundRecord, working: BaselineRecord) -> str | None:
        """Measure the round's proposals, up to ``self.concurrent`` at once; returns an end reason or None.

        Each launch passes the same budget check as a serial run (counting the experiments still
        running); when one does not fit, no further one starts, the running ones finish and are
        recorded, then the campaign ends (or pauses). Records are put in proposal order at the end."""
        todo: list[tuple[ExperimentRecord, ProposalRecord]] = []
        order: list[str] = []
        for proposal in rnd.proposals:
            eid, record = self._prepare(rnd, proposal, working)
            if eid not in order:
                order.append(eid)
                if record is not None:
                    todo.append((record, proposal))
        results: queue.Queue = queue.Queue()
        running: dict[str, tuple[ExperimentRecord, ProposalRecord, float]] = {}
        reason: str | None = None
        stop: BaseException | None = None
        try:
            while todo or running:
                while todo and len(running) < self.concurrent and reason is None and stop is None:
                    record, proposal = todo[0]
                    estimate = estimate_seconds(self.state, self.endpoint, self.repeats)
                    try:
                        reason = self._budget(estimate, sum(e for _, _, e in running.values()))
                    except Paused as pause:
                        stop = pause
                    if reason is not None or stop is not None:
                        break
                    todo.pop(0)
                    record.started_at = time.time()
                    self.progress(f"experiment {record.experiment_id}: {proposal.title}")
                    if self.concurrent == 1:  # serial: measured in this thread, exactly as before
                        self._fill(
                            record,
                            self._measure(record.engine_args, self.repeats, noise=working.noise, lossy=record.lossy),
                        )
                        self._finish(rnd, record, proposal)
                        continue
                    running[record.experiment_id] = (record, proposal, estimate)
                    self._start_measure(record, working, results)
                if not running:
                    break
                eid, result = results.get()
                record, proposal, _ = running.pop(eid)
                if isinstance(result, BaseException):
                    stop = stop or result
                    continue
                self._fill(record, result)
                self._finish(rnd, record, proposal)
        except BaseException:
            self._stop_running(running)
            raise
        finally:
            self._in_order(rnd, order)
        if stop is not None:
            raise stop
        return reason

    def _start_measure(self, record: ExperimentRecord, working: BaselineRecord, results: queue.Queue) -> None:
        """Measure one experiment in a worker thread; its result (or exception) goes to ``results``.

        Daemon threads: an interrupted campaign stops the engines (_stop_running) and exits without
        waiting for sweeps to end."""

        def progress(message: str) -> None:
            self.progress(f"  [{record.experiment_id}] {message.strip()}")

        def work() -> None:
            try:
                results.put(
                    (
                        record.experiment_id,
                        self._measure(
                            record.engine_args, self.repeats, noise=working.noise, lossy=record.lossy, progress=progress
                        ),
                    )
                )
            except BaseException as exc:  # noqa: BLE001 - handed to the campaign's thread
                results.put((record.experiment_id, exc))

        threading.Thread(target=work, name=f"experiment-{record.experiment_id}", daemon=True).start()

    def _stop_running(self, running: dict) -> None:
        """Stop the engines of experiments still running (the campaign was interrupted)."""
        for eid in running:
            label = experiment_id("run", self.state.working.engine_args, running[eid][0].engine_args, self.repeats)
            stop_orphan(self.workdir / f"active_engine.{label}.json", self.progress)

    def _in_order(self, rnd: RoundRecord, order: list[str]) -> None:
        """Put this round's experiments in proposal order (the order a serial run records them in),
        in the round and in the state, so nothing downstream depends on completion order."""
        rank = {eid: i for i, eid in enumerate(order)}
        done = [e for e in rnd.experiment_ids if e in rank]
        if not done:
            return
        done.sort(key=rank.__getitem__)
        slots = iter(done)
        rnd.experiment_ids = [next(slots) if e in rank else e for e in rnd.experiment_ids]
        moved = {e: self.state.experiments.pop(e) for e in done}
        self.state.experiments.update(moved)
        self.save()

    def _prior(self, record: ExperimentRecord):
        """A decision in memory that makes this run pointless (same change, same conditions).

        A decision taken in *this* campaign on another baseline does not count: the baseline moved.
        """
        if self.memory is None:
            return None
        prior = self._memory(
            "prior decision", lambda: self.memory.prior_decision(self.endpoint.name, record.diff, self._conditions())
        )
        if prior is None or not prior.should_skip or prior.verdict not in ("same", "worse"):
            return None
        if prior.campaign_id == self.state.campaign_id:
            return None
        return prior

    def _fill(self, record: ExperimentRecord, result: CandidateResult) -> None:
        record.verdict, record.confirmed = result.verdict, result.confirmed
        record.invalid_reason, record.sweeps = result.invalid_reason, result.sweeps
        record.comparison, record.correctness = result.comparison, result.correctness
        record.identity, record.log_tail, record.wall_s = result.identity, result.log_tail, result.wall_s
        record.soak = result.soak
        record.cost_hours = result.wall_s / 3600 * self.limits.units
        record.finished_at = time.time()
        if self.state.reference is not None and record.capacity_mean is not None:
            from loadgen.noise import reference_capacity

            ref = reference_capacity(self.state.reference.noise)[0]
            record.capacity_ratio_vs_reference = record.capacity_mean / ref if ref > 0 else None
        self._charge(result)

    def _finish(
        self, rnd: RoundRecord, record: ExperimentRecord, proposal: ProposalRecord | None, memory: bool = True
    ) -> None:
        record.finished_at = record.finished_at or time.time()
        self.state.experiments[record.experiment_id] = record
        if record.experiment_id not in rnd.experiment_ids:
            rnd.experiment_ids.append(record.experiment_id)
        if record.verdict == "invalid" and record.invalid_reason and not record.invalid_reason.startswith("rejected"):
            self._question(
                f"{record.title} was invalid ({record.invalid_reason.splitlines()[0][:200]}): "
                f"fix or rule out the cause before trying it again.",
                record,
            )
        if memory and record.verdict != "skipped":
            self._record_experiment(record, proposal)
        self.save()
        return None

    def _memory_id(self, record: ExperimentRecord) -> str:
        return f"{self.state.campaign_id}:{record.experiment_id}"

    def _record_experiment(self, record: ExperimentRecord, proposal: ProposalRecord | None) -> None:
        if self.memory is None:
            return
        from memory_db.records import ExperimentRecord as MemExperiment
        from research import drafter

        c, corr = record.comparison, record.correctness
        noise = self.state.working.noise if self.state.working else None
        mem = MemExperiment(
            experiment_id=self._memory_id(record),
            endpoint=self.endpoint.name,
            campaign_id=self.state.campaign_id,
            conditions=self._conditions(),
            bottleneck=proposal.bottleneck if proposal else "combination",
            technique=proposal.technique if proposal else record.kind,
            change=record.diff,
            base_config_hash=_config_hash(self.endpoint, record.baseline_args),
            candidate_config_hash=_config_hash(self.endpoint, record.engine_args),
            hypothesis=proposal.explanation if proposal else record.title,
            prediction=proposal.prediction if proposal else "",
            falsification=proposal.falsification if proposal else "",
            verdict=record.verdict,
            invalid_reason=record.invalid_reason,
            capacity_ratio=c.capacity_ratio if c else None,
            baseline_capacity=c.baseline_capacity if c else None,
            candidate_capacity=record.capacity_mean,
            noise_threshold=c.threshold if c else None,
            noise_rel_spread=noise.capacity_rel_spread if noise else None,
            repeats=len(record.sweeps),
            effect=c.effect if c else None,
            effect_low=c.effect_low if c else None,
            effect_high=c.effect_high if c else None,
            mde=c.mde if c else None,
            lossless=not record.lossy,
            correctness=corr.model_dump(mode="json", exclude={"sequences"}) if corr else {},
            soak=record.soak.metadata() if record.soak else None,
            needs_review=bool(record.lossy or (corr and corr.flag_for_review)),
            evidence=(c.evidence if c else record.invalid_reason or ""),
            run_ids=[f"{self._memory_id(record)}-s{i}" for i in range(len(record.sweeps))],
        )
        self._memory("experiment", lambda: self.memory.record_experiment(mem))
        if proposal is not None and proposal.technique == drafter.TECHNIQUE:
            self._memory(
                "drafter verdict",
                lambda: drafter.record_judgement(
                    self.memory, self.endpoint, record.diff, record.verdict, corr.label if corr else None, record.sweeps
                ),
            )
        for i, sweep in enumerate(record.sweeps):
            self._record_run(sweep, f"{self._memory_id(record)}-s{i}", "candidate", self._memory_id(record))

    def _combination(
        self, rnd: RoundRecord, winners: list[ExperimentRecord], working: BaselineRecord
    ) -> tuple[ExperimentRecord | None, str | None]:
        """Run the winners together, with ablations (the combination minus each member)."""
        base = working.engine_args
        merged: dict[str, str | None] = {}
        members: list[ExperimentRecord] = []
        for w in winners:
            if any(flag in merged and merged[flag] != value for flag, value in w.diff.items()):
                self._question(
                    f"{w.title} conflicts with another winning change on the same flag; "
                    f"only the better one was combined.",
                    w,
                )
                continue
            merged.update(w.diff)
            members.append(w)
        if len(members) < 2:
            return None, None
        combo_args = apply_diff(base, merged)
        combo = self._run_extra(
            rnd,
            "combination",
            combo_args,
            [m.experiment_id for m in members],
            " + ".join(m.title for m in members),
            working,
        )
        if isinstance(combo, str):
            return None, combo
        for m in members:  # ablation: the combination without member m
            rest = {f: v for o in members if o is not m for f, v in o.diff.items()}
            ablated_args = apply_diff(base, rest)
            same = next(
                (
                    e
                    for e in self.state.experiments.values()
                    if e.baseline_args == base and e.engine_args == ablated_args and e.verdict != "skipped"
                ),
                None,
            )
            if same is None:
                ablation = self._run_extra(
                    rnd, "ablation", ablated_args, [m.experiment_id], f"combination without {m.title}", working
                )
                if isinstance(ablation, str):
                    return combo, ablation
                same = ablation
            combo.notes.append(
                f"ablation without {m.title}: experiment {same.experiment_id}, "
                f"capacity {same.capacity_mean} req/s, verdict {same.verdict}"
            )
        combo.notes.append(
            f"control: the working baseline's {len(working.sweeps)} sweeps "
            f"(capacity {working.capacity:.3g} req/s, spread {working.noise.capacity_rel_spread:.1%})"
        )
        best_single = max(m.capacity_mean or 0 for m in members)
        if combo.capacity_mean is not None and combo.capacity_mean <= best_single:
            self._question(
                f"Combining {' + '.join(m.title for m in members)} gave {combo.capacity_mean:.3g} req/s, "
                f"not more than the best single change ({best_single:.3g}): do they compete for one resource?",
                combo,
            )
        self.save()
        return combo, None

    def _run_extra(
        self, rnd: RoundRecord, kind: str, args: list[str], members: list[str], title: str, working: BaselineRecord
    ) -> ExperimentRecord | str:
        base = working.engine_args
        eid = experiment_id(kind, base, args, self.repeats)
        if eid in self.state.experiments:
            return self.state.experiments[eid]
        problem = self._budget(estimate_seconds(self.state, self.endpoint, self.repeats))
        if problem:
            return problem
        lossy = any(self.state.experiments[m].lossy for m in members if m in self.state.experiments)
        self.progress(f"{kind} {eid}: {title}")
        record = ExperimentRecord(
            experiment_id=eid,
            round=rnd.round,
            kind=kind,
            proposal_ids=members,
            title=title,
            baseline_args=list(base),
            engine_args=list(args),
            diff=diff_args(base, args),
            lossy=lossy,
            verdict="skipped",
            started_at=time.time(),
        )
        self._fill(record, self._measure(args, self.repeats, noise=working.noise, lossy=lossy))
        self._finish(rnd, record, None)
        return record

    def _adopt(self, rnd: RoundRecord, best: ExperimentRecord) -> str | None:
        """``best`` becomes the working baseline; its noise floor comes from its own sweeps (plus more if needed)."""
        sweeps = list(best.sweeps)
        wall = best.wall_s
        if len(sweeps) < self.baseline_repeats:
            more = self.baseline_repeats - len(sweeps)
            problem = self._budget(estimate_seconds(self.state, self.endpoint, more))
            if problem:
                return problem
            self.progress(f"re-measuring the new baseline: {more} more sweep(s)")
            extra = self._measure(best.engine_args, more, noise=None, check=False)
            self._charge(extra)
            if extra.verdict == "invalid":
                self._question(
                    f"{best.title} won its repeats but failed its extra baseline sweeps "
                    f"({extra.invalid_reason}); not adopted.",
                    best,
                )
                return None
            sweeps += extra.sweeps
            wall += extra.wall_s
        record = BaselineRecord(
            engine_args=list(best.engine_args),
            sweeps=sweeps,
            noise=self.noise_fn(sweeps),
            source_experiment=best.experiment_id,
            identity=best.identity,
            wall_s=wall,
            soak=best.soak,
        )
        self.state.working = record
        self.state.baselines.append(record)
        rnd.adopted = best.experiment_id
        gain, bound = total_gain(self.state.reference, record)
        self.progress(
            f"adopted {best.title}: capacity {record.capacity:.3g} req/s "
            f"(x{'>=' if bound else ''}{gain:.2f} vs the campaign's reference)"
            if gain
            else f"adopted {best.title}"
        )
        self._memory("confirmation", lambda: self.memory.record_confirmation(self._confirmation(best)))
        return None

    def _confirmation(self, best: ExperimentRecord):
        from memory_db.records import ConfirmationRecord

        return ConfirmationRecord(
            experiment_id=self._memory_id(best),
            endpoint=self.endpoint.name,
            campaign_id=self.state.campaign_id,
            new_config_hash=_config_hash(self.endpoint, best.engine_args),
            engine_args=list(best.engine_args),
            note=f"{best.title}: {self._ratio(best)}",
        )

    # -- ending ---------------------------------------------------------------------------------
    def finish(self, reason: str) -> CampaignOutcome:
        self.state.finished, self.state.end_reason = True, reason
        self.progress(f"campaign ends: {reason}")
        self.save()
        return self.outcome(write=True)

    def outcome(self, write: bool = False) -> CampaignOutcome:
        s = self.state
        ref, best = s.reference, s.working
        gain, gain_is_bound = total_gain(ref, best)
        report_path = best_path = None
        if write:
            if ref is not None:
                best_path = self.state_dir / f"{s.campaign}.best.json"
                best_path.write_text(
                    json.dumps(
                        {
                            "endpoint": self.endpoint.name,
                            "campaign_id": s.campaign_id,
                            "engine_args": best.engine_args,
                            "diff_vs_reference": diff_args(ref.engine_args, best.engine_args),
                            "capacity_rps": best.capacity,
                            "reference_capacity_rps": ref.capacity,
                            "total_gain": gain,
                            "total_gain_is_lower_bound": gain_is_bound,
                            "lossless": True,
                            "deployed": False,
                        },
                        indent=2,
                    )
                )
            from research.review import write_report

            try:
                report_path = write_report(s, self.endpoint, self.campaign, self.state_dir / f"{s.campaign}.review")
            except Exception as exc:  # noqa: BLE001 - a plotting failure must not lose the outcome
                self.progress(f"warning: the review report could not be written: {exc!r}")
            for q in s.open_questions if self.memory is not None else []:
                from memory_db.records import OpenQuestion

                self._memory(
                    "open question",
                    lambda q=q: self.memory.record_question(
                        OpenQuestion(endpoint=self.endpoint.name, campaign_id=s.campaign_id, question=q)
                    ),
                )
            self._memory(
                "campaign",
                lambda: self.memory.record_campaign(self._campaign_record("finished" if s.finished else "stopped")),
            )
        experiments = list(s.experiments.values())
        out = CampaignOutcome(
            campaign=s.campaign,
            campaign_id=s.campaign_id,
            endpoint=s.endpoint,
            finished=s.finished,
            end_reason=s.end_reason,
            reference_args=ref.engine_args if ref else [],
            reference_capacity=ref.capacity if ref else None,
            best_args=best.engine_args if best else [],
            best_capacity=best.capacity if best else None,
            total_gain=gain,
            total_gain_is_lower_bound=gain_is_bound,
            adopted_experiments=[b.source_experiment for b in s.baselines if b.source_experiment],
            experiments_run=sum(
                e.verdict != "skipped" and bool(e.sweeps or e.correctness or e.log_tail) for e in experiments
            ),
            experiments_measured=sum(e.verdict in ("better", "same", "worse") for e in experiments),
            experiments_skipped=sum(e.verdict == "skipped" for e in experiments),
            resumed=s.resumes,
            gpu_hours_used=s.gpu_hours_used,
            active_minutes=s.active_seconds / 60,
            open_questions=list(s.open_questions),
            state_path=str(self.store.path),
            report_path=str(report_path) if report_path else None,
            best_config_path=str(best_path) if best_path else None,
        )
        if write:
            (self.state_dir / f"{s.campaign}.outcome.json").write_text(out.model_dump_json(indent=2))
        return out

    def run(self) -> CampaignOutcome:
        if self.state.finished:
            self.progress(f"campaign {self.campaign.name} already finished: {self.state.end_reason}")
            return self.outcome()
        for active in sorted(self.workdir.glob("active_engine*.json")):
            stop_orphan(active, self.progress)
        self.save()
        try:
            reason = self.baseline()
            while reason is None:
                rnd = self.current_round()
                if isinstance(rnd, str):
                    reason = rnd
                    break
                reason = self.run_round(rnd)
        except Paused as pause:
            self.state.end_reason = str(pause)
            self.progress(str(pause))
            self.save()
            return self.outcome(write=True)
        return self.finish(reason)


def run_campaign(
    campaign: CampaignSpec,
    endpoint: EndpointSpec,
    *,
    state_dir: Path | str,
    memory=None,
    proposer: str = "auto",
    progress: Progress = print,
    pool: pl.DataFrame | None = None,
    sweep_fn: SweepFn | None = None,
    noise_fn: NoiseFn | None = None,
    compare_fn: CompareFn | None = None,
    diagnose_fn: DiagnoseFn | None = None,
    propose_fn: ProposeFn | None = None,
    thresholds: CorrectnessThresholds | None = None,
    stop_after_s: float | None = None,
    run_id: str | None = None,
) -> CampaignOutcome:
    """Run (or resume) ``campaign`` on ``endpoint`` headless until it ends; return its outcome.

    ``run_id``: the Dagster run this call is (the memory's campaign record lists every run of it).

    ``stop_after_s``: this call's time window. The campaign pauses (saved, not finished) before an
    experiment that would not end within it, so a campaign can be split across short calls
    (a GPU machine lent for 10 minutes at a time) and resumed by calling again.

    ``state_dir`` holds the state file, the replay pool, engine logs, the best configuration and
    the review report. ``memory`` is a memory_db.MemoryStore (None = no shared memory).
    ``proposer``: "auto" (the campaign's setting), "rules" or "llm". The remaining arguments
    replace parts of the loop (tests, alternative measurement); the defaults are the real ones.
    """
    if campaign.endpoint != endpoint.name:
        raise ValueError(f"campaign {campaign.name!r} targets endpoint {campaign.endpoint!r}, not {endpoint.name!r}")
    c = _Campaign(
        campaign,
        endpoint,
        Path(state_dir),
        memory,
        proposer,
        progress,
        pool,
        sweep_fn,
        noise_fn,
        compare_fn,
        diagnose_fn,
        propose_fn,
        thresholds,
        stop_after_s,
    )
    if run_id and run_id not in c.state.dagster_run_ids:
        c.state.dagster_run_ids.append(run_id)
    return c.run()


def record_campaign(
    campaign: CampaignSpec, endpoint: EndpointSpec, *, state_dir: Path | str, memory, pool: pl.DataFrame
) -> CampaignOutcome:
    """Record a campaign measured elsewhere (its state folder brought back from a GPU machine) into
    this host's research memory: the campaign, baseline runs, every experiment with its proposal,
    the adopted changes and the open questions, exactly as the campaign would have recorded them."""
    c = _Campaign(
        campaign,
        endpoint,
        Path(state_dir),
        memory,
        "rules",
        lambda message: None,
        pool,
        None,
        None,
        None,
        None,
        lambda *a: [],
        None,
    )
    s = c.state
    s.resumes = max(0, s.resumes - 1)  # loading it here is not a resume
    if s.reference is None:
        raise ValueError(f"{state_dir}: campaign {campaign.name} has no measured baseline to record")
    memory.record_campaign(c._campaign_record("running"))
    for i, sweep in enumerate(s.reference.sweeps):
        c._record_run(sweep, f"{s.campaign_id}-baseline-{i}", "baseline", None)
    proposals = {p.proposal_id: p for r in s.rounds for p in r.proposals}
    for record in s.experiments.values():
        if record.verdict != "skipped":
            c._record_experiment(record, proposals.get(record.proposal_ids[0]) if record.kind == "candidate" else None)
    for b in s.baselines[1:]:
        best = s.experiments.get(b.source_experiment or "")
        if best is not None:
            memory.record_confirmation(c._confirmation(best))
    return c.outcome(write=True)


__all__ = [
    "CampaignOutcome",
    "record_campaign",
    "Limits",
    "REMOVE",
    "budget_problem",
    "estimate_seconds",
    "proposal_record",
    "run_campaign",
    "workload_signature",
]
