"""Where the project keeps its state. One root, overridable with AUTORESEARCH_HOME."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def home() -> Path:
    """State root: models, runs, replay pools, the research memory."""
    path = Path(os.environ.get("AUTORESEARCH_HOME", REPO_ROOT / ".autoresearch"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def definitions_dir() -> Path:
    """The defs folder: one defs.yaml per endpoint, campaign and recipe (dagster_project.lib)."""
    return Path(os.environ.get("AUTORESEARCH_DEFINITIONS", REPO_ROOT / "definitions"))


def models_dir() -> Path:
    return Path(os.environ.get("AUTORESEARCH_MODELS", home() / "models"))


def runs_dir() -> Path:
    path = home() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def pools_dir() -> Path:
    path = home() / "pools"
    path.mkdir(parents=True, exist_ok=True)
    return path


def memory_db_path() -> Path:
    return Path(os.environ.get("AUTORESEARCH_MEMORY_DB", home() / "memory.duckdb"))


def engine_python() -> Path:
    """Interpreter of the engine's own virtual environment (the engine is a separate process)."""
    return Path(os.environ.get("AUTORESEARCH_ENGINE_PYTHON", REPO_ROOT / ".venv-engine" / "bin" / "python"))


def resolve_path(value: str) -> Path:
    """Resolve a path from YAML: absolute as is, relative to the repository root otherwise."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (REPO_ROOT / path).resolve()


def gpu_lock_dir() -> Path:
    """Lock files of the GPU leases (engines.gpu_lease). Every process that starts engines on one host
    must use the same folder for the leases to keep them apart: set AUTORESEARCH_GPU_LOCKS when
    campaigns on one host run with different AUTORESEARCH_HOME."""
    path = Path(os.environ.get("AUTORESEARCH_GPU_LOCKS", home() / "gpu_leases"))
    path.mkdir(parents=True, exist_ok=True)
    return path
