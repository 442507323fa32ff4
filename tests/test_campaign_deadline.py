"""A win confirmed just before the deadline is adopted: the round cut short by its budget still ends
on the best confirmed configuration, measuring nothing more (the main job once confirmed prefix
caching in its last round and then reported the previous configuration as best).

The engine is the stand-in server of test_gpu_cap (/health and greedy completions) and the sweeps are
stubs of known capacity; the budget is real except that it refuses any experiment once one has been recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from specs.config import CampaignSpec
from loadgen.noise import noise_floor
from memory_db import MemoryStore
from loadgen.results import Comparison
from research.campaign import default_compare, judged_gain, run_campaign
from research.campaign.budget import Budget, Limits
from loadgen.step import drain_cap
from research.state import BaselineRecord, CampaignState, ExperimentState, ProposalRecord, StateStore
from test_campaign import pool, sweep
from test_gpu_cap import Recorder, _endpoint

REFUSED = "deadline: the next experiment would not end within the campaign's 43 min"


def _propose(endpoint, diagnosis, state, n, skip):
    return [
        ProposalRecord(
            proposal_id=f"p{i}",
            title=f"--max-num-seqs {v}",
            technique="raise_max_num_seqs",
            engine_arg_diff={"--max-num-seqs": v},
        )
        for i, v in enumerate(["16", "8"])  # 16: capacity 4.0 vs the baseline's 2.0
    ]


def _compare(noise, sweeps, *, final=True):
    """The real comparison, plus an interval (stub sweeps carry no requests to estimate one from)."""
    c = default_compare(noise, sweeps, final=final)
    effect = c.capacity_ratio - 1
    return c.model_copy(
        update={"effect": effect, "effect_low": effect / 2, "effect_high": effect * 1.5, "decided_by": "stub"}
    )


def _run(tmp_path: Path, monkeypatch, *, refuse_after: int | None, memory=None):
    real_check = Budget.check

    def check(self, estimate_s, running_s=0.0):
        if refuse_after is not None and len(self.ctx.state.experiments) >= refuse_after:
            return REFUSED
        return real_check(self, estimate_s, running_s)

    monkeypatch.setattr(Budget, "check", check)
    spec = CampaignSpec(
        name="dl",
        endpoint="tiny_random",
        repeats=1,
        extra_repeats=1,
        max_rounds=2,
        subagents=2,
        proposer="rules",
        deadline_minutes=30,
        gpu_hours=5,
        max_concurrent_gpus=1,
    )
    folder = tmp_path / f"refuse-{refuse_after}"
    outcome = run_campaign(
        spec,
        _endpoint(tmp_path),
        state_dir=folder,
        pool=pool(),
        sweep_fn=Recorder(),
        compare_fn=_compare,
        memory=memory,
        diagnose_fn=lambda *a: {"bottlenecks": []},
        propose_fn=_propose,
        progress=lambda line: None,
    )
    return outcome, StateStore(folder, "dl").load()


def test_a_win_confirmed_before_the_deadline_is_adopted_on_its_own_sweeps(tmp_path: Path, monkeypatch):
    memory = MemoryStore(tmp_path / "memory.duckdb")
    outcome, state = _run(tmp_path, monkeypatch, refuse_after=1, memory=memory)
    (win,) = state.experiments.values()  # the second proposal never started
    assert win.confirmed and win.verdict == "better", win
    assert outcome.end_reason == REFUSED and outcome.finished
    assert outcome.best_args == ["--max-num-seqs", "16"], outcome  # was the baseline's before the fix
    assert outcome.adopted_experiments == [win.experiment_id]
    assert state.rounds[0].adopted == win.experiment_id and not state.rounds[0].finished
    assert len(state.working.sweeps) == len(win.sweeps) == 1  # adopted on what was measured
    assert any("adopted on its own 1 sweep" in note for note in win.notes), win.notes
    # the headline is the judged effect, with its interval, not the rung ratio
    judged = outcome.judged_gain
    assert judged is not None and judged.steps == 1 and judged.estimators == [win.comparison.decided_by]
    assert judged.gain == pytest.approx(1 + win.comparison.effect) and 1 < judged.low <= judged.gain <= judged.high
    review = Path(outcome.report_path).read_text()
    assert f"total gain (judged) | **{judged.describe()}**" in review
    row = memory.query("select * from v_campaign_history").to_dicts()[0]  # analysts get it in SQL too
    assert row["judged_gain"] == pytest.approx(judged.gain) and row["judged_gain_low"] == pytest.approx(judged.low)
    assert row["judged_gain_confidence"] == pytest.approx(0.95)


def test_chained_gain_multiplies_effects_and_spends_each_steps_error_rate():
    def adopted(eid, effect, low, high, confidence, by):
        comparison = Comparison(
            verdict="better",
            capacity_ratio=1 + effect,
            baseline_capacity=1.0,
            candidate_capacities=[1 + effect],
            threshold=0.05,
            evidence="",
            effect=effect,
            effect_low=low,
            effect_high=high,
            confidence=confidence,
            decided_by=by,
        )
        experiment = ExperimentState(
            experiment_id=eid,
            round=1,
            proposal_ids=[],
            title=eid,
            baseline_args=[],
            engine_args=[],
            diff={},
            verdict="better",
            confirmed=True,
            comparison=comparison,
        )
        return experiment, BaselineRecord(
            engine_args=[], sweeps=[], noise=noise_floor([sweep(1.0)]), source_experiment=eid
        )

    (a, base_a), (b, base_b) = (
        adopted("a", 0.10, 0.04, 0.18, 0.975, "service rate"),
        adopted("b", 0.20, 0.05, 0.30, 0.95, "SLA crossing"),
    )
    state = CampaignState(
        campaign="c",
        campaign_id="c-1",
        endpoint="e",
        experiments={"a": a, "b": b},
        baselines=[base_a.model_copy(update={"source_experiment": None}), base_a, base_b],
    )
    judged = judged_gain(state)
    assert judged.gain == pytest.approx(1.10 * 1.20) and judged.low == pytest.approx(1.04 * 1.05)
    assert judged.high == pytest.approx(1.18 * 1.30) and judged.confidence == pytest.approx(0.925)
    assert judged.estimators == ["service rate", "SLA crossing"] and judged.steps == 2
    b.comparison.effect_low = None  # a verdict without an interval: no judged headline at all
    assert judged_gain(state) is None


def test_with_room_the_new_baseline_gets_its_extra_sweep_and_the_next_round_runs(tmp_path: Path, monkeypatch):
    outcome, state = _run(tmp_path, monkeypatch, refuse_after=None)
    assert outcome.best_args == ["--max-num-seqs", "16"], outcome
    first = state.experiments[state.rounds[0].adopted]
    assert len(state.working.sweeps) == 2 and len(first.sweeps) == 1  # one more sweep made it a baseline
    assert state.rounds[0].finished and len(state.rounds) == 2
    assert not any("adopted on its own" in note for note in first.notes)


def test_an_experiment_that_would_eat_the_production_checks_time_does_not_start(tmp_path: Path):
    """A campaign that declares production_check_s keeps its time back: the launch check refuses an
    experiment that fits the deadline alone but not with the verification after it (the main job once
    ran experiments to its last minute and ended with "production-shaped verification not run")."""
    from research.campaign.budget import Limits, budget_problem
    from research.campaign.context import CampaignContext

    store = StateStore(tmp_path, "dl")
    state = CampaignState(campaign="dl", campaign_id="dl-1", endpoint="e", active_seconds=40 * 60, startup_s=[25.0])
    limits = Limits(deadline_s=43 * 60, gpu_hours=5, units=1)
    assert budget_problem(state, store, limits, 120) is None  # 2 min fit the 3 left
    problem = budget_problem(state, store, limits, 120, reserved_s=170)
    assert problem.startswith("deadline: the next experiment (about 2.0 min)"), problem
    assert "2.8 min kept for the production-shaped verification" in problem

    endpoint = _endpoint(tmp_path)
    drain = drain_cap(endpoint.sla, endpoint.sweep)

    def budget(check_s: float, measures_engines: bool = True) -> Budget:
        spec = CampaignSpec(name="dl", endpoint=endpoint.name, production_check_s=check_s)
        ctx = CampaignContext(spec, endpoint, tmp_path, store, state, pool(), progress=lambda line: None)
        return Budget(ctx, limits, None, 0.0, production_check=measures_engines)

    # two starts, two replays of the pool's 20 s (it holds no more than that; 60 s were asked), each with its
    # warm-up burst's bound before it and a drain after it
    warmup = endpoint.sweep.warmup_timeout_s
    assert budget(60).production_check_s() == pytest.approx(2 * 25.0 + 2 * (warmup + 20 + drain))
    assert budget(0).production_check_s() == 0.0 and budget(60, measures_engines=False).production_check_s() == 0.0
    # the measuring (a sequential repeat, a soak's back-off) must end before the verification's time too:
    # the main job's last candidate once took its extra repeat into that time and the verification was not run
    import time

    left = budget(60).window_end() - time.monotonic()
    assert left == pytest.approx(3 * 60 - budget(60).production_check_s(), abs=5)
    assert budget(0).window_end() - time.monotonic() == pytest.approx(3 * 60, abs=5)


def test_the_verification_keeps_the_time_its_sessions_run_on_past_the_replayed_seconds(tmp_path: Path):
    """A session-aware replay of the first 60 s sends each session's later turns after a reply and a
    think time, so it runs until the last turn of a session that started in time: the deadline keeps
    that (the main job's 60 s replays ran 88-91 s while 60 s were kept, and its campaigns overran)."""
    import polars as pl

    from loadgen.replay import replay_seconds
    from research.campaign.context import CampaignContext
    from specs.pool_schema import POOL_SCHEMA, SESSION_SCHEMA

    # conversations as a help desk in Lagos might log them: (session, turn, recorded arrival in s)
    turns = [("ng-1", 0, 100.0), ("ng-1", 1, 131.5), ("ng-2", 0, 120.0), ("ng-3", 0, 150.0), ("ng-3", 1, 171.0),
             ("ng-3", 2, 197.0), ("ng-4", 0, 170.0), ("ng-4", 1, 260.0)]  # fmt: skip
    n = len(turns)
    sessions = pl.DataFrame(
        {
            "request_id": [f"q{i}" for i in range(n)],
            "arrival_offset_s": [t[2] for t in turns],
            "body": ['{"messages": []}'] * n,
            "prompt_tokens": [200] * n,
            "expected_output_tokens": [40] * n,
            "prefix_group": ["desk"] * n,
            "logged_cached_tokens": [None] * n,
            "source": ["test"] * n,
            "session_id": [t[0] for t in turns],
            "turn": [t[1] for t in turns],
            "think_time_s": [None if t[1] == 0 else 10.0 for t in turns],
        },
        schema={**POOL_SCHEMA, **SESSION_SCHEMA},
    )
    # ng-4 starts 70 s in: left out of a 60 s replay; ng-3 started at 50 s and its last turn is at 97 s
    assert replay_seconds(sessions, 60) == pytest.approx(97.0)
    assert replay_seconds(sessions, 80) == pytest.approx(160.0)  # ng-4 now starts in time
    assert replay_seconds(sessions.drop("session_id", "turn", "think_time_s"), 60) == 60.0  # open loop: cut
    # the replay's own arguments: at half speed the sessions' recorded seconds halve (ng-4 starts at 35 s and
    # ends at 80 s); open loop, the span is the shape intervals' (160 s recorded) cut at what was asked
    assert replay_seconds(sessions, 60, time_scale=0.5) == pytest.approx(80.0)
    assert replay_seconds(sessions, 60, sessions=False) == 60.0
    assert replay_seconds(sessions, sessions=False, shape_interval_s=50.0) == 200.0

    store = StateStore(tmp_path, "dl")
    state = CampaignState(campaign="dl", campaign_id="dl-1", endpoint="e", active_seconds=0, startup_s=[25.0])
    endpoint = _endpoint(tmp_path)
    ctx = CampaignContext(
        CampaignSpec(name="dl", endpoint=endpoint.name, production_check_s=60),
        endpoint,
        tmp_path,
        store,
        state,
        sessions,
        progress=lambda line: None,
    )
    kept = Budget(ctx, Limits(deadline_s=3600, gpu_hours=5, units=1), None, 0.0).production_check_s()
    warmup = endpoint.sweep.warmup_timeout_s
    assert kept == pytest.approx(2 * 25.0 + 2 * (warmup + 97.0 + drain_cap(endpoint.sla, endpoint.sweep)))
