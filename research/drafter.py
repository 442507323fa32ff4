"""A draft model trained on the endpoint's own traffic, for speculative decoding (issue 15).

Four steps, each a plain function so the CLI, the benchmark and the assets share them:

1. ``generate_onpolicy``: the target model's own replies to replay-pool prompts, asked of the running
   engine through its OpenAI API at the pool's sampling settings, with the token ids the engine saw
   and produced (``return_token_ids``), so training never re-tokenises a chat template.
2. ``train``: fine-tunes a layer-truncated copy of the target (its first N layers, its embeddings and
   head, the same tokenizer) on those ids with next-token loss. The torch code is
   ``research/drafter_torch.py``, run by the engine environment's interpreter (torch lives there, not in
   the project's environment). vLLM's ``speculators`` library is not used: installing it into the
   engine environment replaces vLLM's pinned CPU torch with a CUDA build (see docs/research_loop.md).
3. ``evaluate``: acceptance per draft position on held-out prompts, offline: the draft proposes k
   tokens greedily from the target's own prefix, and a proposal is accepted while it matches the
   target's greedy tokens (what vLLM's verifier does at temperature 0).
4. ``candidate_args`` / ``run_drafter_candidate``: the ``--speculative-config`` intervention, measured
   by the one harness (lossless check, sweeps, noise floor) with acceptance per position scraped
   from ``/metrics`` around each sweep (the adapter's ``speculative_counters``: vLLM's ``spec_decode_*``).

The break-even model (``break_even_acceptance``) says which acceptance length pays for drafting.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import polars as pl
from pydantic import BaseModel, Field

from specs.paths import REPO_ROOT, engine_python
from research.harness import Progress

TORCH_SCRIPT = REPO_ROOT / "research" / "drafter_torch.py"


class DrafterError(RuntimeError):
    """A drafter step could not run (engine refused, training crashed, no data)."""


# ---------------------------------------------------------------- 1. on-policy data


class OnPolicyExample(BaseModel):
    """One request of the pool and the target's reply, as token ids the engine used."""

    request_id: str
    prompt_ids: list[int]
    output_ids: list[int]
    finish_reason: str | None = None
    temperature: float | None = None


def _body_for(raw: str, served_model: str, max_tokens: int | None) -> dict[str, Any]:
    body = json.loads(raw)
    body["model"] = served_model
    body["stream"] = False
    body["return_token_ids"] = True  # vLLM: prompt_token_ids + choices[].token_ids
    for key in ("stream_options", "n", "user"):
        body.pop(key, None)
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def generate_onpolicy(
    base_url: str,
    served_model: str,
    pool: pl.DataFrame,
    *,
    limit: int | None = None,
    max_tokens: int | None = None,
    concurrency: int = 2,
    timeout_s: float = 600.0,
    progress: Progress = print,
) -> list[OnPolicyExample]:
    """The target's replies to the pool's requests (``limit`` first ones), at each request's own
    sampling settings; ``max_tokens`` overrides the pool's reply length (more tokens per prompt)."""
    rows = pool.head(limit) if limit else pool
    url = base_url.rstrip("/") + "/v1/chat/completions"
    done = 0
    started = time.monotonic()

    def one(row: dict[str, Any]) -> OnPolicyExample:
        body = _body_for(row["body"], served_model, max_tokens)
        with httpx.Client(timeout=timeout_s) as client:
            r = client.post(url, json=body)
        if r.status_code != 200:
            raise DrafterError(f"request {row['request_id']}: HTTP {r.status_code}: {r.text[:300]}")
        data = r.json()
        choice = data["choices"][0]
        prompt_ids, output_ids = data.get("prompt_token_ids"), choice.get("token_ids")
        if prompt_ids is None or output_ids is None:
            raise DrafterError("the engine returned no token ids (return_token_ids): on-policy data needs vLLM")
        return OnPolicyExample(
            request_id=row["request_id"],
            prompt_ids=prompt_ids,
            output_ids=output_ids,
            finish_reason=choice.get("finish_reason"),
            temperature=body.get("temperature"),
        )

    out: list[OnPolicyExample] = []
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as ex:
        for example in ex.map(one, rows.iter_rows(named=True)):
            out.append(example)
            done += 1
            if done % 10 == 0 or done == rows.height:
                progress(f"  on-policy data: {done}/{rows.height} replies ({time.monotonic() - started:.0f} s)")
    return out


def write_examples(examples: list[OnPolicyExample], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(e.model_dump_json() + "\n" for e in examples))
    return path


def read_examples(path: Path) -> list[OnPolicyExample]:
    return [OnPolicyExample.model_validate_json(line) for line in Path(path).read_text().splitlines() if line.strip()]


def data_signature(examples: list[OnPolicyExample]) -> str:
    """Identifies the training data (prompts and replies): a drafter trained on other traffic differs."""
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e.prompt_ids, e.output_ids]).encode())
    return h.hexdigest()[:16]


def model_signature(model_dir: Path) -> str:
    """The target's weights and config, as a drift check: a drafter is stale once this changes."""
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        p = Path(model_dir) / name
        if p.exists():
            st = p.stat()
            h.update(f"{name}:{st.st_size}".encode())
            with p.open("rb") as f:  # the first MiB: enough to tell weights apart without reading 270 MB
                h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def split(examples: list[OnPolicyExample], heldout: int) -> tuple[list[OnPolicyExample], list[OnPolicyExample]]:
    """Train / held-out by position in the pool (the pool is already in arrival order)."""
    if heldout >= len(examples):
        raise DrafterError(f"{len(examples)} examples cannot hold out {heldout}")
    return examples[:-heldout] if heldout else examples, examples[-heldout:] if heldout else []


# ---------------------------------------------------------------- 2./3. training and offline evaluation


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


# ---------------------------------------------------------------- 4. the candidate


def draft_model_diff(engine_kind: str, draft_dir: Path, k: int) -> dict[str, str]:
    """The engine's argument diff that serves ``draft_dir`` as a ``k``-token drafter (its adapter knows
    the flags); DrafterError when that engine cannot serve a trained drafter."""
    from engines.registry import ADAPTERS

    reason = cannot_serve_drafter(engine_kind)
    if reason:
        raise DrafterError(reason)
    return ADAPTERS[engine_kind].draft_model_diff(Path(draft_dir), k)


def cannot_serve_drafter(engine_kind: str) -> str | None:
    """Why an engine of this kind cannot run the drafter stage (None: it can). The stage needs the
    engine's token ids for on-policy data and a way to serve a draft model."""
    from engines.registry import ADAPTERS

    cls = ADAPTERS.get(engine_kind)
    if cls is None:
        return f"unknown engine kind {engine_kind!r}"
    if cls.draft_model_diff(Path("draft"), 1) is None:
        return f"the {engine_kind} adapter cannot serve a trained draft model"
    if "token_ids" not in cls.evidence:
        return f"the {engine_kind} adapter does not return token ids, which on-policy training data needs"
    return None


def candidate_args(engine_args: list[str], draft_dir: Path, k: int, engine_kind: str) -> list[str]:
    """``engine_args`` with the drafter's arguments at the end (replacing any earlier speculation settings)."""
    from specs.engine_args import REMOVE, apply_diff

    diff = draft_model_diff(engine_kind, draft_dir, k)
    return apply_diff(apply_diff(engine_args, {flag: REMOVE for flag in diff}), diff)


def describe(diff: dict[str, str]) -> str:
    """The diff as one shell-quoted argument string, for people to copy."""
    import shlex

    return " ".join(f"{flag} {shlex.quote(value)}" for flag, value in diff.items())


class ServedAcceptance(BaseModel):
    """Acceptance as the engine counted it (deltas of its /metrics counters over the measured sweeps)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: list[float] = Field(default_factory=list)

    @property
    def acceptance_length(self) -> float | None:
        return None if not self.drafts else 1.0 + self.accepted_tokens / self.drafts

    def add(self, before: dict[str, float], after: dict[str, float]) -> None:
        d = lambda key: after.get(key, 0.0) - before.get(key, 0.0)  # noqa: E731
        drafts = d("num_drafts")
        counts = [d(f"accepted_pos{j}") for j in range(sum(1 for key in after if key.startswith("accepted_pos")))]
        total_before = self.drafts
        self.drafts += drafts
        self.draft_tokens += d("num_draft_tokens")
        self.accepted_tokens += d("num_accepted_tokens")
        if self.drafts:
            old = self.accepted_per_position + [0.0] * (len(counts) - len(self.accepted_per_position))
            self.accepted_per_position = [(old[j] * total_before + counts[j]) / self.drafts for j in range(len(counts))]


def read_metrics(base_url: str, engine_kind: str) -> dict[str, float]:
    """The engine's speculative-decoding counters now (its adapter reads them: engines.registry)."""
    from engines.registry import adapter_class

    r = httpx.get(base_url.rstrip("/") + "/metrics", timeout=30.0)
    r.raise_for_status()
    return adapter_class(engine_kind).speculative_counters(r.text)


def run_drafter_candidate(
    spec,
    engine_args: list[str],
    draft_dir: Path,
    k: int,
    pool: pl.DataFrame,
    noise,
    repeats: int,
    *,
    reference=None,
    sweep_fn=None,
    progress: Progress = print,
    **kwargs,
):
    """The drafter through research.harness.run_candidate (lossless: never declared lossy), with vLLM's
    acceptance counters read around every sweep. Returns (CandidateResult, ServedAcceptance)."""
    from research.harness import default_sweep_fn, run_candidate

    inner = sweep_fn or default_sweep_fn()
    served = ServedAcceptance()

    def sweep(engine, pool_, spec_):
        before = read_metrics(engine.base_url, spec.engine.kind)
        try:
            return inner(engine, pool_, spec_)
        finally:
            served.add(before, read_metrics(engine.base_url, spec.engine.kind))

    args = candidate_args(engine_args, draft_dir, k, spec.engine.kind)
    kwargs.setdefault("soak", sweep_fn is None)  # the wrapper below counts acceptance; the sweep is ours
    result = run_candidate(
        spec, args, pool, noise, repeats, lossy=False, reference=reference, sweep_fn=sweep, progress=progress, **kwargs
    )
    return result, served


# ---------------------------------------------------------------- when it pays off


def draft_cost_ratio(target_dir: Path, draft_dir: Path | None = None, *, draft_layers: int | None = None) -> float:
    """Cost of one draft step relative to one target step, from the bytes each reads (memory-bound
    decode). Without a draft folder: the target's embeddings/head plus ``draft_layers`` of its layers."""
    cfg = json.loads((Path(target_dir) / "config.json").read_text())
    h, inter, vocab, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    per_layer = 2 * h * h + 2 * h * (h // heads) * kv + 3 * h * inter
    head = vocab * h * (1 if cfg.get("tie_word_embeddings") else 2)
    if draft_dir is not None:
        draft_layers = json.loads((Path(draft_dir) / "config.json").read_text())["num_hidden_layers"]
    if draft_layers is None:
        raise ValueError("draft_dir or draft_layers is needed")
    return (head + draft_layers * per_layer) / (head + n * per_layer)


def break_even_acceptance(k: int, draft_cost: float, verify_cost: float = 1.0) -> float:
    """Acceptance length (tokens per target step, 1..k+1) at which speculation breaks even.

    One round drafts ``k`` tokens (``k * draft_cost`` target steps) and verifies k+1 positions in one
    target step costing ``verify_cost`` (1.0 when decode is memory-bound: k+1 tokens read the weights
    once; more when the batch already fills the compute). It yields the acceptance length in tokens,
    so speculation pays when acceptance length > k * draft_cost + verify_cost.
    """
    return k * draft_cost + verify_cost


# ---------------------------------------------------------------- in the proposal round

TECHNIQUE = "trained_drafter"  # the technique name of a drafter candidate, in proposals and memory
QUESTION = "Would a draft model trained on {endpoint}'s own traffic pay off?"


def propose_drafter(
    spec, diagnosis, batch, *, n: int, memory=None, campaign_id: str | None = None, skip=(), k: int = 3, layers: int = 4
):
    """The drafter rule (research.rules.drafter_training) in a proposal round; returns the batch updated.

    When the rule says a drafter would pay at this load and memory holds a fresh drafter of the
    endpoint's current model that the harness has not judged yet, that drafter joins the batch as a
    candidate (technique ``trained_drafter``, a lossless engine diff), in place of the last-ranked
    proposal when the batch is full. Otherwise the batch carries the suggestion (what acceptance
    length would pay, the command that trains one), and memory gets it as an open question.
    """
    from memory_db.records import OpenQuestion
    from research.rules import drafter_training

    why = cannot_serve_drafter(spec.engine.kind)
    if why:
        return batch.model_copy(update={"drafter": None, "drafter_why_not": why})
    ready = usable_drafter(memory, spec) if memory is not None else None
    why_not: list[str] = []
    cost, note = _draft_cost(spec, ready, layers)
    suggestion = drafter_training(
        diagnosis,
        k=ready.num_speculative_tokens if ready else k,
        draft_cost_ratio=cost,
        gpu_count=spec.hardware.gpu_count,
        why_not=why_not,
    )
    if suggestion is None:
        return batch.model_copy(update={"drafter": None, "drafter_why_not": why_not[0] if why_not else None})
    if note:
        suggestion.evidence.append(note)
    proposals = list(batch.proposals)
    if ready is not None and TECHNIQUE not in skip and n > 0:
        # a drafter someone trained for this endpoint comes before the round's last-ranked proposal,
        # which stays untried and can come back next round
        proposals = proposals[: n - 1] + [drafter_proposal(spec, ready, suggestion)]
    elif memory is not None:
        memory.record_question(
            OpenQuestion(
                endpoint=spec.name,
                campaign_id=campaign_id,
                bottleneck="decode_bound",
                question=QUESTION.format(endpoint=spec.name),
                rationale=f"{suggestion.explanation} Train one with: {suggestion.command}",
            )
        )
    return batch.model_copy(update={"proposals": proposals, "drafter": suggestion, "drafter_why_not": None})


def usable_drafter(memory, spec):
    """The newest fresh drafter of ``spec``'s current model that no harness has judged, if its files exist."""
    from research.drift import model_fingerprint

    model = model_fingerprint(spec)
    for rec in memory.drafters(spec.name):
        if rec.status == "fresh" and rec.verdict is None and rec.model_signature == model and Path(rec.path).exists():
            return rec
    return None


def _draft_cost(spec, ready, layers: int) -> tuple[float, str | None]:
    """A draft step's cost in target steps from the bytes each reads; a stated guess when the target's
    config cannot be read (a remote model)."""
    from specs.models import ModelUnavailable, ensure_model

    try:
        target = ensure_model(spec.model.path)
        return draft_cost_ratio(target, Path(ready.path) if ready else None, draft_layers=layers), None
    except (ModelUnavailable, OSError, KeyError, ValueError) as exc:
        return 0.3, f"draft cost assumed 30% of a target step: the target's config is not readable here ({exc})"


def drafter_proposal(spec, rec, suggestion=None):
    """A recorded drafter as a candidate for the harness (lossless: the engine verifies every drafted
    token). ``suggestion``: the drafter rule's reasoning when it proposed one; without it (a drafter the
    user asked to judge) the break-even comes from the draft's bytes alone."""
    from research.proposals import Intervention, Proposal

    k = rec.num_speculative_tokens
    offline = rec.acceptance_offline.get("acceptance_length") or 1.0
    if suggestion is not None:
        be, why, evidence = suggestion.break_even_acceptance_length, suggestion.explanation, list(suggestion.evidence)
    else:
        be = break_even_acceptance(k, rec.train.get("draft_cost_ratio") or 0.3)
        why, evidence = (
            (
                f"A draft reading {rec.train.get('draft_cost_ratio') or 0.3:.0%} of the target's bytes pays "
                f"off above an acceptance length of {be:.2f} when decode is memory-bound."
            ),
            [],
        )
    diff = draft_model_diff(spec.engine.kind, Path(rec.path), k)
    return Proposal(
        proposal_id=f"rules-drafter-{rec.drafter_id.removeprefix('drafter_')[:12]}",
        question=QUESTION.format(endpoint=spec.name),
        bottleneck="decode_bound",
        explanation=f"{why} Drafter {rec.drafter_id} ({rec.layers} layers, {rec.steps} steps on "
        f"{rec.train_examples} of the endpoint's own replies) reached an offline acceptance length of "
        f"{offline:.2f} (k={k}).",
        observations=evidence,
        intervention=Intervention(technique=TECHNIQUE, engine_arg_diff=diff),
        prediction=f"served acceptance length near the offline {offline:.2f}; capacity "
        + ("up" if offline > be else "not up")
        + f", since the break-even is {be:.2f}",
        predicted_capacity_ratio=round(offline / be, 2) if be else None,
        falsification=f"capacity within the noise floor or below it, or a served acceptance length "
        f"(the engine's speculative-decoding counters) under the break-even {be:.2f}",
        source="rules",
    )


def record_judgement(memory, spec, diff: dict, verdict: str, correctness: str | None, sweeps) -> str | None:
    """Write the harness's verdict on a drafter candidate back to its drafter record, with the
    acceptance vLLM counted over the candidate's sweeps; the drafter's id (None: no record matches)."""
    for rec in memory.drafters(spec.name):
        if draft_model_diff(spec.engine.kind, Path(rec.path), rec.num_speculative_tokens) != diff:
            continue
        drafted = sum(st.engine_metrics.get("spec_decode_draft_tokens_delta", 0.0) for s in sweeps for st in s.steps)
        accepted = sum(
            st.engine_metrics.get("spec_decode_accepted_tokens_delta", 0.0) for s in sweeps for st in s.steps
        )
        served = dict(rec.acceptance_served)
        if drafted:
            rate = accepted / drafted
            served |= {
                "source": "the harness's sweeps (engine /metrics deltas per step)",
                "draft_tokens": drafted,
                "accepted_tokens": accepted,
                "acceptance_rate": round(rate, 4),
                "acceptance_length": round(1.0 + rate * rec.num_speculative_tokens, 3),
            }
        memory.record_drafter(
            rec.model_copy(update={"verdict": verdict, "correctness": correctness, "acceptance_served": served})
        )
        return rec.drafter_id
    return None


# ---------------------------------------------------------------- the whole stage, for one endpoint


def data_engine_args(engine_args: list[str], concurrency: int) -> list[str]:
    """The endpoint's arguments for generating data: prefix caching on (the pool's prompts share long
    system prompts) and room for ``concurrency`` sequences. The model and sampling are unchanged."""
    from specs.engine_args import REMOVE, apply_diff

    args = apply_diff(engine_args, {"--no-enable-prefix-caching": REMOVE, "--enable-prefix-caching": None})
    current = parse_int_arg(args, "--max-num-seqs")
    if current is not None and current < concurrency:
        args = apply_diff(args, {"--max-num-seqs": str(concurrency)})
    return args


def parse_int_arg(args: list[str], flag: str) -> int | None:
    from specs.engine_args import parse_args

    value = parse_args(args).get(flag)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def collect(
    spec,
    pool: pl.DataFrame,
    out: Path,
    *,
    examples: int,
    max_tokens: int | None = None,
    concurrency: int = 4,
    progress: Progress = print,
) -> tuple[list[OnPolicyExample], float]:
    """Start the endpoint's engine, ask it for ``examples`` replies, stop it; (examples, seconds).
    Replies already in ``out`` (an interrupted run) are kept and not asked again."""
    from engines import start_engine

    have = read_examples(out) if out.exists() else []
    if len(have) >= examples:
        return have[:examples], 0.0
    started = time.monotonic()
    rows = pool.slice(len(have), examples - len(have))
    engine = start_engine(
        spec, args_override=data_engine_args(spec.engine.args, concurrency), workdir=out.parent / "data_engine"
    )
    try:
        with out.open("a") as f:
            for offset in range(0, rows.height, 10):  # written in chunks: an interruption keeps what was asked
                got = generate_onpolicy(
                    engine.base_url,
                    engine.served_model,
                    rows.slice(offset, 10),
                    max_tokens=max_tokens,
                    concurrency=concurrency,
                    progress=progress,
                )
                f.write("".join(e.model_dump_json() + "\n" for e in got))
                f.flush()
                have += got
    finally:
        engine.stop()
    return have, time.monotonic() - started


class OnPolicyData(BaseModel):
    """The on-policy examples of one endpoint, kept in a JSONL file (token ids, so they stay out of metadata)."""

    path: str
    examples: int
    reply_tokens: int
    prompt_tokens_mean: float
    signature: str  # data_signature of the examples
    data_s: float  # seconds spent asking the engine (0 when every reply was already on file)
    max_tokens: int | None = None


def onpolicy_data(
    spec,
    pool: pl.DataFrame,
    workdir: Path,
    *,
    examples: int = 120,
    max_tokens: int | None = None,
    concurrency: int = 4,
    progress: Progress = print,
) -> OnPolicyData:
    """Step 1 for one endpoint: ``examples`` replies of its engine to its replay pool, on file in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    progress(f"on-policy data: {examples} replies of {spec.name}'s engine to its replay pool")
    out = workdir / "onpolicy.jsonl"
    data, data_s = collect(
        spec, pool, out, examples=examples, max_tokens=max_tokens, concurrency=concurrency, progress=progress
    )
    if len(data) < examples:
        raise DrafterError(f"the replay pool gave {len(data)} replies, {examples} were asked for")
    return OnPolicyData(
        path=str(out),
        examples=len(data),
        reply_tokens=sum(len(e.output_ids) for e in data),
        prompt_tokens_mean=sum(len(e.prompt_ids) for e in data) / len(data),
        signature=data_signature(data),
        data_s=round(data_s, 1),
        max_tokens=max_tokens,
    )


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
