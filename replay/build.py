"""Build an endpoint's replay pool from its traffic source, with its fidelity report.

Request logs stream through parse -> redact -> render + tokenise -> Parquet row groups, so a
million-line log needs bounded memory; the unredacted text never leaves memory. Token-count
traces are transformed (``length_scale``, ``max_prompt_tokens``, ``max_output_tokens``: the
same transform is applied to the production profile the pool is judged against), then text is
synthesised to the transformed lengths and block structure (see replay.synth).

A build never replaces the last good pool unless it succeeds: every file is written under a
temporary name in the pool's folder (``.<pool>.building-*``) and renamed over the pool only when
the fidelity check passes. A source with too many malformed lines fails the build
(:class:`MalformedSourceError`, nothing renamed, the temporary files removed); a pool that fails
its check is kept beside the last good one as ``<pool>.rejected.parquet`` (+ lineage, profiles)
for inspection, and :attr:`PoolBuild.accepted` is False.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from array import array
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from specs.config import EndpointSpec, TrafficSpec
from specs.paths import resolve_path
from replay import ingest, sample_logs
from replay.fidelity import FidelityReport, TrafficProfile, fidelity_report, render_length_plot
from replay.ingest import MalformedSourceError as MalformedSourceError  # re-exported: what a failed build raises
from replay.ingest import check_malformed
from replay.prefix import PrefixCacheSim, block_prefix_hashes, trace_block_reuse
from replay.redact import Redactor
from specs.pool_schema import POOL_SCHEMA, SESSION_SCHEMA, check_pool
from replay.sessions import SessionTracker, session_key, session_shape
from replay.synth import synthesise, template_frame
from replay.tokenize import ChatTokenizer

BUILD_VERSION = "1"
_ARROW_SCHEMA = pa.schema(
    [
        ("request_id", pa.string()),
        ("arrival_offset_s", pa.float64()),
        ("body", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("expected_output_tokens", pa.int64()),
        ("prefix_group", pa.string()),
        ("logged_cached_tokens", pa.int64()),
        ("source", pa.string()),
        ("session_id", pa.string()),
        ("turn", pa.int64()),
        ("think_time_s", pa.float64()),
    ]
)
assert _ARROW_SCHEMA.names == list(POOL_SCHEMA) + list(SESSION_SCHEMA)


@dataclass
class PoolBuild:
    """A built pool: its Parquet file, lineage, both profiles and the fidelity verdict."""

    pool_path: Path
    lineage: dict
    pool_profile: TrafficProfile
    production_profile: TrafficProfile
    fidelity: FidelityReport
    malformed: list[tuple[int, str]]
    redaction_counts: dict[str, int] = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    # False: the fidelity check failed, ``pool_path`` is the rejected candidate
    # (<pool>.rejected.parquet) and ``target_path``, the endpoint's pool, was left as it was
    accepted: bool = True
    target_path: Path | None = None

    @property
    def passed(self) -> bool:
        """The build succeeded and its pool passed the blocking fidelity check (it is the pool now)."""
        return self.accepted and self.fidelity.passed

    @property
    def pool(self) -> pl.DataFrame:
        return check_pool(pl.read_parquet(self.pool_path))

    def table(self) -> str:
        return fidelity_table(self)

    def plot(self, path: Path | str | None = None) -> Path:
        return render_length_plot(
            self.pool_profile,
            self.production_profile,
            path or self.pool_path.with_suffix(".lengths.png"),
            title=f"{self.lineage.get('endpoint', '')}: pool vs production token lengths",
        )


def fidelity_table(build: PoolBuild) -> str:
    """The text `autoresearch replay build ENDPOINT` prints: source line, malformed count, table."""
    lin = build.lineage
    what = (
        f"({build.stats.get('rows', 0)} requests from {lin.get('source')}, {len(build.malformed)} malformed lines, "
        f"{build.stats.get('distinct_requests', build.stats.get('rows', 0))} distinct)"
    )
    if build.accepted:
        head = f"replay pool {build.pool_path} {what}"
    else:
        target = build.target_path
        kept = (
            "the last good pool there is kept unchanged"
            if target is not None and target.exists()
            else "there is no previous pool"
        )
        head = (
            f"replay pool REJECTED {what}: the fidelity check failed, so {target} was not replaced ({kept}); "
            f"the rejected candidate is {build.pool_path}"
        )
    if build.redaction_counts:
        head += "\nredacted: " + ", ".join(f"{k}={v}" for k, v in sorted(build.redaction_counts.items()))
    if build.malformed:
        head += (
            "\nmalformed: "
            + "; ".join(f"line {n}: {r}" for n, r in build.malformed[:5])
            + (" ..." if len(build.malformed) > 5 else "")
        )
    return head + "\n" + build.fidelity.table()


def engine_block_size(spec: EndpointSpec) -> int:
    """KV-cache block size the endpoint's engine uses (see engines.registry.block_size_for)."""
    from engines.registry import block_size_for

    return block_size_for(spec)


def traffic_source(traffic: TrafficSpec, out_dir: Path | None = None) -> Path:
    """The file a traffic spec reads. Kind 'sample' is the bundled sample log (regenerated if
    missing); a ``limit`` beyond it generates a larger sample with the spec's seed."""
    if traffic.kind == "sample":
        if traffic.path:
            return resolve_path(traffic.path)
        if traffic.limit is None or traffic.limit <= sample_logs.BUNDLED_N:
            return sample_logs.bundled_sample()
        target = (
            out_dir or sample_logs.BUNDLED_SAMPLE.parent
        ) / f"support_logs_seed{traffic.seed}_n{traffic.limit}.jsonl"
        return target if target.exists() else sample_logs.write_sample(target, traffic.limit, traffic.seed)
    path = resolve_path(traffic.path)
    if not path.exists():
        raise FileNotFoundError(f"traffic.path {traffic.path!r} -> {path} does not exist")
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _prefix_group(body: dict) -> str:
    msgs = body.get("messages") or []
    sys = msgs[0].get("content") if msgs and msgs[0].get("role") in ("system", "developer") else None
    if not sys and not body.get("tools"):
        return "none"
    key = orjson.dumps([sys, body.get("tools")], option=orjson.OPT_SORT_KEYS)
    return "sys:" + hashlib.sha1(key).hexdigest()[:12]


def _lineage(spec: EndpointSpec, source: Path, tokenizer_dir: Path, kind: str, extra: dict) -> dict:
    tok_file = Path(tokenizer_dir) / "tokenizer.json"
    return {
        "endpoint": spec.name,
        "source": str(source),
        "source_kind": kind,
        "source_sha256": _sha256(source),
        "source_bytes": source.stat().st_size,
        "tokenizer_dir": str(tokenizer_dir),
        "tokenizer_sha256": _sha256(tok_file) if tok_file.exists() else None,
        "traffic": spec.traffic.model_dump(),
        "engine_kind": spec.engine.kind,
        "redaction_key_id": Redactor().key_id,
        "build_version": BUILD_VERSION,
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }


def build_endpoint_pool(spec: EndpointSpec, out_dir: Path | str | None = None) -> PoolBuild:
    """``build_pool`` with the endpoint's own tokenizer (specs.models) and the default
    pools folder (specs.paths.pools_dir()/<endpoint>)."""
    from specs.models import ensure_model
    from specs.paths import pools_dir

    return build_pool(spec, ensure_model(spec.model.path), Path(out_dir) if out_dir else pools_dir() / spec.name)


def build_pool(spec: EndpointSpec, tokenizer_dir: Path | str, out_dir: Path | str, batch_size: int = 4096) -> PoolBuild:
    """Build ``spec``'s pool into ``out_dir``/<endpoint>-pool.parquet and judge it. The pool there
    is replaced only by a build whose fidelity check passes (``PoolBuild.accepted``); a source with
    too many malformed lines raises :class:`MalformedSourceError` and replaces nothing."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = ChatTokenizer.from_dir(tokenizer_dir, cache_entries=20_000)
    source = traffic_source(spec.traffic, out_dir)
    out_path = out_dir / f"{spec.name}-pool.parquet"
    if spec.traffic.kind in ("request_log", "sample"):
        return build_from_request_log(spec, source, tok, Path(tokenizer_dir), out_path, batch_size=batch_size)
    return build_from_trace(spec, source, tok, Path(tokenizer_dir), out_path)


def build_from_request_log(
    spec: EndpointSpec,
    source: Path,
    tok: ChatTokenizer,
    tokenizer_dir: Path,
    out_path: Path,
    batch_size: int = 4096,
    redactor: Redactor | None = None,
) -> PoolBuild:
    """Stream a request log into a redacted pool at ``out_path`` (see module docstring): written
    under a temporary name, renamed over ``out_path`` only if its fidelity check passes. Raises
    :class:`MalformedSourceError` when the log's malformed share is over the traffic spec's
    ``max_malformed_fraction`` (``out_path`` untouched)."""
    return _built(
        out_path, lambda cand: _request_log_pool(spec, source, tok, tokenizer_dir, cand, batch_size, redactor)
    )


def build_from_trace(
    spec: EndpointSpec, source: Path, tok: ChatTokenizer, tokenizer_dir: Path, out_path: Path
) -> PoolBuild:
    """Synthesise a pool for an Azure or Mooncake token-count trace at ``out_path``; replaced, or
    refused, as :func:`build_from_request_log` says."""
    return _built(out_path, lambda cand: _trace_pool(spec, source, tok, tokenizer_dir, cand))


def rejected_path(pool_path: Path) -> Path:
    """Where a build whose pool failed its fidelity check leaves that pool (next to the good one)."""
    return pool_path.with_name(pool_path.stem + ".rejected.parquet")


def pool_files(pool_path: Path) -> list[Path]:
    """The files one build writes for ``pool_path``: lineage, both profiles, and the pool last."""
    return [pool_path.with_suffix(".lineage.json"), *profile_paths(pool_path), pool_path]


def _candidate_path(out_path: Path) -> Path:
    """A temporary pool path in ``out_path``'s folder (so renaming it over the pool is atomic)."""
    return out_path.with_name(f".{out_path.stem}.building-{os.getpid()}-{secrets.token_hex(4)}.parquet")


def _built(out_path: Path, build_into) -> PoolBuild:
    """Run ``build_into(candidate_path)``, then settle the candidate: renamed over ``out_path`` when
    its fidelity check passed, else moved to :func:`rejected_path`; on any error removed."""
    out_path = Path(out_path)
    cand = _candidate_path(out_path)
    try:
        build = build_into(cand)
        accepted = build.fidelity.passed
        dest = out_path if accepted else rejected_path(out_path)
        for src, dst in zip(pool_files(cand), pool_files(dest)):
            os.replace(src, dst)  # the pool itself last: until then the previous pool is whole
    finally:  # whatever was not renamed (an error, a malformed source) goes
        for p in [*pool_files(cand), cand.with_suffix(".parquet.tmp")]:
            p.unlink(missing_ok=True)
    stale = [*pool_files(rejected_path(out_path)), out_path.with_suffix(".lengths.png")] if accepted else []
    for p in [*stale, dest.with_suffix(".lengths.png")]:  # plots and rejects of pools no longer there
        p.unlink(missing_ok=True)
    build.pool_path, build.target_path, build.accepted = dest, out_path, accepted
    return build


def _request_log_pool(
    spec: EndpointSpec,
    source: Path,
    tok: ChatTokenizer,
    tokenizer_dir: Path,
    out_path: Path,
    batch_size: int = 4096,
    redactor: Redactor | None = None,
) -> PoolBuild:
    t_start = time.perf_counter()
    redactor = redactor or Redactor(cache_entries=50_000, tokenizer=tok.tokenizer)
    block = engine_block_size(spec)
    limit = spec.traffic.limit
    malformed: list[tuple[int, str]] = []
    pool_sim, prod_sim = PrefixCacheSim(block), PrefixCacheSim(block)
    ts_all, out_all = array("d"), array("q")  # compact: a million rows stay a few MB
    prod_prompt, pool_prompt = array("q"), array("q")
    logged_cached, logged_prompt_for_cached = 0, 0
    body_hashes = array("q")  # hash of each pool body: distinct requests (the pool-size row), 8 bytes a row
    tmp = out_path.with_suffix(".parquet.tmp")
    writer = pq.ParquetWriter(tmp, _ARROW_SCHEMA, compression="zstd")
    t0: float | None = None
    rows = 0
    # Sessions are found twice: on the original lines (production) and on the redacted bodies (the
    # pool), so the fidelity check sees whether redaction kept conversations together.
    prod_sessions, pool_sessions = SessionTracker(), SessionTracker()
    prod_sid, prod_think, pool_sid, pool_think = array("q"), array("d"), array("q"), array("d")  # compact, as above
    timers = {"ingest_s": 0.0, "redact_s": 0.0, "tokenise_s": 0.0, "prefix_sim_s": 0.0, "write_s": 0.0}
    batches = ingest.iter_request_log(source, malformed, batch_size=batch_size, limit=limit)
    try:
        while True:
            tick = time.perf_counter()
            batch = next(batches, None)
            tick = _lap(timers, "ingest_s", tick)
            if batch is None:
                break
            if t0 is None:
                t0 = batch.timestamps[0]
            red_bodies, changed = [], []
            for b in batch.bodies:
                rb = redactor.redact_request(b)
                red_bodies.append(rb)
                changed.append(rb["messages"] != b["messages"] or rb.get("user") != b.get("user"))
            tick = _lap(timers, "redact_s", tick)
            red_texts = [tok.render(b) for b in red_bodies]
            red_ids = tok.encode_texts(red_texts)
            orig_idx = [i for i, c in enumerate(changed) if c]
            orig_ids = dict(zip(orig_idx, tok.encode_texts([tok.render(batch.bodies[i]) for i in orig_idx])))
            tick = _lap(timers, "tokenise_s", tick)
            cached_col = []
            for i, ids in enumerate(red_ids):
                hashes = block_prefix_hashes(ids, block)
                pool_sim.add(hashes, len(ids))
                o = orig_ids.get(i)
                prod_sim.add(hashes if o is None else block_prefix_hashes(o, block), len(ids) if o is None else len(o))
                prod_prompt.append(len(ids) if o is None else len(o))
                pool_prompt.append(len(ids))
                lc = batch.logged_cached_tokens[i]
                cached_col.append(lc)
                if lc is not None:
                    logged_cached += lc
                    logged_prompt_for_cached += batch.logged_prompt_tokens[i] or prod_prompt[-1]
            sess = []
            for ts_i, b, rb, key, lat in zip(
                batch.timestamps, batch.bodies, red_bodies, batch.session_keys, batch.latencies_s
            ):
                sid, _, think = prod_sessions.add(ts_i, b, key, lat)
                prod_sid.append(int(sid[1:]))
                prod_think.append(np.nan if think is None else think)
                pool_key = session_key(None, rb) if key is not None and key.startswith("user:") else key
                sess.append(pool_sessions.add(ts_i, rb, pool_key, lat))
                pool_sid.append(int(sess[-1][0][1:]))
                pool_think.append(np.nan if sess[-1][2] is None else sess[-1][2])
            outs = [
                _output_tokens(c, b, spec.traffic.max_output_tokens)
                for c, b in zip(batch.completion_tokens, red_bodies)
            ]
            red_bodies = [cap_output(b, spec.traffic.max_output_tokens) for b in red_bodies]
            tick = _lap(timers, "prefix_sim_s", tick)
            ts_all.extend(batch.timestamps)
            out_all.extend(outs)
            body_json = [orjson.dumps(b).decode() for b in red_bodies]
            body_hashes.extend(hash(x) for x in body_json)
            writer.write_table(
                pa.table(
                    {
                        "request_id": [f"{source.stem}:{n}" for n in batch.lines],
                        "arrival_offset_s": [t - t0 for t in batch.timestamps],
                        "body": body_json,
                        "prompt_tokens": [len(x) for x in red_ids],
                        "expected_output_tokens": outs,
                        "prefix_group": [_prefix_group(b) for b in red_bodies],
                        "logged_cached_tokens": cached_col,
                        "source": [source.name] * len(batch),
                        "session_id": [x[0] for x in sess],
                        "turn": [x[1] for x in sess],
                        "think_time_s": [x[2] for x in sess],
                    },
                    schema=_ARROW_SCHEMA,
                )
            )
            rows += len(batch)
            _lap(timers, "write_s", tick)
    finally:
        writer.close()
    check_malformed(source, malformed, rows + len(malformed), spec.traffic.max_malformed_fraction)
    ts = np.asarray(ts_all, dtype=np.float64)
    t0 = float(ts.min()) if len(ts) else 0.0
    arrivals = ts - t0
    prod_turns, prod_thinks = session_shape(np.asarray(prod_sid), np.asarray(prod_think))
    pool_turns, pool_thinks = session_shape(np.asarray(pool_sid), np.asarray(pool_think))
    prod = TrafficProfile(
        arrivals,
        np.asarray(prod_prompt),
        np.asarray(out_all),
        prod_sim.fraction,
        block,
        (logged_cached / logged_prompt_for_cached) if logged_prompt_for_cached else None,
        note="production: original (unredacted) requests under the endpoint tokenizer",
        session_turns=prod_turns,
        think_s=prod_thinks,
    )
    pool = TrafficProfile(
        arrivals,
        np.asarray(pool_prompt),
        np.asarray(out_all),
        pool_sim.fraction,
        block,
        note="pool: redacted requests",
        session_turns=pool_turns,
        think_s=pool_thinks,
    )
    distinct = len(np.unique(np.asarray(body_hashes, dtype=np.int64)))
    report = fidelity_report(pool, prod, spec.fidelity, sweep=spec.sweep, distinct_requests=distinct)
    lineage = _lineage(
        spec,
        source,
        tokenizer_dir,
        "request_log",
        {
            "rows": rows,
            "distinct_requests": distinct,
            "malformed_lines": len(malformed),
            "cache_block_tokens": block,
            "redaction_counts": dict(redactor.counts),
            "first_timestamp": t0,
            "fidelity_passed": report.passed,
        },
    )
    _finalise(tmp, out_path, ts, t0, lineage)
    _save_profiles(out_path, pool, prod)
    seconds = time.perf_counter() - t_start
    return PoolBuild(
        out_path,
        lineage,
        pool,
        prod,
        report,
        malformed,
        dict(redactor.counts),
        {
            "rows": rows,
            "distinct_requests": distinct,
            "seconds": seconds,
            "requests_per_s": rows / seconds if seconds else 0.0,
            "segment_cache_misses": tok.cache_misses,
            "redaction_token_mismatches": redactor.token_mismatches,
            **{k: round(v, 3) for k, v in timers.items()},
        },
    )


def profile_paths(pool_path: Path) -> tuple[Path, Path]:
    """Where a build saves (pool profile, production profile) next to its pool (numbers only)."""
    return pool_path.with_suffix(".profile.npz"), pool_path.with_suffix(".production.npz")


def _save_profiles(pool_path: Path, pool: TrafficProfile, prod: TrafficProfile) -> None:
    a, b = profile_paths(pool_path)
    pool.save(a)
    prod.save(b)


def _lap(timers: dict, key: str, since: float) -> float:
    now = time.perf_counter()
    timers[key] += now - since
    return now


def _finalise(tmp: Path, out_path: Path, ts: np.ndarray, t0: float, lineage: dict) -> None:
    """Stamp lineage into the Parquet metadata; re-base and sort only if the log was out of order."""
    meta = {b"autoresearch.lineage": json.dumps(lineage).encode()}
    in_order = len(ts) == 0 or bool(np.all(np.diff(ts) >= 0))
    pf = pq.ParquetFile(tmp)
    if in_order:  # rows are final: copy row groups with the metadata (streaming)
        with pq.ParquetWriter(out_path, pf.schema_arrow.with_metadata(meta), compression="zstd") as w:
            for i in range(pf.num_row_groups):
                w.write_table(pf.read_row_group(i))
    else:  # logs written at completion time: sort by arrival (in memory)
        df = pl.read_parquet(tmp).with_columns(pl.Series("arrival_offset_s", ts - t0)).sort("arrival_offset_s")
        schema = pa.schema([f for f in _ARROW_SCHEMA if f.name in df.columns])  # trace pools: no session columns
        pq.write_table(df.to_arrow().cast(schema).replace_schema_metadata(meta), out_path, compression="zstd")
    tmp.unlink()
    out_path.with_suffix(".lineage.json").write_text(json.dumps(lineage, indent=2))


def transform_trace(
    frame: pl.DataFrame, traffic: TrafficSpec, has_blocks: bool, min_prompt_tokens: int = 1
) -> tuple[pl.DataFrame, int]:
    """The documented transform of a token-count trace, applied alike to pool and production:
    prompt lengths scaled by ``length_scale`` (the 512-token prefix blocks too), raised to
    ``min_prompt_tokens`` (the chat template's own tokens plus one: no chat prompt is shorter)
    and clipped at ``max_prompt_tokens``; output lengths are not scaled (decode length is what the
    workload is about), only clipped at ``max_output_tokens``. Returns (frame with prompt_target,
    output_target, block_ids) and the scaled block size in tokens."""
    scale = traffic.length_scale
    block = max(1, int(round(ingest.MOONCAKE_BLOCK_TOKENS * scale)))
    p = np.maximum(np.round(frame["prompt_tokens"].to_numpy() * scale), max(1, min_prompt_tokens)).astype(np.int64)
    if traffic.max_prompt_tokens:
        p = np.minimum(p, traffic.max_prompt_tokens)
    o = np.maximum(frame["output_tokens"].to_numpy(), 1).astype(np.int64)
    if traffic.max_output_tokens:
        o = np.minimum(o, traffic.max_output_tokens)
    blocks = []
    src = frame["hash_ids"].to_list() if has_blocks else [[] for _ in range(len(frame))]
    for row, (ids, n) in enumerate(zip(src, p.tolist())):
        need = -(-n // block)
        ids = list(ids[:need]) + [-(row * 100_000 + k + 1) for k in range(max(0, need - len(ids)))]  # unshared tail
        blocks.append(ids)
    return frame.with_columns(
        pl.Series("prompt_target", p),
        pl.Series("output_target", o),
        pl.Series("block_ids", blocks, dtype=pl.List(pl.Int64)),
    ), block


def read_transformed_trace(spec: EndpointSpec, source: Path, tok: ChatTokenizer):
    """Read an Azure or Mooncake trace and apply the documented transform (with the chat template's
    floor): one place, so the pool build and the drift profile see the same production."""
    kind = spec.traffic.kind
    res = (ingest.read_azure if kind == "azure" else ingest.read_mooncake)(source, limit=spec.traffic.limit)
    tf = template_frame(tok)
    frame, block = transform_trace(
        res.frame,
        spec.traffic,
        has_blocks=(kind == "mooncake"),
        min_prompt_tokens=tf.prefix_tokens + tf.suffix_tokens + 1,
    )
    return res, frame, block


def _trace_pool(spec: EndpointSpec, source: Path, tok: ChatTokenizer, tokenizer_dir: Path, out_path: Path) -> PoolBuild:
    t_start = time.perf_counter()
    kind = spec.traffic.kind
    res, frame, block = read_transformed_trace(spec, source, tok)
    check_malformed(source, res.malformed, res.lines_read, spec.traffic.max_malformed_fraction)
    targets = frame["prompt_target"].to_numpy()
    block_ids = frame["block_ids"].to_list()
    texts, counts, ids = synthesise(tok, targets, block_ids, block, seed=spec.traffic.seed)
    outs = frame["output_target"].to_numpy()
    ts = frame["timestamp_s"].to_numpy()
    t0 = float(ts.min()) if len(ts) else 0.0
    model = spec.model.served_name or "default"
    from engines.registry import adapter_class

    ignore_eos = adapter_class(spec.engine.kind).honours_ignore_eos
    bodies = [
        orjson.dumps(
            {
                "model": model,
                "messages": [{"role": "user", "content": t}],
                "max_tokens": int(o),
                "temperature": 0.0,
                **({"ignore_eos": True} if ignore_eos else {}),
            }
        ).decode()
        for t, o in zip(texts, outs)
    ]
    pool_df = pl.DataFrame(
        {
            "request_id": [f"{source.stem}:{n}" for n in frame["line"].to_list()],
            "arrival_offset_s": ts - t0,
            "body": bodies,
            "prompt_tokens": counts,
            "expected_output_tokens": outs,
            "prefix_group": [f"blk:{b[0]}" if kind == "mooncake" and b else "none" for b in block_ids],
            "logged_cached_tokens": pl.Series([None] * len(frame), dtype=pl.Int64),
            "source": [source.name] * len(frame),
        }
    )
    pool_df = check_pool(pool_df).sort("arrival_offset_s", maintain_order=True)
    exact = int((counts == targets).sum())
    distinct = len(set(bodies))
    arrivals = ts - t0
    if kind == "mooncake":  # reuse measured at the trace's (scaled) block size on both sides
        prod_cached = trace_block_reuse(block_ids, targets, block)
        sim = PrefixCacheSim(block)
        for x, n in zip(ids, counts.tolist()):
            sim.add(block_prefix_hashes(x, block), n)
        pool_cached, cache_block = sim.fraction, block
    else:
        prod_cached = pool_cached = cache_block = None
    prod = TrafficProfile(
        arrivals,
        targets,
        outs,
        prod_cached,
        cache_block,
        note=f"production: trace after length_scale={spec.traffic.length_scale}, "
        f"max_prompt_tokens={spec.traffic.max_prompt_tokens}, max_output_tokens={spec.traffic.max_output_tokens}",
    )
    pool = TrafficProfile(arrivals, counts, outs, pool_cached, cache_block, note="pool: synthesised text, tokenised")
    report = fidelity_report(pool, prod, spec.fidelity, sweep=spec.sweep, distinct_requests=distinct)
    lineage = _lineage(
        spec,
        source,
        tokenizer_dir,
        kind,
        {
            "rows": len(frame),
            "distinct_requests": distinct,
            "malformed_lines": len(res.malformed),
            "synth_block_tokens": block,
            "length_scale": spec.traffic.length_scale,
            "max_prompt_tokens": spec.traffic.max_prompt_tokens,
            "max_output_tokens": spec.traffic.max_output_tokens,
            "exact_length_rows": exact,
            "output_enforced_with_ignore_eos": ignore_eos,
            "first_timestamp": t0,
            "fidelity_passed": report.passed,
        },
    )
    tmp = out_path.with_suffix(".parquet.tmp")
    pool_df.write_parquet(tmp)
    _finalise(tmp, out_path, np.sort(ts), t0, lineage)
    _save_profiles(out_path, pool, prod)
    seconds = time.perf_counter() - t_start
    return PoolBuild(
        out_path,
        lineage,
        pool,
        prod,
        report,
        res.malformed,
        {},
        {
            "rows": len(frame),
            "distinct_requests": distinct,
            "seconds": seconds,
            "requests_per_s": len(frame) / seconds if seconds else 0.0,
            "exact_length_rows": exact,
        },
    )


def profile_from_pool(pool: pl.DataFrame, tok: ChatTokenizer, block: int) -> TrafficProfile:
    """Re-measure a pool (e.g. after editing bodies) under ``tok``: lengths and cached fraction."""
    bodies = [orjson.loads(b) for b in pool["body"].to_list()]
    ids = tok.encode_bodies(bodies)
    sim = PrefixCacheSim(block)
    order = np.argsort(pool["arrival_offset_s"].to_numpy(), kind="stable")
    for i in order:
        sim.add(block_prefix_hashes(ids[i], block), len(ids[i]))
    turns, think = (
        session_shape(pool["session_id"].to_list(), pool["think_time_s"].fill_null(np.nan).to_numpy())
        if "session_id" in pool.columns
        else (None, None)
    )
    return TrafficProfile(
        pool["arrival_offset_s"].to_numpy(),
        np.array([len(x) for x in ids]),
        pool["expected_output_tokens"].to_numpy(),
        sim.fraction,
        block,
        session_turns=turns,
        think_s=think,
    )


def cap_output(body: dict, max_output_tokens: int | None) -> dict:
    """``body`` with its output limit clipped at ``max_output_tokens`` (traffic.max_output_tokens:
    a CPU replay of a GPU workload keeps prompts and prefixes but shortens decode)."""
    if not max_output_tokens:
        return body
    out = dict(body)
    keys = [k for k in ("max_completion_tokens", "max_tokens") if out.get(k)] or ["max_tokens"]
    for key in keys:
        out[key] = min(int(out.get(key) or max_output_tokens), max_output_tokens)
    return out


def _output_tokens(recorded: int | None, body: dict, max_output_tokens: int | None) -> int:
    """Output length of a logged request: the recorded completion, else its limit; clipped alike in pool and production."""
    n = recorded if recorded is not None else int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
    return min(n, max_output_tokens) if max_output_tokens else n


def profile_from_request_log(
    path: Path | str, tok: ChatTokenizer, block: int, limit: int | None = None, max_output_tokens: int | None = None
) -> TrafficProfile:
    """Production profile of a request log (original text; nothing is written anywhere)."""
    malformed: list[tuple[int, str]] = []
    sim = PrefixCacheSim(block)
    ts, prompt, out = [], [], []
    tracker, sids, thinks = SessionTracker(), [], []
    for batch in ingest.iter_request_log(path, malformed, limit=limit):
        for ids, b, c in zip(tok.encode_bodies(batch.bodies), batch.bodies, batch.completion_tokens):
            sim.add(block_prefix_hashes(ids, block), len(ids))
            prompt.append(len(ids))
            out.append(_output_tokens(c, b, max_output_tokens))
        for t, b, key, lat in zip(batch.timestamps, batch.bodies, batch.session_keys, batch.latencies_s):
            sid, _, think = tracker.add(t, b, key, lat)
            sids.append(sid)
            thinks.append(np.nan if think is None else think)
        ts.extend(batch.timestamps)
    arr = np.asarray(ts, dtype=np.float64)
    turns, think_s = session_shape(sids, np.asarray(thinks))
    return TrafficProfile(
        arr - (arr.min() if len(arr) else 0.0),
        np.asarray(prompt),
        np.asarray(out),
        sim.fraction,
        block,
        session_turns=turns,
        think_s=think_s,
    )


def profile_from_source(spec: EndpointSpec, tok: ChatTokenizer) -> TrafficProfile:
    """The production profile of ``spec``'s traffic source exactly as a pool build computes it
    (same trace transform, template floor and block size): what drift checks should compare with
    the saved production profile. Reads the source; writes nothing."""
    source = traffic_source(spec.traffic)
    if spec.traffic.kind in ("request_log", "sample"):
        return profile_from_request_log(
            source,
            tok,
            engine_block_size(spec),
            limit=spec.traffic.limit,
            max_output_tokens=spec.traffic.max_output_tokens,
        )
    kind = spec.traffic.kind
    _, frame, block = read_transformed_trace(spec, source, tok)
    targets = frame["prompt_target"].to_numpy()
    ts = frame["timestamp_s"].to_numpy()
    cached = trace_block_reuse(frame["block_ids"].to_list(), targets, block) if kind == "mooncake" else None
    return TrafficProfile(
        ts - (ts.min() if len(ts) else 0.0),
        targets,
        frame["output_target"].to_numpy(),
        cached,
        block if kind == "mooncake" else None,
    )
