"""Sessions in request logs (replay.sessions) and the closed-loop client (loadgen.closedloop) against
the nginx null endpoint: grouping by id and by message-history prefix, think times, turn order,
and that pools without sessions keep the open-loop path."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import polars as pl
import pytest

from specs.config import FidelitySpec
from loadgen import nullserver
from loadgen.closedloop import run_closed_loop, session_drift
from loadgen.replay import session_scripts
from loadgen.runner import LagBounds
from loadgen.users import user_scripts
from replay.fidelity import TrafficProfile, fidelity_report
from replay.ingest import parse_request_line
from specs.pool_schema import POOL_SCHEMA, check_pool, has_sessions
from replay.sessions import SessionTracker, session_key, session_shape

needs_nginx = pytest.mark.skipif(
    shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"),
    reason="nginx not installed (scripts/setup.sh installs it)",
)


def turn(history: list[dict], text: str) -> list[dict]:
    return history + [{"role": "user", "content": text}]


def test_prefix_grouping_follows_resent_history():
    """Turn n+1 = turn n's messages + the reply + a new user message; two interleaved conversations
    that began alike (same system prompt and question) stay apart: first come, first served."""
    sys_msg = [{"role": "system", "content": "be brief"}]
    a1 = turn(sys_msg, "hi")
    b1 = turn(sys_msg, "hi")
    a2 = turn(a1 + [{"role": "assistant", "content": "hello A"}], "more")
    b2 = turn(b1 + [{"role": "assistant", "content": "hello B"}], "more")
    a3 = turn(a2 + [{"role": "assistant", "content": "sure"}], "thanks")
    unrelated = turn(sys_msg, "something else")
    tracker = SessionTracker()
    got = [
        tracker.add(t, {"messages": m})
        for t, m in [(0.0, a1), (0.5, b1), (3.0, a2), (4.0, unrelated), (4.5, b2), (9.0, a3)]
    ]
    sid = [g[0] for g in got]
    assert [g[1] for g in got] == [0, 0, 1, 0, 1, 2]
    assert sid[0] == sid[2] == sid[5] and sid[1] == sid[4] and len(set(sid)) == 3
    # no latency logged: the think time is the arrival gap
    assert got[2][2] == pytest.approx(3.0) and got[5][2] == pytest.approx(6.0) and got[0][2] is None


def test_explicit_ids_group_sessions_and_latency_gives_think_time():
    lines = [
        {
            "timestamp": 100.0,
            "conversation_id": "c1",
            "latency_s": 2.0,
            "request": {"messages": [{"role": "user", "content": "x"}]},
        },
        {
            "timestamp": 101.0,
            "metadata": {"conversation_id": "c2"},
            "request": {"messages": [{"role": "user", "content": "x"}]},
        },
        {
            "timestamp": 105.0,
            "conversation_id": "c1",
            "latency_ms": 500,
            "request": {"messages": [{"role": "user", "content": "unrelated text"}]},
        },
        {"timestamp": 106.0, "request": {"user": "u9", "messages": [{"role": "user", "content": "y"}]}},
        {
            "timestamp": 108.5,
            "end_timestamp": 109.0,
            "request": {"user": "u9", "messages": [{"role": "user", "content": "z"}]},
        },
    ]
    parsed = [parse_request_line(json.dumps(x).encode()) for x in lines]
    assert [p[5] for p in parsed] == [
        "conversation_id:c1",
        "conversation_id:c2",
        "conversation_id:c1",
        "user:u9",
        "user:u9",
    ]
    assert [p[6] for p in parsed] == [2.0, None, 0.5, None, 0.5]
    tracker = SessionTracker()
    got = [tracker.add(p[0], p[1], p[5], p[6]) for p in parsed]
    assert got[0][0] == got[2][0] != got[1][0] and got[3][0] == got[4][0]
    assert got[2][2] == pytest.approx(3.0)  # 105 - (100 + 2 s latency)
    assert got[4][2] == pytest.approx(2.5)  # no latency on turn 0 of u9: the arrival gap
    assert session_key(None, {"messages": []}) is None


def test_fidelity_compares_turns_and_think_times_only_where_sessions_exist():
    arr = np.arange(6.0)
    lengths = np.full(6, 10)
    plain = fidelity_report(TrafficProfile(arr, lengths, lengths), TrafficProfile(arr, lengths, lengths))
    assert not any(r.name in ("turns_per_session_ks", "think_time_ks") for r in plain.rows)  # traces: as before
    turns, think = session_shape(["a", "a", "a", "b", "b", "c"], np.array([np.nan, 2.0, 3.0, np.nan, 4.0, np.nan]))
    assert sorted(turns.tolist()) == [1, 2, 3] and sorted(think.tolist()) == [2.0, 3.0, 4.0]
    prod = TrafficProfile(arr, lengths, lengths, session_turns=turns, think_s=think)
    same = fidelity_report(TrafficProfile(arr, lengths, lengths, session_turns=turns, think_s=think), prod)
    lost = fidelity_report(TrafficProfile(arr, lengths, lengths), prod)  # e.g. redaction broke the histories
    names = {r.name: r for r in same.rows}
    assert names["turns_per_session_ks"].ok and names["think_time_ks"].ok
    assert {r.name for r in lost.failures} >= {"turns_per_session_ks"}
    assert FidelitySpec().think_time_ks > 0


def pool(
    n_sessions: int = 3, turns: int = 3, gap: float = 0.05, think: float = 0.2, sessions: bool = True
) -> pl.DataFrame:
    rows = []
    for s in range(n_sessions):
        for t in range(turns):
            rows.append(
                {
                    "request_id": f"s{s}t{t}",
                    "arrival_offset_s": s * 0.1 + t * gap,
                    "body": json.dumps({"messages": [{"role": "user", "content": f"{s}-{t}"}], "max_tokens": 8}),
                    "prompt_tokens": 5,
                    "expected_output_tokens": 8,
                    "prefix_group": "none",
                    "logged_cached_tokens": None,
                    "source": "test",
                    "session_id": f"s{s}",
                    "turn": t,
                    "think_time_s": None if t == 0 else think,
                }
            )
    frame = pl.DataFrame(
        rows, schema={**POOL_SCHEMA, "session_id": pl.Utf8, "turn": pl.Int64, "think_time_s": pl.Float64}
    )
    return check_pool(frame if sessions else frame.drop("session_id", "turn", "think_time_s")).sort("arrival_offset_s")


def test_pools_without_sessions_keep_the_open_loop_path():
    assert has_sessions(pool())
    plain = pool(sessions=False)
    assert not has_sessions(plain) and "session_id" not in plain.columns  # check_pool keeps the old contract
    assert not has_sessions(pool(turns=1))  # ids but single turns: nothing to keep in order


@needs_nginx
def test_closed_loop_keeps_turn_order_and_think_times_on_the_null_server():
    """Recorded turns 50 ms apart but a 200 ms think time: every later turn goes out after its
    predecessor's reply plus the think time, never at its recorded time."""
    frame = pool()
    scripts = session_scripts(frame)
    assert [len(s.requests) for s in scripts] == [3, 3, 3] and scripts[1].start_s == pytest.approx(0.1)
    with nullserver.start() as server:
        out = run_closed_loop(
            server.url, None, frame["body"].to_list(), scripts, lag_bounds=LagBounds(p99_ms=1000.0, min_rate_ratio=0.0)
        )
    assert out.valid and len(out.records) == 9 and all(r.ok for r in out.records)
    by = {}
    for r in out.records:
        by.setdefault(r.session, {})[r.turn] = r
    for turns in by.values():
        for k in (1, 2):
            prev, cur = turns[k - 1], turns[k]
            end = prev.sent_s + prev.e2e_s
            assert cur.scheduled_s == pytest.approx(end + 0.2, abs=1e-6)  # due = reply end + think
            assert cur.sent_s >= cur.scheduled_s - 1e-6
            assert cur.sent_s > cur.recorded_s  # later than production's 50 ms gap
    drift = session_drift(out.records)
    assert drift.sessions == 3 and drift.later_turns == 6 and drift.early_turns == 0
    assert drift.drift_s.p50 > 0.1  # each later turn lost at least its think time minus the 50 ms recorded gap


@needs_nginx
def test_users_cycle_the_pool_until_the_step_ends():
    frame = pool(sessions=False)
    scripts = user_scripts(frame, 2, think_time_s=0.05)
    assert scripts[0].requests[0] != scripts[1].requests[0] and all(s.cycle for s in scripts)
    with nullserver.start() as server:
        out = run_closed_loop(
            server.url,
            None,
            frame["body"].to_list(),
            scripts,
            stop_sending_s=0.6,
            lag_bounds=LagBounds(p99_ms=1000.0, min_rate_ratio=0.0),
        )
    assert out.valid and {r.session for r in out.records} == {"user0", "user1"}
    assert all(r.scheduled_s <= 0.6 for r in out.records)
    for user in ("user0", "user1"):
        mine = sorted((r for r in out.records if r.session == user), key=lambda r: r.turn)
        assert len(mine) > 3  # it kept going, one request at a time
        assert all(b.sent_s >= a.sent_s + a.e2e_s + 0.05 - 1e-6 for a, b in zip(mine, mine[1:]))


def test_users_are_strict_in_yaml_and_cli():
    from pydantic import ValidationError

    from autoresearch.cli import UsageError, _user_counts
    from specs.config import SweepSpec

    assert SweepSpec(users=[1, 2, 4]).users == [1, 2, 4]
    for bad in ([2, 1], [0, 1], []):
        with pytest.raises(ValidationError, match="sweep.users"):
            SweepSpec(users=bad)
    with pytest.raises(ValidationError):
        SweepSpec(user=[1])  # strict: a misspelt key is an error
    assert _user_counts("1,2,8") == [1, 2, 8]
    for bad in ("1,x", "4,2", "0"):
        with pytest.raises(UsageError):
            _user_counts(bad)
