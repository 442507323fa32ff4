"""Sweep, replay and calibration plumbing against the nginx null endpoint (fast; no model)."""

import json
import shutil

import polars as pl
import pytest

from specs.config import EndpointSpec
from loadgen import calibrate, nullserver
from loadgen.replay import run_production_replay
from loadgen.runner import LagBounds
from loadgen.report import render_text
from loadgen.sweep import run_sweep
from specs.pool_schema import POOL_SCHEMA

pytestmark = pytest.mark.skipif(
    shutil.which("nginx") is None and not __import__("os").path.exists("/usr/sbin/nginx"), reason="nginx not installed"
)


def pool(offsets):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16})
    n = len(offsets)
    return pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "arrival_offset_s": offsets,
            "body": [body] * n,
            "prompt_tokens": [5] * n,
            "expected_output_tokens": [16] * n,
            "prefix_group": ["g"] * n,
            "logged_cached_tokens": [None] * n,
            "source": ["t"] * n,
        },
        schema=POOL_SCHEMA,
    )


# Send-lag detection has its own tests (test_loadgen_runner); here a busy shared machine must not fail plumbing tests.
LENIENT = LagBounds(p99_ms=500.0, min_rate_ratio=0.8)


def null_spec(url: str, **sweep) -> EndpointSpec:
    """The nginx null endpoint at ``url``: 1 s steps, a warm-up burst of two, and ``sweep``'s settings."""
    return EndpointSpec(
        name="null",
        model={"path": "none", "served_name": nullserver.NULL_MODEL},
        engine={"kind": "external", "url": url},
        sla={"ttft_ms": 500, "itl_ms": 100},
        traffic={"kind": "sample"},
        sweep={"step_duration_s": 1.0, "warmup_requests": 2, **sweep},
    )


@pytest.fixture(scope="module")
def null_engine():
    from engines import start_engine

    with nullserver.start() as server:
        spec = null_spec(server.url)
        yield start_engine(spec), spec


def test_sweep_on_null_endpoint_reports_steps_progress_and_unbounded_capacity(null_engine, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))
    engine, spec = null_engine
    events = []
    sweep = run_sweep(
        engine, pool([0.0, 1.0]), spec, rates=[20, 40], progress=events.append, records_dir=tmp_path, lag_bounds=LENIENT
    )
    assert sweep.validity == "valid", sweep.invalid_reason
    assert [s.target_rate for s in sweep.steps] == [20, 40] and all(s.within_sla for s in sweep.steps)
    assert sweep.capacity_rps == 40 and sweep.capacity_bounded is False  # never broke the SLA: a lower bound
    assert any("prefix cache not reset" in n for n in sweep.notes)  # external servers are not reset, and it says so
    assert [e.phase for e in events].count("step_done") == 2 and events[-1].phase == "done"
    frame = pl.read_parquet(sweep.steps[0].records_path)
    assert frame.height == sweep.steps[0].requests and frame["output_tokens"].min() == 16
    assert "lower bound" in render_text(sweep)


def test_sweep_refuses_rates_beyond_client_calibration(null_engine, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))
    engine, spec = null_engine
    from loadgen.results import CalibrationResult

    calibrate.save_calibration(
        CalibrationResult(
            max_rate=30,
            senders=1,
            lag_p99_ms_bound=1,
            rate_ratio_bound=0.98,
            duration_s=1,
            points=[],
            host="h",
            cpus=2,
            measured_at=0,
        )
    )
    assert calibrate.load_calibration(1).max_rate == 30
    with pytest.raises(ValueError, match="calibrated"):
        run_sweep(engine, pool([0.0]), spec, rates=[20, 40], senders=1)


def test_production_replay_keeps_the_shape_and_reports_attainment(null_engine):
    engine, spec = null_engine
    offsets = [0.1 * i for i in range(10)] + [20.0 + 0.05 * i for i in range(40)]  # quiet, then a burst
    result = run_production_replay(
        engine, pool(offsets), spec, time_scale=0.1, shape_interval_s=10.0, lag_bounds=LENIENT
    )
    assert result.validity == "valid", result.invalid_reason
    assert [iv.requests for iv in result.intervals] == [10, 0, 40]
    assert result.intervals[2].target_rate == pytest.approx(40.0)  # 40 requests in 1 replay second
    assert result.attainment == 1.0 and result.overall.requests == 50
    assert result.sessions is None  # a pool without sessions (as from Azure, Mooncake): the open loop as before


def test_multi_turn_pool_replays_session_aware_and_can_be_forced_open_loop(null_engine):
    sessions = pool([0.1 * i for i in range(10)]).with_columns(
        session_id=pl.Series([f"s{i // 2}" for i in range(10)]),
        turn=pl.Series([i % 2 for i in range(10)], dtype=pl.Int64),
        think_time_s=pl.Series([None if i % 2 == 0 else 0.05 for i in range(10)], dtype=pl.Float64),
    )
    engine, spec = null_engine
    result = run_production_replay(engine, sessions, spec, time_scale=0.1, shape_interval_s=10.0, lag_bounds=LENIENT)
    assert result.validity == "valid", result.invalid_reason
    assert result.overall.requests == 10
    assert (result.sessions.sessions, result.sessions.later_turns, result.sessions.early_turns) == (5, 5, 0)
    forced = run_production_replay(
        engine, sessions, spec, time_scale=0.1, shape_interval_s=10.0, lag_bounds=LENIENT, sessions=False
    )
    assert forced.sessions is None and forced.overall.requests == 10


def test_production_replay_holds_the_client_to_the_endpoints_own_send_lag_bound(null_engine):
    """The replay judges the client by the bound the endpoint's sweeps use (sweep_lag_bounds), not a fixed
    10 ms: on a 2-core host that declares max_send_lag_ms 1000 the "after" replay of the main job was
    invalid at a p99 lag of 17-40 ms, which its sweeps accept."""
    engine, spec = null_engine
    offsets = [0.1 * i for i in range(10)]
    derived = run_production_replay(engine, pool(offsets), spec, time_scale=0.1, shape_interval_s=10.0)
    assert derived.send_lag_bound_ms == pytest.approx(25.0)  # 5% of the 500 ms TTFT target
    declared = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"max_send_lag_ms": 1000.0})})
    sessions = pool(offsets).with_columns(
        session_id=pl.Series([f"s{i // 2}" for i in range(10)]),
        turn=pl.Series([i % 2 for i in range(10)], dtype=pl.Int64),
        think_time_s=pl.Series([None if i % 2 == 0 else 0.05 for i in range(10)], dtype=pl.Float64),
    )
    for replayed in (pool(offsets), sessions):
        result = run_production_replay(engine, replayed, declared, time_scale=0.1, shape_interval_s=10.0)
        assert result.validity == "valid" and result.send_lag_bound_ms == 1000.0, result.invalid_reason


def test_calibration_finds_a_sustained_rate(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))
    # A short, lenient calibration: the search and the cache, not this machine's speed.
    from loadgen.runner import LagBounds

    result = calibrate.calibrate(
        duration_s=1.0, start_rate=50, max_rate=100, bisect_steps=0, bounds=LagBounds(p99_ms=1000.0, min_rate_ratio=0.5)
    )
    assert result.max_rate == 100 and [p.rate for p in result.points] == [50, 100]
    assert calibrate.load_calibration(1).max_rate == 100


def test_engine_warmup_runs_once_per_engine_before_its_first_sweep_and_is_not_counted(tmp_path, monkeypatch):
    """Engines that build graphs per shape as they meet it get an uncounted warm-up run, once per start."""
    from engines import start_engine

    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))
    with nullserver.start() as server:
        spec = null_spec(server.url, engine_warmup_s=2.0, engine_warmup_rps=10)
        engine = start_engine(spec)
        events = []
        first = run_sweep(engine, pool([0.0, 1.0]), spec, rates=[20], progress=events.append, lag_bounds=LENIENT)
        second = run_sweep(engine, pool([0.0, 1.0]), spec, rates=[20], lag_bounds=LENIENT)
        again = run_sweep(start_engine(spec), pool([0.0, 1.0]), spec, rates=[20], lag_bounds=LENIENT)
    warm = [n for n in first.notes if n.startswith("engine warm-up")]
    assert len(warm) == 1 and "20 requests at 10 req/s" in warm[0], first.notes  # 2 s at 10 req/s, really sent
    assert not any(n.startswith("engine warm-up") for n in second.notes)  # the same engine: already warm
    assert any(n.startswith("engine warm-up") for n in again.notes)  # a new engine start warms again
    # the warm-up is no step: the steps and their request counts are the same with and without it
    assert [s.target_rate for s in first.steps] == [s.target_rate for s in second.steps] == [20]
    assert first.steps[0].requests == second.steps[0].requests
    phases = [e.phase for e in events]
    assert phases.index("warmup") < phases.index("step") and "engine warm-up" in events[0].message


def test_the_warm_up_burst_runs_once_per_engine_not_before_every_step(tmp_path, monkeypatch):
    """An engine that served a step seconds ago is warm: the burst of warmup_requests precedes an engine's
    first step only (it cost 2-3 s a step on the 2-core host); a new engine start is warmed again."""
    from engines import start_engine
    from loadgen.step import StepRunner

    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))
    bursts: list[int] = []
    real = StepRunner.warmup

    def counted(self, count, **kwargs):
        bursts.append(count)
        return real(self, count, **kwargs)

    monkeypatch.setattr(StepRunner, "warmup", counted)
    with nullserver.start() as server:
        spec = null_spec(server.url)
        engine = start_engine(spec)
        first = run_sweep(engine, pool([0.0, 1.0]), spec, rates=[10, 20, 40], lag_bounds=LENIENT)
        after_first = list(bursts)
        second = run_sweep(engine, pool([0.0, 1.0]), spec, rates=[10, 20, 40], lag_bounds=LENIENT)
        after_second = list(bursts)
        run_sweep(start_engine(spec), pool([0.0, 1.0]), spec, rates=[10], lag_bounds=LENIENT)
    assert len(first.steps) == 3 and len(second.steps) == 3
    assert after_first == [2]  # three steps, one burst
    assert after_second == [2]  # the same engine's next sweep: none
    assert bursts == [2, 2]  # a new engine start: warmed again


def test_a_users_step_the_client_fell_behind_on_is_repeated_once_then_invalidates(null_engine, tmp_path, monkeypatch):
    """Send-lag bounds no client can meet make every step client-bound: the step is repeated once
    (and says so), then the sweep is invalid, as in the rate sweep."""
    from loadgen.users import run_user_sweep

    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))
    engine, spec = null_engine
    impossible = LagBounds(p99_ms=1e-6, min_rate_ratio=1.0)
    result = run_user_sweep(engine, pool([0.0] * 8), spec, users=[2], step_duration_s=1.0, lag_bounds=impossible)
    assert not result.valid and "client" in result.invalid_reason
    assert any(n.startswith("step at 2 users repeated: client") for n in result.notes), result.notes
    no_retry = run_user_sweep(
        engine, pool([0.0] * 8), spec, users=[2], step_duration_s=1.0, lag_bounds=impossible, client_retries=0
    )
    assert not no_retry.valid and not any("repeated" in n for n in no_retry.notes)


def test_an_engine_whose_cache_cannot_be_reset_never_meets_a_prompt_twice(tmp_path, monkeypatch):
    """Without a cache reset (transformers serve, external servers) a repeat that replayed the first
    sweep's prompts would find them cached: each step takes the next requests of the engine's own walk
    through the pool, and a new engine walks the same requests again (paired across configurations)."""
    from engines import start_engine

    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))
    requests = pool([0.01 * i for i in range(400)])
    with nullserver.start() as server:
        spec = null_spec(server.url, min_requests=5)

        def ids(sweep):
            return [i for s in sweep.steps for i in pl.read_parquet(s.records_path)["request_id"].to_list()]

        engine = start_engine(spec)
        first = run_sweep(engine, requests, spec, rates=[10, 20], records_dir=tmp_path / "a", lag_bounds=LENIENT)
        second = run_sweep(engine, requests, spec, rates=[10, 20], records_dir=tmp_path / "b", lag_bounds=LENIENT)
        other = run_sweep(
            start_engine(spec), requests, spec, rates=[10, 20], records_dir=tmp_path / "c", lag_bounds=LENIENT
        )
    assert all(s.validity == "valid" for s in (first, second, other))
    served = ids(first) + ids(second)
    assert len(served) == len(set(served)) > 40  # two sweeps on one engine: no request id twice
    assert ids(other) == ids(first)  # another engine's first sweep meets the same requests, in order
    assert any("has not served yet" in n for n in first.notes)
