"""The replay pool: one row per request, stored as Parquet. This is the contract between
replay (which builds pools) and loadgen (which sends them).

Columns
-------
request_id            str    stable id (source line number based)
arrival_offset_s      f64    seconds since the first request in production
body                  str    the full OpenAI chat-completions request body as JSON (PII redacted);
                             loadgen only overrides ``model`` and ``stream``/``stream_options``
prompt_tokens         i64    prompt length under the endpoint's tokenizer (chat template applied)
expected_output_tokens i64   output length to expect (``max_tokens`` with ``ignore_eos`` for synthesised pools)
prefix_group          str    key of the shared prefix (tenant system prompt, trace block chain root, ...)
logged_cached_tokens  i64?   cached prompt tokens the production engine reported, when known
source                str    where the row came from (file name)

Optional session columns (request logs with multi-turn conversations, see replay.sessions;
token-count traces have none, and a pool without them replays open loop as before):

session_id            str    the conversation this request is a turn of
turn                  i64    turn number within its session, from 0
think_time_s          f64?   recorded gap between the previous turn's end and this turn (null for turn 0)
"""

from __future__ import annotations

import polars as pl

POOL_SCHEMA: dict[str, pl.DataType] = {
    "request_id": pl.Utf8,
    "arrival_offset_s": pl.Float64,
    "body": pl.Utf8,
    "prompt_tokens": pl.Int64,
    "expected_output_tokens": pl.Int64,
    "prefix_group": pl.Utf8,
    "logged_cached_tokens": pl.Int64,
    "source": pl.Utf8,
}

SESSION_SCHEMA: dict[str, pl.DataType] = {
    "session_id": pl.Utf8,
    "turn": pl.Int64,
    "think_time_s": pl.Float64,
}


def has_sessions(df: pl.DataFrame) -> bool:
    """Whether a pool carries sessions with more than one turn (then replays keep turn order)."""
    return all(c in df.columns for c in SESSION_SCHEMA) and df.height > 0 and bool((df["turn"].fill_null(0) > 0).any())


def empty_pool() -> pl.DataFrame:
    return pl.DataFrame(schema=POOL_SCHEMA)


def check_pool(df: pl.DataFrame) -> pl.DataFrame:
    """Raise if ``df`` lacks a pool column or has the wrong type; return it in column order
    (the session columns kept, after the others, when all of them are present)."""
    missing = [c for c in POOL_SCHEMA if c not in df.columns]
    if missing:
        raise ValueError(f"replay pool is missing columns {missing}; expected {list(POOL_SCHEMA)}")
    columns = dict(POOL_SCHEMA)
    if all(c in df.columns for c in SESSION_SCHEMA):
        columns.update(SESSION_SCHEMA)
    return df.select([pl.col(c).cast(t) for c, t in columns.items()])
