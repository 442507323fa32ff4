"""The steps a user runs, composed from the domain packages: shared by the CLI and the Dagster assets.

Each function takes an EndpointSpec (and plain data), does one user-visible step and returns
typed results; where things live on disk is decided here, once.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

from specs import paths
from specs.config import CampaignSpec, DefinitionSet, EndpointSpec
from research.loop import CandidateRun


# --- replay pools ---------------------------------------------------------------------------


def pool_dir(spec: EndpointSpec) -> Path:
    folder = paths.pools_dir() / spec.name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def production_profile_path(spec: EndpointSpec) -> Path:
    """Where the production profile the pool was judged against is kept (the drift sensor's reference)."""
    return pool_dir(spec) / "production_profile.npz"


def build_replay_pool(spec: EndpointSpec):
    """Build the endpoint's replay pool with its fidelity report; keep the production profile."""
    from specs.models import tokenizer_dir
    from replay.build import build_pool

    build = build_pool(spec, tokenizer_dir(spec.model.path), pool_dir(spec))
    if build.accepted:  # a rejected build left the last good pool and its drift reference in place
        build.production_profile.save(production_profile_path(spec))
    return build


def pool_path(spec: EndpointSpec) -> Path:
    """Where the endpoint's accepted replay pool is kept (replay.build writes it there)."""
    return pool_dir(spec) / f"{spec.name}-pool.parquet"


def load_pool(spec: EndpointSpec) -> pl.DataFrame:
    """The endpoint's current replay pool (built on first use)."""
    from specs.pool_schema import check_pool

    path = pool_path(spec)
    if not path.exists():
        build = build_replay_pool(spec)
        if not build.accepted:
            raise ValueError(
                f"{spec.name}: no replay pool passes its fidelity check; fix the traffic source "
                f"(traffic.path) and run `autoresearch replay build {spec.name}`:\n{build.table()}"
            )
        return build.pool
    return check_pool(pl.read_parquet(path))


# --- measurement ----------------------------------------------------------------------------


def tqdm_progress(total_hint: int, desc: str) -> Callable:
    """A sweep progress callback drawing a tqdm bar on stderr (one tick per finished step)."""
    from tqdm import tqdm

    bar = tqdm(total=total_hint, desc=desc, unit="step", file=sys.stderr, leave=True)

    def update(event) -> None:
        bar.total = max(bar.total or 0, event.max_steps)
        if event.phase == "step_done":
            bar.update(1)
        bar.set_postfix_str(event.message[:70])
        if event.phase == "done":
            bar.close()

    return update


def sweep_endpoint(
    spec: EndpointSpec, *, progress: bool = True, repeats: int = 1, users: list[int] | None = None, rates: bool = True
):
    """Start the engine, run ``repeats`` capacity sweeps on the replay pool, stop the engine.

    With concurrency counts (``users``, else the endpoint's ``sweep.users``) a concurrency sweep
    (closed-loop users) follows on the same engine and is returned last; ``rates=False`` runs it
    alone (``autoresearch sweep ENDPOINT --users 1,2,4``).

    The engine runs in ``engines.run_engine``: one that dies (or hangs) mid-sweep makes that sweep
    ``invalid`` with the reason and the engine log's tail as a note (the CLI exits 5, as for any invalid
    sweep); a failed launch raises ``EngineRunInvalid`` (the CLI: exit 2 with the reason and the tail)."""
    from engines import EngineRunInvalid, run_engine
    from launchers import LaunchRefused, preflight
    from loadgen.sweep import run_sweep
    from loadgen.users import run_user_sweep

    if preflight(spec) is not None:  # before the pool is built: nothing runs or is written here
        raise LaunchRefused(
            f"endpoint {spec.name!r} runs on Modal: its sweeps run inside an experiment's container "
            "(`autoresearch experiment run` through the Modal launcher, docs/launchers.md); the "
            "Modal app builds offline, nothing was started or written."
        )
    pool = load_pool(spec)
    sweeps, busy = [], False
    try:
        with run_engine(spec, workdir=paths.runs_dir() / "sweeps" / spec.name, purpose="sweep") as engine:
            for i in range(repeats if rates else 0):
                engine.check_alive()  # a repeat never starts on an engine that died in the previous one
                callback = (
                    tqdm_progress(spec.sweep.max_steps, f"{spec.name} sweep {i + 1}/{repeats}") if progress else None
                )
                busy = True
                sweeps.append(run_sweep(engine, pool, spec, progress=callback, repeats_label=f"repeat-{i}"))
                busy = False
            counts = users or spec.sweep.users
            if counts:
                engine.check_alive()
                callback = tqdm_progress(len(counts), f"{spec.name} users") if progress else None
                busy = True
                sweeps.append(
                    run_user_sweep(engine, pool, spec, users=counts, progress=callback, repeats_label="users")
                )
                busy = False
    except EngineRunInvalid as exc:
        if exc.launch_failed:
            raise
        engine_died(spec, sweeps, exc, mid_sweep=busy)
    return sweeps


def engine_died(spec: EndpointSpec, sweeps: list, exc, *, mid_sweep: bool) -> None:
    """Record an engine that died (``engines.EngineRunInvalid``) in ``sweeps``: the sweep it interrupted
    (a new, empty one when it raised out of the sweep) is ``invalid`` with the reason, and carries the
    engine log's tail as a note."""
    from loadgen.results import SweepResult

    note = "engine log (tail):\n" + exc.log_tail if exc.log_tail else "engine log: empty"
    if mid_sweep or not sweeps:
        sweeps.append(
            SweepResult(
                endpoint=spec.name,
                engine_args=list(spec.engine.args),
                launch_config_hash=spec.launch_config_hash(),
                started_at=time.time(),
                steps=[],
                validity="invalid",
                invalid_reason=exc.reason,
                notes=[note],
            )
        )
        return
    last = sweeps[-1]
    if last.validity == "valid":
        last.validity, last.invalid_reason = "invalid", exc.reason
    last.notes.append(note)


def write_experiment(
    spec: EndpointSpec,
    folder: Path,
    *,
    repeats: int = 1,
    label: str = "experiment",
    noise=None,
    reference=None,
    cuda_visible_devices: str | None = None,
) -> Path:
    """Write an experiment unit measuring ``spec`` as configured (spec.json + the endpoint's replay
    pool as pool.parquet) into ``folder``; return the spec file. See research.experiment."""
    from research.experiment import ExperimentSpec

    unit = ExperimentSpec.for_endpoint(
        spec,
        repeats=repeats,
        label=label,
        noise_floor=noise,
        reference=reference,
        cuda_visible_devices=cuda_visible_devices,
    )
    return unit.write(folder, load_pool(spec))


# --- campaigns ------------------------------------------------------------------------------


def resolve_campaign(definitions: DefinitionSet, name: str) -> tuple[CampaignSpec, EndpointSpec]:
    """A campaign by name, or an endpoint name (its first declared campaign, else a default one)."""
    if name in definitions.campaigns:
        campaign = definitions.campaigns[name]
        return campaign, definitions.endpoint(campaign.endpoint)
    if name in definitions.endpoints:
        return definitions.campaign_of(name), definitions.endpoints[name]
    raise KeyError(
        f"no campaign or endpoint named {name!r}; campaigns: {', '.join(sorted(definitions.campaigns))}; "
        f"endpoints: {', '.join(sorted(definitions.endpoints))}"
    )


def campaign_dir(campaign: CampaignSpec, partition: str | None = None) -> Path:
    """The campaign's folder; the partition named after the campaign (the CLI's) shares the plain one."""
    plain = partition in (None, campaign.name)
    folder = paths.home() / "campaigns" / (campaign.name if plain else f"{campaign.name}__{partition}")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def check_campaign_launch(endpoint: EndpointSpec) -> None:
    """Refuse, before any work (no folder, pool, Dagster run or engine), an endpoint whose launcher
    cannot run a campaign here: LaunchRefused says why and what to do."""
    from launchers import LaunchRefused, preflight

    if preflight(endpoint) is not None:
        raise LaunchRefused(
            f"endpoint {endpoint.name!r} runs on Modal: credentials are set and the Modal app builds offline, but "
            "a campaign's experiments are not dispatched to Modal yet (issue 11: the experiment unit and GPU pools); "
            "nothing was started or written."
        )


def launch_campaign(
    campaign: CampaignSpec,
    endpoint: EndpointSpec,
    *,
    proposer: str | None = None,
    partition: str | None = None,
    from_declared: bool = False,
    stop_after_s: float | None = None,
    progress: Callable[[str], None] = print,
    run_id: str | None = None,
):
    """Resume the campaign's unfinished run, or start a new one; return its outcome.

    A finished run is kept (its folder renamed after its campaign id) and a new one starts from
    the endpoint's working baseline: the latest configuration the research memory confirmed, so
    that a second run looks for the next gain instead of re-deriving the last one
    (``from_declared`` starts from the YAML configuration instead)."""
    from memory_db.store import MemoryStore
    from research.campaign import run_campaign
    from research.state import StateStore

    check_campaign_launch(endpoint)
    folder = campaign_dir(campaign, partition)
    state = StateStore(folder, campaign.name).load()
    if state is not None and state.finished and not state.unrecorded:  # unrecorded: run again to record it
        archive = folder.with_name(f"{folder.name}.{state.campaign_id}")
        folder.rename(archive)
        folder.mkdir()
        progress(f"campaign {state.campaign_id} finished earlier ({state.end_reason}); kept in {archive}")
        state = None
    if state is None and not from_declared:
        working = working_spec(endpoint)
        if working.engine.args != endpoint.engine.args:
            progress(
                "starting from the configuration the research memory confirmed last: "
                f"{' '.join(working.engine.args)} (--from-declared starts from the YAML one)"
            )
        endpoint = working
    return run_campaign(
        campaign,
        endpoint,
        state_dir=folder,
        memory=MemoryStore(paths.memory_db_path()),
        proposer=proposer or campaign.proposer,
        pool=load_pool(endpoint),
        progress=progress,
        stop_after_s=stop_after_s,
        run_id=run_id,
    )


def working_spec(spec: EndpointSpec) -> EndpointSpec:
    """The endpoint with its working baseline: the latest confirmed configuration in memory, if any."""
    from memory_db.store import MemoryStore

    try:
        args = MemoryStore(paths.memory_db_path()).latest_confirmed_engine_args(spec.name)
    except Exception:  # an unreadable memory must not stop a measurement; the YAML config stands
        args = None
    return spec.with_engine_args(args) if args else spec


def baseline_sweeps(
    spec: EndpointSpec,
    pool: pl.DataFrame,
    repeats: int,
    *,
    label: str = "baseline",
    progress: Callable[[str], None] | None = None,
):
    """K identical sweeps of one engine start (the same ladder each time): the noise floor's input.

    The engine runs in ``engines.run_engine``: a failed launch, or an engine that dies or hangs during
    the sweeps, raises ``EngineRunInvalid`` (reason and log tail); no noise floor stands on a dead engine."""
    from engines import run_engine
    from loadgen.sweep import run_sweep

    sweeps, rates = [], spec.sweep.rates
    with run_engine(spec, workdir=paths.runs_dir() / "baseline" / spec.name, purpose="baseline") as engine:
        for i in range(repeats):
            engine.check_alive()  # a repeat never starts on an engine that died in the previous one
            if progress:
                progress(f"{spec.name}: {label} sweep {i + 1}/{repeats}")
            sweep = run_sweep(engine, pool, spec, rates=rates, repeats_label=f"{label}-{i}")
            rates = rates or sweep.rates()  # repeats reuse the first sweep's ladder: identical conditions
            sweeps.append(sweep)
    return sweeps


# --- diagnosis, proposals, candidates (the interactive research graph) ------------------------


def diagnose_endpoint(
    spec: EndpointSpec,
    pool: pl.DataFrame,
    sweeps: list,
    recipes: dict | None = None,
    *,
    profile_seconds: float = 6.0,
    progress: Callable[[str], None] = print,
):
    """research.loop.diagnose_step on the working baseline, with its engine's files under runs/diagnosis."""
    from research.loop import diagnose_step

    return diagnose_step(
        spec,
        pool,
        sweeps,
        recipes=recipes,
        profile_seconds=profile_seconds,
        workdir=paths.runs_dir() / "diagnosis" / spec.name,
        progress=progress,
    )


def propose_for(spec: EndpointSpec, diagnosis, *, n: int, mode: str, baseline: dict, campaign_id: str):
    """research.loop.propose_step with the shared research memory."""
    from memory_db.store import MemoryStore
    from research.loop import propose_step

    return propose_step(
        spec,
        diagnosis,
        n=n,
        mode=mode,
        campaign_id=campaign_id,
        experiment_id=f"{campaign_id}-proposals",
        baseline=baseline,
        memory=MemoryStore(paths.memory_db_path()),
    )


def reference_outputs(spec: EndpointSpec):
    """Greedy outputs of the working baseline on the fixed prompt set (cached per configuration).

    The engine runs in ``engines.run_engine``: one that fails to start or dies during the capture raises
    ``EngineRunInvalid`` (reason and log tail), and nothing is cached."""
    from engines import run_engine
    from research.correctness import ReferenceOutputs, capture_reference

    cache = paths.runs_dir() / "references" / f"{spec.name}-{spec.launch_config_hash()}.json"
    if cache.exists():
        return ReferenceOutputs.model_validate_json(cache.read_text())
    with run_engine(spec, workdir=paths.runs_dir() / "references" / spec.name, purpose="reference") as engine:
        reference = capture_reference(
            engine.base_url, engine.served_model, list(spec.engine.args), adapter=engine.adapter
        )
    if reference.evidence != "none":  # a capture that got no evidence (a timeout) is tried again next time
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(reference.model_dump_json())
    return reference


def conditions_for(spec: EndpointSpec, pool: pl.DataFrame):
    """The memory's "same conditions" key for this endpoint and workload."""
    from engines import engine_identity
    from research.campaign import workload_signature
    from research.loop import conditions

    return conditions(spec, workload_signature(pool), engine_identity(spec).engine_version)


def endpoint_floor(spec: EndpointSpec, sweeps, *, run_id: str, progress=print, memory=None):
    """The noise floor of interactive baseline sweeps, from the endpoint's prior in the research memory;
    its own A/A evidence is recorded there for the endpoint's later floors."""
    from loadgen.noise import noise_floor
    from memory_db.store import MemoryStore
    from research.campaign.context import config_hash
    from research.campaign.steps import endpoint_prior, evidence_records

    memory = memory or MemoryStore(paths.memory_db_path())
    floor = noise_floor(sweeps, prior=endpoint_prior(spec, memory, progress=progress))
    config = config_hash(spec, spec.engine.args)
    for row in evidence_records(spec, f"{spec.name}-interactive", run_id, config, floor.aa_evidence):
        memory.record_aa_evidence(row)
    return floor


def record_runs(
    spec: EndpointSpec,
    sweeps,
    *,
    kind: str,
    run_prefix: str,
    campaign_id: str | None = None,
    experiment_id: str | None = None,
    dagster_run_id: str | None = None,
    memory=None,
) -> None:
    """Keep every sweep (all its steps) in the research memory: the Pareto front, the per-step view and
    the cost and energy figures are computed from these, across every experiment of the endpoint."""
    from memory_db.records import RunRecord
    from memory_db.store import MemoryStore

    memory = memory or MemoryStore(paths.memory_db_path())
    for i, sweep in enumerate(sweeps):
        memory.record_run(
            RunRecord.from_sweep(
                sweep,
                run_id=f"{run_prefix}-{kind}-{i}",
                kind=kind,
                campaign_id=campaign_id,
                experiment_id=experiment_id,
                dagster_run_id=dagster_run_id,
                price_per_gpu_hour_usd=spec.hardware.price_per_gpu_hour_usd,
            )
        )


def run_proposal(
    spec: EndpointSpec,
    proposal,
    pool: pl.DataFrame,
    noise,
    *,
    repeats: int,
    campaign_id: str,
    dagster_run_id: str | None = None,
    progress: Callable[[str], None] = print,
    extra_repeats: int = 2,
) -> CandidateRun:
    """Run one proposal through the shared harness, unless memory already decided it; record either way."""
    from specs.engine_args import apply_diff
    from memory_db.records import ExperimentRecord
    from memory_db.store import MemoryStore
    from engines import EngineRunInvalid
    from research import drafter
    from research.harness import CandidateResult, run_candidate

    memory = MemoryStore(paths.memory_db_path())
    iv = proposal.intervention
    conditions = conditions_for(spec, pool)
    prior = memory.prior_decision(spec.name, iv.engine_arg_diff, conditions)
    if prior is not None:
        skip = memory.record_skip(
            endpoint=spec.name,
            campaign_id=campaign_id,
            conditions=conditions,
            technique=iv.technique,
            change=iv.engine_arg_diff,
            prior=prior,
            dagster_run_id=dagster_run_id,
        )
        return CandidateRun(proposal=proposal, baseline_args=list(spec.engine.args), skipped=skip.reason)
    candidate_args = apply_diff(list(spec.engine.args), iv.engine_arg_diff)
    try:
        reference = None if iv.lossy else reference_outputs(spec)
    except EngineRunInvalid as exc:  # no reference to check against: the candidate is invalid, recorded as such
        progress(f"  invalid: reference outputs: {exc.reason}")
        result = CandidateResult(
            engine_args=candidate_args,
            verdict="invalid",
            invalid_reason=f"reference outputs: {exc.reason}",
            log_tail=exc.log_tail,
        )
    else:
        result = run_candidate(
            spec,
            candidate_args,
            pool,
            noise,
            repeats,
            lossy=iv.lossy,
            reference=reference,
            workdir=paths.runs_dir() / "candidates" / spec.name / proposal.proposal_id,
            progress=progress,
            extra_repeats=extra_repeats,
        )
    c, corr = result.comparison, result.correctness
    experiment_id = f"{campaign_id}:{proposal.proposal_id}"
    memory.record_experiment(
        ExperimentRecord(
            experiment_id=experiment_id,
            endpoint=spec.name,
            campaign_id=campaign_id,
            conditions=conditions,
            bottleneck=proposal.bottleneck,
            technique=iv.technique,
            change=iv.engine_arg_diff,
            base_config_hash=spec.launch_config_hash(),
            candidate_config_hash=spec.with_engine_args(candidate_args).launch_config_hash(),
            hypothesis=proposal.explanation,
            prediction=proposal.prediction,
            falsification=proposal.falsification,
            verdict=result.verdict,
            invalid_reason=result.invalid_reason,
            capacity_ratio=c.capacity_ratio if c else None,
            baseline_capacity=c.baseline_capacity if c else None,
            candidate_capacity=(sum(result.capacities) / len(result.capacities)) if result.capacities else None,
            noise_threshold=c.threshold if c else None,
            noise_rel_spread=noise.capacity_rel_spread if noise else None,
            effect=c.effect if c else None,
            effect_low=c.effect_low if c else None,
            effect_high=c.effect_high if c else None,
            mde=c.mde if c else None,
            repeats=len(result.sweeps),
            lossless=not iv.lossy,
            correctness=corr.model_dump(mode="json", exclude={"sequences"}) if corr else {},
            soak=result.soak.metadata() if result.soak else None,
            needs_review=bool(iv.lossy or (corr and corr.flag_for_review)),
            evidence=c.evidence if c else (result.invalid_reason or ""),
            dagster_run_ids=[dagster_run_id] if dagster_run_id else [],
            asset_keys=[f"{spec.name}/candidate_runs/{proposal.proposal_id}"],
        )
    )
    record_runs(
        spec,
        result.sweeps,
        kind="candidate",
        run_prefix=experiment_id,
        campaign_id=campaign_id,
        experiment_id=experiment_id,
        dagster_run_id=dagster_run_id,
        memory=memory,
    )
    if iv.technique == drafter.TECHNIQUE:  # the drafter's record gets the verdict and the served acceptance
        drafter.record_judgement(
            memory, spec, iv.engine_arg_diff, result.verdict, corr.label if corr else None, result.sweeps
        )
    return CandidateRun(
        proposal=proposal,
        baseline_args=list(spec.engine.args),
        result=result,
        experiment_id=experiment_id,
        engine_args=candidate_args,
        lossy=iv.lossy,
    )
