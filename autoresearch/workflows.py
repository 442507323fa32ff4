"""The steps a user runs, composed from the domain packages: shared by the CLI and the Dagster assets.

Each function takes an EndpointSpec (and plain data), does one user-visible step and returns
typed results; where things live on disk is decided here, once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl

from autoresearch import paths
from autoresearch.config import CampaignSpec, DefinitionSet, EndpointSpec


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
    from autoresearch.models import tokenizer_dir
    from replay.build import build_pool

    build = build_pool(spec, tokenizer_dir(spec.model.path), pool_dir(spec))
    build.production_profile.save(production_profile_path(spec))
    return build


def load_pool(spec: EndpointSpec) -> pl.DataFrame:
    """The endpoint's current replay pool (built on first use)."""
    from replay.schema import check_pool

    path = pool_dir(spec) / f"{spec.name}-pool.parquet"
    if not path.exists():
        return build_replay_pool(spec).pool
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


def sweep_endpoint(spec: EndpointSpec, *, progress: bool = True, repeats: int = 1):
    """Start the engine, run ``repeats`` capacity sweeps on the replay pool, stop the engine."""
    from engines import start_engine
    from loadgen.sweep import run_sweep

    pool = load_pool(spec)
    sweeps = []
    with start_engine(spec, workdir=paths.runs_dir() / "sweeps" / spec.name) as engine:
        for i in range(repeats):
            callback = tqdm_progress(spec.sweep.max_steps, f"{spec.name} sweep {i + 1}/{repeats}") if progress else None
            sweeps.append(run_sweep(engine, pool, spec, progress=callback, repeats_label=f"repeat-{i}"))
    return sweeps


# --- campaigns ------------------------------------------------------------------------------

def resolve_campaign(definitions: DefinitionSet, name: str) -> tuple[CampaignSpec, EndpointSpec]:
    """A campaign by name, or an endpoint name (its first declared campaign, else a default one)."""
    if name in definitions.campaigns:
        campaign = definitions.campaigns[name]
        return campaign, definitions.endpoint(campaign.endpoint)
    if name in definitions.endpoints:
        for campaign in definitions.campaigns.values():
            if campaign.endpoint == name:
                return campaign, definitions.endpoints[name]
        return CampaignSpec(name=f"{name}_campaign", endpoint=name), definitions.endpoints[name]
    raise KeyError(f"no campaign or endpoint named {name!r}; campaigns: {', '.join(sorted(definitions.campaigns))}; "
                   f"endpoints: {', '.join(sorted(definitions.endpoints))}")


def campaign_dir(campaign: CampaignSpec, partition: str | None = None) -> Path:
    folder = paths.home() / "campaigns" / (f"{campaign.name}__{partition}" if partition else campaign.name)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_campaign(campaign: CampaignSpec, endpoint: EndpointSpec, *, proposer: str | None = None,
                 partition: str | None = None, progress: Callable[[str], None] = print):
    """Run (or resume) a campaign with the shared research memory; return its outcome."""
    from memory_db.store import MemoryStore
    from research.campaign import run_campaign as run

    return run(campaign, endpoint, state_dir=campaign_dir(campaign, partition), memory=MemoryStore(paths.memory_db_path()),
               proposer=proposer or campaign.proposer, pool=load_pool(endpoint), progress=progress)


def working_spec(spec: EndpointSpec) -> EndpointSpec:
    """The endpoint with its working baseline: the latest confirmed configuration in memory, if any."""
    from memory_db.store import MemoryStore

    try:
        args = MemoryStore(paths.memory_db_path()).latest_confirmed_engine_args(spec.name)
    except Exception:  # an unreadable memory must not stop a measurement; the YAML config stands
        args = None
    return spec.with_engine_args(args) if args else spec


def baseline_sweeps(spec: EndpointSpec, pool: pl.DataFrame, repeats: int, *, label: str = "baseline",
                    progress: Callable[[str], None] | None = None):
    """K identical sweeps of one engine start (the same ladder each time): the noise floor's input."""
    from engines import start_engine
    from loadgen.sweep import run_sweep

    sweeps, rates = [], spec.sweep.rates
    with start_engine(spec, workdir=paths.runs_dir() / "baseline" / spec.name) as engine:
        for i in range(repeats):
            if progress:
                progress(f"{spec.name}: {label} sweep {i + 1}/{repeats}")
            sweep = run_sweep(engine, pool, spec, rates=rates, repeats_label=f"{label}-{i}")
            rates = rates or sweep.rates()  # repeats reuse the first sweep's ladder: identical conditions
            sweeps.append(sweep)
    return sweeps
