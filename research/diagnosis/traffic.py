"""Statistics of the traffic a diagnosis reads from the replay pool: prompt and output lengths, shared
prefixes (an ideal prefix cache's reuse), tool use, structured outputs, multi-turn sessions, arrivals.

Apart from the rules because they describe the workload, whatever engine serves it: the same numbers
become the diagnosis's traits, the memory's workload signature and the rules' ``r``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import polars as pl

SAMPLE_ROWS = 5000  # pool rows read for body statistics (enough for stable fractions)
TOKENIZED_ROWS = 1000  # rows tokenized for the exact prefix-reuse simulation (tokenizing is slow)


def _prompt_text(body: dict) -> str:
    """The prompt as the model sees it, roughly: tools, then every message's text, in order."""
    parts = [json.dumps(body.get("tools"), sort_keys=True)] if body.get("tools") else []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<{message.get('role')}>{content or ''}")
        if message.get("tool_calls"):
            parts.append(json.dumps(message["tool_calls"], sort_keys=True))
    return "\n".join(parts)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on equal prefixes (fast for long shared system prompts)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def estimate_prefix_reuse(texts: Sequence[str], groups: Sequence[str], lookback: int = 32) -> float:
    """Share of prompt characters an ideal prefix cache would serve: each prompt's longest
    common prefix with a recent earlier prompt of the same prefix group, over all characters."""
    recent: dict[str, list[str]] = defaultdict(list)
    reused = total = 0
    for text, group in zip(texts, groups):
        previous = recent[group]
        best = max((_common_prefix(text, p) for p in previous), default=0)
        reused += best
        total += len(text)
        previous.append(text)
        if len(previous) > lookback:
            previous.pop(0)
    return reused / total if total else 0.0


def request_stats(pool: pl.DataFrame, tokenizer=None, block_size: int = 16) -> dict[str, float]:
    """Prompt/output lengths, shared prefixes, tool use and structured outputs of a replay pool.

    ``tokenizer`` (a ``replay.tokenize.ChatTokenizer``) makes ``prefix_reuse`` an exact
    block-level simulation (``block_size`` = the engine's KV block); without it the reuse is
    estimated from the prompt text.
    """
    if pool.height == 0:
        raise ValueError("the replay pool is empty: nothing to diagnose")
    pool = pool.sort("arrival_offset_s")
    prompt = pool["prompt_tokens"].cast(pl.Float64).to_numpy()
    output = pool["expected_output_tokens"].cast(pl.Float64).to_numpy()
    sample = pool.head(SAMPLE_ROWS)
    bodies = [json.loads(b) for b in sample["body"].to_list()]
    stats: dict[str, float] = {
        "requests": float(pool.height),
        "prompt_tokens_mean": float(prompt.mean()),
        "prompt_tokens_p50": float(np.percentile(prompt, 50)),
        "prompt_tokens_p95": float(np.percentile(prompt, 95)),
        "prompt_tokens_max": float(prompt.max()),
        "output_tokens_mean": float(output.mean()),
        "output_tokens_p50": float(np.percentile(output, 50)),
        "output_tokens_p95": float(np.percentile(output, 95)),
        "decode_share": float(output.sum() / max(output.sum() + prompt.sum(), 1.0)),
        "long_prompt_fraction": float((prompt > 4 * max(np.median(prompt), 1.0)).mean()),
        "tool_use_fraction": float(np.mean([bool(b.get("tools")) for b in bodies])),
        "tool_result_fraction": float(
            np.mean([any(m.get("role") == "tool" for m in b.get("messages") or []) for b in bodies])
        ),
        "structured_output_fraction": float(
            np.mean([(b.get("response_format") or {}).get("type") in ("json_schema", "json_object") for b in bodies])
        ),
        "multi_turn_fraction": float(
            np.mean([sum(m.get("role") == "assistant" for m in b.get("messages") or []) > 0 for b in bodies])
        ),
        "prefix_groups": float(pool["prefix_group"].n_unique()),
    }
    groups = sample["prefix_group"].fill_null("none").to_list()
    stats["shared_prefix_request_fraction"] = float(
        sample.group_by("prefix_group").len().filter(pl.col("len") > 1)["len"].sum() / sample.height
    )
    if tokenizer is not None:
        from replay.prefix import cached_fraction

        ids = tokenizer.encode_bodies(bodies[:TOKENIZED_ROWS])
        stats["prefix_reuse"] = float(cached_fraction(ids, block_size))
        stats["prefix_reuse_method"] = float(block_size)  # >0: simulated with this block size
    else:
        stats["prefix_reuse"] = float(estimate_prefix_reuse([_prompt_text(b) for b in bodies], groups))
        stats["prefix_reuse_method"] = 0.0  # 0: estimated from text
    logged = pool["logged_cached_tokens"].drop_nulls()
    if logged.len() > 0:
        matching = pool.filter(pl.col("logged_cached_tokens").is_not_null())
        stats["logged_cached_fraction"] = float(logged.sum() / max(matching["prompt_tokens"].sum(), 1))
    arrivals = pool["arrival_offset_s"].to_numpy()
    if len(arrivals) > 2 and arrivals[-1] > arrivals[0]:
        gaps = np.diff(arrivals)
        stats["arrival_rate"] = float((len(arrivals) - 1) / (arrivals[-1] - arrivals[0]))
        stats["interarrival_cv"] = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 0.0
    return stats
