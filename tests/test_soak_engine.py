"""Soaks on real vLLM CPU servers (loadgen.soak, through the one harness research.harness).

A candidate that leaks memory under sustained load (engines/patches/planted_leak: real, touched memory
for every second of engine work, ``MemoryError`` past a ceiling) holds its short sweep steps and is
judged better than a one-sequence baseline (slowed by engines/patches/planted_slowdown, so the margin is
known); then it dies within its soak at its capacity. The harness
rejects it as ``invalid: unstable under sustained load``, names the out-of-memory error, keeps the
engine's log tail and the comparison the sweeps had shown. The baseline's own soak (no leak) ends
with its engine alive.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from specs.config import SoakSpec
from specs.engine_args import parse_args, render_args
from specs.paths import REPO_ROOT
from loadgen.noise import noise_floor
from specs.pool_schema import POOL_SCHEMA
from research.harness import run_candidate

# Two engine starts (the baseline's, the candidate's) and about two minutes of load on a quiet host.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1500)]

# Engine work during the candidate's one sweep is bounded by its wall time, and at rates below its
# capacity the engine idles between replies of 16 tokens (well under 40 s of work, even on a slow
# host); a hold at capacity works without pause and passes the leak's ceiling (240 MiB at 6 MiB per
# second of work = 40 s) within 100 s.
LEAK_ENV = {
    "PYTHONPATH": str(REPO_ROOT / "engines" / "patches" / "planted_leak"),
    "AUTORESEARCH_PLANTED_LEAK_MB_PER_S": "6",
    "AUTORESEARCH_PLANTED_LEAK_CEILING_MB": "240",
}

SLOW_ENV = {
    "PYTHONPATH": str(REPO_ROOT / "engines" / "patches" / "planted_slowdown"),
    "AUTORESEARCH_PLANTED_SLOWDOWN": "3",
}


def pool(n: int = 48, output_tokens: int = 16) -> pl.DataFrame:
    rows = []
    for i in range(n):
        text = f"Request {i}: describe the weather in city number {i * 7 % 31} in a few words."
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": text}],
            "max_tokens": output_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
        }
        rows.append(
            {
                "request_id": f"s{i}",
                "arrival_offset_s": i * 0.5,
                "body": json.dumps(body),
                "prompt_tokens": 20,
                "expected_output_tokens": output_tokens,
                "prefix_group": f"g{i}",
                "logged_cached_tokens": None,
                "source": "test",
            }
        )
    return pl.DataFrame(rows, schema=POOL_SCHEMA)


def seqs(spec, n: int) -> list[str]:
    args = parse_args(list(spec.engine.args))
    args["--max-num-seqs"] = str(n)
    return render_args(args)


def test_soak_rejects_a_candidate_that_runs_out_of_memory_under_sustained_load(engine_slot, definitions, tmp_path):
    engine_slot.release()  # one engine at a time on this host
    spec = definitions.endpoint("tiny_random")
    spec = spec.model_copy(
        update={
            "sweep": spec.sweep.model_copy(
                update=dict(
                    rates=[0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
                    step_duration_s=4,
                    warmup_requests=1,
                    max_steps=8,
                    warm_prefix_groups=0,
                )
            ),
            "soak": SoakSpec(hold_s=10, overload_s=3, recovery_s=3),
        }
    )
    # The tiny model's one-sequence baseline reached the ladder's top (8 req/s) here: its API server, not
    # the batch limit, bounds it. A planted slowdown (each engine step 4x as long) makes the baseline poor
    # by a known margin, so the leaking candidate's sweeps show it far better, as a real fault would hide.
    slowed = spec.model_copy(update={"engine": spec.engine.model_copy(update={"env": {**spec.engine.env, **SLOW_ENV}})})
    lines: list[str] = []
    baseline = run_candidate(
        slowed, seqs(spec, 1), pool(), None, 2, capture=True, workdir=tmp_path / "base", progress=lines.append
    )
    assert baseline.verdict != "invalid", "\n".join(lines)
    assert baseline.soak is not None and baseline.soak.diagnosis not in ("oom", "engine died"), baseline.soak
    assert baseline.soak.held_s == 10 and baseline.soak.requests > 0 and baseline.soak.overload is not None

    leaking = spec.model_copy(
        update={
            "engine": spec.engine.model_copy(update={"env": {**spec.engine.env, **LEAK_ENV}}),
            "soak": SoakSpec(hold_s=100, overload_s=0, recovery_s=0),
        }
    )
    floor = noise_floor(baseline.sweeps)
    result = run_candidate(
        leaking, seqs(spec, 16), pool(), floor, 1, extra_repeats=0, workdir=tmp_path / "cand", progress=lines.append
    )
    log = "\n".join(lines)
    assert result.verdict == "invalid", log
    assert result.invalid_reason.startswith("unstable under sustained load"), result.invalid_reason
    assert "out of memory" in result.invalid_reason
    assert result.comparison is not None and result.comparison.verdict == "better", log  # what its sweeps showed
    soak = result.soak
    assert soak.outcome == "unstable" and soak.diagnosis == "oom" and 0 < soak.held_s < 100
    assert "planted leak" in (result.log_tail or "")  # the engine's own last words are kept
    assert soak.metadata()["rate"] == pytest.approx(soak.rate) and "log_tail" not in soak.metadata()
