"""Read production traffic: chat request logs (JSON lines) and token-count traces (Azure CSV,
Mooncake JSON lines). A malformed line is recorded with its line number and reason and the
ingest goes on; nothing is dropped silently.

A source whose malformed share is over ``traffic.max_malformed_fraction`` is refused as a whole
(:func:`check_malformed` raises :class:`MalformedSourceError`, naming its first bad lines): a
pool built from what survives of a mostly broken log would look like production only by chance.

Request logs are streamed in batches (:func:`iter_request_log`): every line needs per-line
parsing, validation and redaction anyway, and a bad line must not fail its neighbours, so the
parser is orjson line by line with bounded memory. Traces are columnar: polars reads them
(lazily for the CSV) and validates whole columns at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import orjson
import polars as pl

from replay.sessions import session_key

MOONCAKE_BLOCK_TOKENS = 512
_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


@dataclass
class IngestResult:
    """What was read: the valid rows, the malformed lines (line number, reason), the source."""

    frame: pl.DataFrame
    malformed: list[tuple[int, str]]
    source: Path
    total_lines: int = 0
    # records the reader looked at (valid + malformed; no header, no blank lines, none past ``limit``):
    # what the malformed fraction is taken of
    lines_read: int | None = None

    @property
    def malformed_fraction(self) -> float:
        return malformed_fraction(
            len(self.malformed), self.lines_read if self.lines_read is not None else self.total_lines
        )

    def malformed_summary(self, limit: int = 10) -> str:
        if not self.malformed:
            return f"{self.source.name}: {self.total_lines} lines, none malformed"
        shown = "; ".join(f"line {n}: {r}" for n, r in self.malformed[:limit])
        more = f" (+{len(self.malformed) - limit} more)" if len(self.malformed) > limit else ""
        return f"{self.source.name}: {len(self.malformed)} of {self.total_lines} lines malformed: {shown}{more}"


class SourceFormatError(ValueError):
    """A traffic file that is not of its declared kind (its columns do not match): nothing is read."""


class MalformedSourceError(ValueError):
    """A traffic source with too many malformed lines: the pool build fails, nothing is replaced."""

    def __init__(self, source: Path, malformed: list[tuple[int, str]], lines_read: int, limit: float, shown: int = 5):
        self.source, self.malformed, self.lines_read, self.limit = Path(source), malformed, lines_read, limit
        first = "; ".join(f"{self.source}:{n}: {r}" for n, r in malformed[:shown])
        more = f" (+{len(malformed) - shown} more)" if len(malformed) > shown else ""
        super().__init__(
            f"{self.source}: {len(malformed)} of {lines_read} lines malformed "
            f"({malformed_fraction(len(malformed), lines_read):.1%}), over traffic.max_malformed_fraction "
            f"{limit:g}: no pool built, the last good pool is kept. First bad lines: {first}{more}"
        )

    def __reduce__(self):
        return type(self), (self.source, self.malformed, self.lines_read, self.limit)


def malformed_fraction(malformed: int, lines_read: int) -> float:
    return malformed / lines_read if lines_read else 0.0


def check_malformed(source: Path | str, malformed: list[tuple[int, str]], lines_read: int, limit: float) -> None:
    """Raise :class:`MalformedSourceError` when more than ``limit`` of the ``lines_read`` lines were
    malformed (``traffic.max_malformed_fraction``)."""
    if malformed and malformed_fraction(len(malformed), lines_read) > limit:
        raise MalformedSourceError(Path(source), malformed, lines_read, limit)


@dataclass
class RequestBatch:
    """Valid request-log lines of one batch (bodies are parsed dicts, not yet redacted)."""

    lines: list[int] = field(default_factory=list)
    timestamps: list[float] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)
    completion_tokens: list[int | None] = field(default_factory=list)
    logged_prompt_tokens: list[int | None] = field(default_factory=list)
    logged_cached_tokens: list[int | None] = field(default_factory=list)
    session_keys: list[str | None] = field(default_factory=list)  # explicit conversation id / user (replay.sessions)
    latencies_s: list[float | None] = field(default_factory=list)  # logged request latency, when the log has one

    def __len__(self) -> int:
        return len(self.lines)


def _timestamp(value) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return datetime.fromisoformat(value).timestamp()
    raise ValueError("not a number or an RFC 3339 string")


def _opt_int(obj: dict | None, *keys: str) -> int | None:
    for key in keys[:-1]:
        obj = obj.get(key) if isinstance(obj, dict) else None
    value = obj.get(keys[-1]) if isinstance(obj, dict) else None
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"field 'usage.{'.'.join(keys)}' must be a non-negative integer, got {value!r}")
    return value


def _latency_s(rec: dict, ts: float) -> float | None:
    """The logged latency of a request (seconds), when the line has one: ``latency_s``,
    ``latency_ms``, ``duration_s``, or an end time (``end_timestamp`` / ``completed_at``)."""
    for name, scale in (("latency_s", 1.0), ("duration_s", 1.0), ("latency_ms", 0.001)):
        value = rec.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return float(value) * scale
    for name in ("end_timestamp", "completed_at"):
        if name in rec:
            try:
                end = _timestamp(rec[name])
            except ValueError:
                raise ValueError(f"field '{name}' unreadable: {rec[name]!r}") from None
            return max(0.0, end - ts)
    return None


def parse_request_line(raw: bytes) -> tuple[float, dict, int | None, int | None, int | None, str | None, float | None]:
    """Parse one log line; raise ValueError with a reason naming the field.

    Returns (timestamp, body, completion, prompt and cached tokens, session key, latency s)."""
    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc})") from None
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    if "timestamp" not in rec:
        raise ValueError("field 'timestamp' missing")
    try:
        ts = _timestamp(rec["timestamp"])
    except ValueError as exc:
        raise ValueError(f"field 'timestamp' unreadable: {rec['timestamp']!r} ({exc})") from None
    body = rec.get("request", rec.get("body"))
    if not isinstance(body, dict):
        raise ValueError("field 'request' missing or not an object (the chat-completions body)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("field 'request.messages' missing or empty")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise ValueError(f"field 'request.messages[{i}].role' missing or not one of {sorted(_ROLES)}")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise ValueError(f"field 'request.messages[{i}].content' must be a string, a list of parts or null")
    usage = rec.get("usage")
    if usage is None and isinstance(rec.get("response"), dict):
        usage = rec["response"].get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise ValueError("field 'usage' is not an object")
    return (
        ts,
        body,
        _opt_int(usage, "completion_tokens"),
        _opt_int(usage, "prompt_tokens"),
        _opt_int(usage, "prompt_tokens_details", "cached_tokens"),
        session_key(rec, body),
        _latency_s(rec, ts),
    )


def iter_request_log(
    path: Path | str, malformed: list[tuple[int, str]], batch_size: int = 4096, limit: int | None = None
) -> Iterator[RequestBatch]:
    """Stream valid lines in batches; malformed ones are appended to ``malformed`` as they come."""
    path = Path(path)
    batch, taken = RequestBatch(), 0
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if limit is not None and taken >= limit:
                break
            if not raw.strip():
                continue
            try:
                ts, body, out, prompt, cached, key, latency = parse_request_line(raw)
            except ValueError as exc:
                malformed.append((lineno, str(exc)))
                continue
            batch.lines.append(lineno)
            batch.timestamps.append(ts)
            batch.bodies.append(body)
            batch.completion_tokens.append(out)
            batch.logged_prompt_tokens.append(prompt)
            batch.logged_cached_tokens.append(cached)
            batch.session_keys.append(key)
            batch.latencies_s.append(latency)
            taken += 1
            if len(batch) >= batch_size:
                yield batch
                batch = RequestBatch()
    if len(batch):
        yield batch


def count_lines(path: Path | str) -> int:
    with Path(path).open("rb") as f:
        return sum(1 for _ in f)


def read_request_log(path: Path | str, limit: int | None = None) -> IngestResult:
    """Whole request log as a frame (line, timestamp_s, request JSON, logged usage). The bodies are
    the ORIGINAL, unredacted requests: keep this frame in memory only; persist redacted data."""
    malformed: list[tuple[int, str]] = []
    rows: dict[str, list] = {
        "line": [],
        "timestamp_s": [],
        "request": [],
        "completion_tokens": [],
        "logged_prompt_tokens": [],
        "logged_cached_tokens": [],
    }
    for b in iter_request_log(path, malformed, limit=limit):
        rows["line"] += b.lines
        rows["timestamp_s"] += b.timestamps
        rows["request"] += [orjson.dumps(x).decode() for x in b.bodies]
        rows["completion_tokens"] += b.completion_tokens
        rows["logged_prompt_tokens"] += b.logged_prompt_tokens
        rows["logged_cached_tokens"] += b.logged_cached_tokens
    frame = pl.DataFrame(
        rows,
        schema={
            "line": pl.Int64,
            "timestamp_s": pl.Float64,
            "request": pl.Utf8,
            "completion_tokens": pl.Int64,
            "logged_prompt_tokens": pl.Int64,
            "logged_cached_tokens": pl.Int64,
        },
    )
    return IngestResult(frame, malformed, Path(path), count_lines(path), lines_read=frame.height + len(malformed))


def read_azure(path: Path | str, limit: int | None = None) -> IngestResult:
    """Azure LLM inference trace CSV: TIMESTAMP, ContextTokens, GeneratedTokens.

    Returns columns line, timestamp_s (epoch seconds), prompt_tokens, output_tokens."""
    path = Path(path)
    header = path.open().readline().strip().split(",")
    need = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    if [c for c in need if c not in header]:
        raise SourceFormatError(
            f"{path}:1: traffic.kind azure expects a CSV header with {', '.join(need)}; found {', '.join(header)[:160]}"
        )
    lf = (
        pl.scan_csv(path, infer_schema=False, truncate_ragged_lines=True)
        .select(need)
        .with_row_index("line", offset=2)
        .with_columns(
            ts=pl.col("TIMESTAMP").str.strip_chars().str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False),
            p=pl.col("ContextTokens").str.strip_chars().cast(pl.Int64, strict=False),
            o=pl.col("GeneratedTokens").str.strip_chars().cast(pl.Int64, strict=False),
        )
    )
    df = lf.collect()
    reason = (
        pl.when(pl.col("ts").is_null())
        .then(pl.format("field 'TIMESTAMP' unreadable: {}", pl.col("TIMESTAMP").fill_null("<missing>")))
        .when(pl.col("p").is_null() | (pl.col("p") < 1))
        .then(
            pl.format(
                "field 'ContextTokens' must be a positive integer, got {}",
                pl.col("ContextTokens").fill_null("<missing>"),
            )
        )
        .when(pl.col("o").is_null() | (pl.col("o") < 0))
        .then(
            pl.format(
                "field 'GeneratedTokens' must be a non-negative integer, got {}",
                pl.col("GeneratedTokens").fill_null("<missing>"),
            )
        )
    )
    df = df.with_columns(reason=reason)
    bad = df.filter(pl.col("reason").is_not_null())
    good = df.filter(pl.col("reason").is_null())
    if limit is not None:
        good = good.head(limit)
    frame = good.select(
        pl.col("line").cast(pl.Int64),
        (pl.col("ts").dt.epoch("us") / 1e6).alias("timestamp_s"),
        pl.col("p").alias("prompt_tokens"),
        pl.col("o").alias("output_tokens"),
    )
    return IngestResult(
        frame,
        list(zip(bad["line"].cast(pl.Int64).to_list(), bad["reason"].to_list())),
        path,
        len(df) + 1,
        lines_read=len(df),
    )


def read_mooncake(
    path: Path | str, limit: int | None = None, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> IngestResult:
    """Mooncake trace JSON lines: timestamp (ms), input_length, output_length, hash_ids.

    Returns columns line, timestamp_s, prompt_tokens, output_tokens, hash_ids (list of ints,
    one per ``block_tokens``-token prefix block; equal ids mean an identical prefix block)."""
    path = Path(path)
    lines = pl.read_csv(
        path, has_header=False, separator="\x1f", quote_char=None, infer_schema=False, new_columns=["raw"]
    ).get_column("raw")  # one string per line, read by polars
    malformed: list[tuple[int, str]] = []
    rows: dict[str, list] = {"line": [], "timestamp_s": [], "prompt_tokens": [], "output_tokens": [], "hash_ids": []}
    for lineno, raw in enumerate(lines, start=1):
        if limit is not None and len(rows["line"]) >= limit:
            break
        if raw is None or not raw.strip():
            continue
        try:
            rec = orjson.loads(raw)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
            ts, n_in, n_out, ids = (
                rec.get("timestamp"),
                rec.get("input_length"),
                rec.get("output_length"),
                rec.get("hash_ids"),
            )
            if not isinstance(ts, (int, float)) or isinstance(ts, bool):
                raise ValueError(f"field 'timestamp' must be a number (ms), got {ts!r}")
            if not isinstance(n_in, int) or n_in < 1:
                raise ValueError(f"field 'input_length' must be a positive integer, got {n_in!r}")
            if not isinstance(n_out, int) or n_out < 0:
                raise ValueError(f"field 'output_length' must be a non-negative integer, got {n_out!r}")
            if not isinstance(ids, list) or not all(isinstance(h, int) for h in ids):
                raise ValueError("field 'hash_ids' must be a list of integers")
            need = -(-n_in // block_tokens)
            if len(ids) != need:
                raise ValueError(f"field 'hash_ids' has {len(ids)} blocks but input_length {n_in} needs {need}")
        except (orjson.JSONDecodeError, ValueError) as exc:
            malformed.append(
                (
                    lineno,
                    str(exc)
                    if isinstance(exc, ValueError) and not isinstance(exc, orjson.JSONDecodeError)
                    else f"invalid JSON ({exc})",
                )
            )
            continue
        rows["line"].append(lineno)
        rows["timestamp_s"].append(ts / 1000.0)
        rows["prompt_tokens"].append(n_in)
        rows["output_tokens"].append(n_out)
        rows["hash_ids"].append(ids)
    frame = pl.DataFrame(
        rows,
        schema={
            "line": pl.Int64,
            "timestamp_s": pl.Float64,
            "prompt_tokens": pl.Int64,
            "output_tokens": pl.Int64,
            "hash_ids": pl.List(pl.Int64),
        },
    )
    return IngestResult(frame, malformed, path, len(lines), lines_read=frame.height + len(malformed))
