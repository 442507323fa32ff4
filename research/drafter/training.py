"""Steps 2 and 3 of the drafter stage: the training driver and offline acceptance (research.drafter).

``train`` fine-tunes a layer-truncated copy of the target (its first N layers, its embeddings and head,
the same tokenizer) on the on-policy token ids with next-token loss; ``evaluate`` measures acceptance
per draft position on held-out replies, offline. The torch code is ``research/drafter_torch.py``, run
by the engine environment's interpreter (torch lives there, not in the project's environment); this
module only drives it. ``train_drafter`` is the step for one endpoint (the ``drafter`` asset) and
``train_for_endpoint`` the whole stage without Dagster (the CLI).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel

from specs.paths import REPO_ROOT, engine_python
from research.drafter.data import OnPolicyData, OnPolicyExample, onpolicy_data, read_examples, split, write_examples
from research.drafter.errors import DrafterError
from research.drafter.serving import draft_cost_ratio
from research.harness import Progress

TORCH_SCRIPT = REPO_ROOT / "research" / "drafter_torch.py"


class TrainResult(BaseModel):
    draft_dir: str
    layers: int
    steps: int
    train_examples: int
    train_tokens: int  # supervised (reply) tokens
    train_s: float
    loss_first: float | None = None
    loss_last: float | None = None
    params_m: float | None = None


class OfflineAcceptance(BaseModel):
    """Greedy draft vs the target's greedy tokens on held-out replies (teacher-forced prefixes)."""

    k: int
    examples: int
    drafts: int  # drafting rounds simulated
    accepted_per_position: list[float]  # share of rounds whose position j was accepted
    acceptance_length: float  # mean tokens per target step: 1 + accepted drafts per round
    top1_agreement: float  # draft argmax == target token, every reply position
    eval_s: float


def _run_torch(args: list[str], progress: Progress, timeout_s: float) -> dict[str, Any]:
    """Run research/drafter_torch.py under the engine environment's python; its last stdout line is JSON."""
    py = engine_python()
    if not py.exists():
        raise DrafterError(
            f"{py} not found: the drafter trains with the engine environment's torch "
            "(scripts/setup.sh creates .venv-engine)"
        )
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(
        [str(py), str(TORCH_SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        lines.append(line)
        if line.startswith("progress:"):
            progress("  " + line[len("progress:") :].strip())
        if time.monotonic() > deadline:
            proc.kill()
            raise DrafterError(f"drafter_torch {args[0]} ran past {timeout_s:.0f} s")
    rc = proc.wait()
    results = [ln for ln in lines if ln.startswith("result:")]
    if rc != 0 or not results:
        raise DrafterError(f"drafter_torch {args[0]} failed (exit {rc}):\n" + "\n".join(lines[-25:]))
    return json.loads(results[-1][len("result:") :])


def train(
    target_dir: Path,
    examples: list[OnPolicyExample],
    out_dir: Path,
    *,
    layers: int = 4,
    steps: int = 200,
    lr: float = 3e-4,
    seed: int = 0,
    max_context: int = 0,
    train_embeddings: bool = False,
    timeout_s: float = 3600.0,
    progress: Progress = print,
) -> TrainResult:
    """Fine-tune the target's first ``layers`` layers (+ embeddings and head) on ``examples``; a HF
    checkpoint vLLM's ``draft_model`` method loads is written to ``out_dir``."""
    if not examples:
        raise DrafterError("no training examples")
    out_dir.mkdir(parents=True, exist_ok=True)
    data = write_examples(examples, out_dir / "train.jsonl")
    args = [
        "train",
        "--target",
        str(target_dir),
        "--data",
        str(data),
        "--out",
        str(out_dir),
        "--layers",
        str(layers),
        "--steps",
        str(steps),
        "--lr",
        str(lr),
        "--seed",
        str(seed),
        "--max-context",
        str(max_context),
    ] + (["--train-embeddings"] if train_embeddings else [])
    res = _run_torch(args, progress, timeout_s)
    return TrainResult(draft_dir=str(out_dir), layers=layers, **res)


def evaluate(
    draft_dir: Path,
    examples: list[OnPolicyExample],
    out_dir: Path,
    *,
    k: int = 3,
    timeout_s: float = 3600.0,
    progress: Progress = print,
) -> OfflineAcceptance:
    """Acceptance per position of ``draft_dir`` on held-out ``examples`` (greedy target replies)."""
    if not examples:
        raise DrafterError("no held-out examples to evaluate on")
    data = write_examples(examples, out_dir / "heldout.jsonl")
    res = _run_torch(["eval", "--draft", str(draft_dir), "--data", str(data), "--k", str(k)], progress, timeout_s)
    return OfflineAcceptance(k=k, **res)


def truncated_copy(
    target_dir: Path, out_dir: Path, layers: int, *, timeout_s: float = 600.0, progress: Progress = print
) -> Path:
    """The untrained truncated draft (the control a trained drafter must beat)."""
    _run_torch(
        ["truncate", "--target", str(target_dir), "--out", str(out_dir), "--layers", str(layers)], progress, timeout_s
    )
    return out_dir


# ---------------------------------------------------------------- for one endpoint


def train_drafter(
    spec,
    data: OnPolicyData,
    workdir: Path,
    *,
    heldout: int = 20,
    layers: int = 4,
    steps: int = 300,
    lr: float = 1e-3,
    k: int = 3,
    baseline: bool = True,
    progress: Progress = print,
):
    """Steps 2 and 3: train on ``data`` (less the held-out tail), then offline acceptance of the trained
    draft and, with ``baseline``, of the untrained truncation (the control). Returns a
    ``memory_db.DrafterRecord`` (not yet stored)."""
    from specs.models import ensure_model
    from memory_db.records import DrafterRecord
    from research.drift import model_fingerprint

    target = ensure_model(spec.model.path)
    train_set, held = split(read_examples(Path(data.path))[: data.examples], heldout)
    draft = workdir / f"draft-{data.signature}-L{layers}-s{steps}"
    progress(f"training: {layers} layers, {steps} steps on {len(train_set)} examples")
    trained = train(target, train_set, draft, layers=layers, steps=steps, lr=lr, progress=progress)
    progress(f"offline acceptance on {len(held)} held-out replies (k={k})")
    offline = evaluate(draft, held, workdir, k=k, progress=progress)
    extra: dict[str, Any] = {
        "lr": lr,
        "loss_first": trained.loss_first,
        "loss_last": trained.loss_last,
        "params_m": trained.params_m,
        "data_s": data.data_s,
        "max_tokens": data.max_tokens,
        "draft_cost_ratio": round(draft_cost_ratio(target, draft), 3),
    }
    if baseline:
        control = truncated_copy(target, workdir / f"untrained-L{layers}", layers, progress=progress)
        extra["untrained"] = evaluate(control, held, workdir, k=k, progress=progress).model_dump()
    return DrafterRecord(
        endpoint=spec.name,
        model_signature=model_fingerprint(spec),
        data_signature=data.signature,
        path=str(draft),
        num_speculative_tokens=k,
        layers=layers,
        steps=steps,
        train_examples=trained.train_examples,
        train_tokens=trained.train_tokens,
        heldout_examples=len(held),
        train_s=trained.train_s,
        train=extra,
        acceptance_offline=offline.model_dump(),
    )


def train_for_endpoint(
    spec,
    pool: pl.DataFrame,
    workdir: Path,
    *,
    examples: int = 120,
    heldout: int = 20,
    max_tokens: int | None = None,
    layers: int = 4,
    steps: int = 300,
    lr: float = 1e-3,
    k: int = 3,
    concurrency: int = 4,
    baseline: bool = True,
    progress: Progress = print,
):
    """The drafter stage for one endpoint without Dagster (the CLI): data, training, offline acceptance."""
    data = onpolicy_data(
        spec, pool, workdir, examples=examples, max_tokens=max_tokens, concurrency=concurrency, progress=progress
    )
    return train_drafter(
        spec,
        data,
        workdir,
        heldout=heldout,
        layers=layers,
        steps=steps,
        lr=lr,
        k=k,
        baseline=baseline,
        progress=progress,
    )
