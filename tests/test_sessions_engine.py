"""Session-aware replay and concurrency mode on the real vLLM CPU engine (tiny_random, one sequence
at a time: --max-num-seqs 1, so queueing is easy to provoke and to reason about).

The client shares this 2-core host with the engine: assertions are orderings and relations read
from the recorded send and finish times, never absolute latencies; send-lag bounds are the
endpoint's own (1 s, see definitions/endpoints/tiny_random/defs.yaml)."""

from __future__ import annotations

import json
import statistics

import polars as pl
import pytest

from specs.engine_args import parse_args, render_args
from loadgen.closedloop import UserScript, run_closed_loop
from loadgen.replay import run_production_replay
from loadgen.runner import LagBounds
from loadgen.users import run_user_sweep
from specs.pool_schema import POOL_SCHEMA, SESSION_SCHEMA, check_pool

pytestmark = pytest.mark.engine

THINK_S = 0.3
RECORDED_GAP_S = 0.05  # production's turns came faster than any reply here: an open loop would send early
BOUNDS = LagBounds(p99_ms=1000.0, min_rate_ratio=0.0)


def one_seq(spec):
    args = parse_args(list(spec.engine.args))
    args["--max-num-seqs"] = "1"
    return spec.with_engine_args(render_args(args))


@pytest.fixture
def engine(engine_slot, definitions):
    spec = one_seq(definitions.endpoint("tiny_random"))
    return spec, engine_slot.get(spec, list(spec.engine.args))


def body(text: str, tokens: int) -> str:
    return json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": text}],
            "max_tokens": tokens,
            "ignore_eos": True,
            "temperature": 0.0,
        }
    )


def session_pool(sessions: int = 3, turns: int = 3, tokens: int = 32) -> pl.DataFrame:
    rows = [
        {
            "request_id": f"s{s}t{t}",
            "arrival_offset_s": s * 0.2 + t * RECORDED_GAP_S,
            "body": body(f"session {s} turn {t} " + "word " * 20, tokens),
            "prompt_tokens": 30,
            "expected_output_tokens": tokens,
            "prefix_group": "none",
            "logged_cached_tokens": None,
            "source": "test",
            "session_id": f"s{s}",
            "turn": t,
            "think_time_s": None if t == 0 else THINK_S,
        }
        for s in range(sessions)
        for t in range(turns)
    ]
    return check_pool(pl.DataFrame(rows, schema={**POOL_SCHEMA, **SESSION_SCHEMA}))


@pytest.mark.timeout(600)
def test_multi_turn_replay_waits_for_each_reply_and_keeps_think_times(engine, tmp_path):
    spec, running = engine
    result = run_production_replay(running, session_pool(), spec, mode="exact", lag_bounds=BOUNDS, records_dir=tmp_path)
    assert result.validity == "valid", result.invalid_reason
    records = pl.read_parquet(result.overall.records_path).sort("session", "turn")
    assert records.height == 9 and records["error"].null_count() == 9
    later = 0
    for _, turns in records.group_by("session"):
        rows = turns.sort("turn").to_dicts()
        for prev, cur in zip(rows, rows[1:]):
            reply_end = prev["sent_s"] + prev["e2e_s"]
            assert cur["sent_s"] >= reply_end + THINK_S - 1e-6  # after the reply, plus the logged think time
            assert cur["scheduled_s"] == pytest.approx(reply_end + THINK_S, abs=1e-6)
            later += 1
    assert later == 6
    # Replies took longer than production's recorded gaps: an open-loop replay would have sent turns early.
    assert (records["e2e_s"] > RECORDED_GAP_S).all()
    drift = result.sessions
    print(repr(drift))
    assert drift.sessions == 3 and drift.later_turns == 6 and drift.early_turns == 0
    assert drift.drift_s.p50 > THINK_S - RECORDED_GAP_S  # each later turn lost at least think - recorded gap
    assert drift.turn_send_lag_ms.p99 <= BOUNDS.p99_ms  # the think time was kept to within the lag bound


@pytest.mark.timeout(600)
def test_concurrency_sweep_reports_the_highest_users_within_the_sla(engine):
    """One sequence at a time: a user's TTFT is its prefill alone, four users' TTFT waits for up to
    three other replies. A TTFT limit of 2.5 replies holds one user and breaks four (with 1.5, a single
    host stall put one user's p95 at 615 ms against a 608 ms limit)."""
    spec, running = engine
    pool = session_pool(sessions=4, turns=1, tokens=96)
    probe = run_closed_loop(
        running.base_url,
        running.served_model,
        pool["body"].to_list(),
        [UserScript(0.0, [0, 1, 2], [0.0, 0.0, 0.0])],
        lag_bounds=BOUNDS,
    )
    # the median probe: the max let one stalled probe raise the limit past four users' p95
    reply_s = statistics.median(r.e2e_s for r in probe.records if r.ok)
    sla = spec.sla.model_copy(update={"ttft_ms": 2.5 * reply_s * 1000, "itl_ms": None, "e2e_ms": None})
    sweep_cfg = spec.sweep.model_copy(update={"warmup_requests": 1, "think_time_s": 0.0})
    spec = spec.model_copy(update={"sla": sla, "sweep": sweep_cfg})
    # the engine and the client share 2 cores: a step whose client fell behind (a host stall, 1.15 s once
    # in a full suite) is repeated, as the product does, up to three times before the sweep is invalid
    result = run_user_sweep(
        running, pool, spec, users=[1, 4], step_duration_s=max(4.0, 8 * reply_s), lag_bounds=BOUNDS, client_retries=3
    )
    print(f"reply {reply_s * 1000:.0f} ms, ttft limit {sla.ttft_ms:.0f} ms")
    assert result.valid, result.invalid_reason
    one, four = result.steps
    assert (one.users, four.users) == (1, 4)
    assert one.ttft_ms.p95 < four.ttft_ms.p95  # users queue behind each other
    assert one.within_sla and not four.within_sla, (one.sla_violations, four.sla_violations)
    assert result.capacity_users == 1 and result.capacity_bounded
    # the server, not the users, sets the rate: four users get far less than four times one user's rate
    # (a little more than one user's, as the server no longer idles while a lone user's next request
    # is on its way: 1.54x in 2 of 7 runs on a 2-core host)
    assert four.achieved_rate <= one.achieved_rate * 2.0
