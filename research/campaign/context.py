"""What every part of a campaign shares: its specs, its state and state file, its replay pool, its progress.

One :class:`CampaignContext` per call of a campaign; the collaborators (budget, bench, scheduler,
planner, adoption, memory recorder) each hold it and read and change the one ``state`` in it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from specs.config import CampaignSpec, EndpointSpec
from research.harness import Progress
from research.state import CampaignState, ExperimentState, StateStore


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


def config_hash(endpoint: EndpointSpec, args: list[str]) -> str:
    return endpoint.with_engine_args(args).launch_config_hash()


def ratio(e: ExperimentState) -> str:
    """An experiment's capacity ratio against its working baseline, as the open questions and notes say it."""
    c = e.comparison
    return f"capacity x{c.capacity_ratio:.2f} vs working baseline" if c and c.capacity_ratio else "no ratio"


def load_pool(campaign: CampaignSpec, endpoint: EndpointSpec, state_dir: Path, progress: Progress) -> pl.DataFrame:
    """The replay pool, built once per campaign and kept beside the state (same pool on resume)."""
    path = state_dir / f"{campaign.name}.pool.parquet"
    if path.exists():
        return pl.read_parquet(path)
    from specs.models import tokenizer_dir
    from replay.build import build_pool

    progress(f"building the replay pool for {endpoint.name}")
    build = build_pool(endpoint, tokenizer_dir(endpoint.model.path), state_dir / "pool")
    if not build.fidelity.passed:
        progress(
            "  warning: the replay pool fails its fidelity check: " + ", ".join(r.name for r in build.fidelity.failures)
        )
    pool = build.pool
    pool.write_parquet(path)
    return pool


@dataclass
class CampaignContext:
    """The campaign being run, on which endpoint, its state (saved atomically) and its replay pool."""

    campaign: CampaignSpec
    endpoint: EndpointSpec
    state_dir: Path
    store: StateStore
    state: CampaignState
    pool: pl.DataFrame
    progress: Progress

    def __post_init__(self) -> None:
        self.signature = workload_signature(self.pool)

    @property
    def workdir(self) -> Path:
        """Engine logs and per-experiment folders; the active-engine files (for stop_orphan) too."""
        return self.state_dir / f"{self.campaign.name}.runs"

    @property
    def repeats(self) -> int:
        """Sweeps per candidate."""
        return self.campaign.repeats

    @property
    def baseline_repeats(self) -> int:
        """Sweeps of a baseline (its noise floor needs at least two)."""
        return max(self.endpoint.sweep.repeats, 2)

    def save(self) -> None:
        self.store.save(self.state)

    def question(self, text: str) -> None:
        """Add an open question for a person (once)."""
        if text in self.state.open_questions:
            return
        self.state.open_questions.append(text)
