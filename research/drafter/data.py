"""Step 1 of the drafter stage: on-policy data (research.drafter).

The target model's own replies to replay-pool prompts, asked of the running engine through its OpenAI
API at the pool's sampling settings, with the token ids the engine saw and produced
(``return_token_ids``), so training never re-tokenises a chat template. ``collect`` is the one place
the stage starts an engine; ``onpolicy_data`` is the step for one endpoint (the ``drafter_data`` asset).
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import polars as pl
from pydantic import BaseModel

from research.drafter.errors import DrafterError
from research.harness import Progress


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


# ---------------------------------------------------------------- for one endpoint


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
    Replies already in ``out`` (an interrupted run) are kept and not asked again. An engine that fails to
    start or dies meanwhile is a DrafterError with the reason and the engine log's tail (what was asked
    before stays in ``out``)."""
    from engines import EngineRunInvalid, run_engine

    have = read_examples(out) if out.exists() else []
    if len(have) >= examples:
        return have[:examples], 0.0
    started = time.monotonic()
    rows = pool.slice(len(have), examples - len(have))
    try:
        with run_engine(
            spec,
            workdir=out.parent / "data_engine",
            purpose="drafter",
            args_override=data_engine_args(spec.engine.args, concurrency),
        ) as engine:
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
    except EngineRunInvalid as exc:
        message = f"on-policy data: the engine run is invalid: {exc.reason} ({len(have)} replies kept in {out})"
        raise DrafterError(
            f"{message}\n--- engine log (tail) ---\n{exc.log_tail}" if exc.log_tail else message
        ) from exc
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
