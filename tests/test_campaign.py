"""Campaign control without an engine: state persistence, verdict rules, budget launch checks,
orphan-engine cleanup, and the review report, on constructed SweepResults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from specs.config import BudgetSpec, CampaignSpec, EndpointSpec
from dagster_project.lib import load_definitions
from specs.paths import definitions_dir
from loadgen.compare import compare
from loadgen.noise import noise_floor
from loadgen.results import LatencySummary, StepResult, SweepResult
from specs.pool_schema import POOL_SCHEMA
from research.campaign import Limits, budget_problem, estimate_seconds, run_campaign, workload_signature
from research.correctness import CorrectnessReport
from research.harness import judge, run_candidate, stop_orphan
from research.review import write_report
from research.state import (
    BaselineRecord,
    CampaignState,
    ExperimentState,
    RoundRecord,
    StateStore,
    experiment_id,
)


@pytest.fixture(scope="module")
def smollm() -> EndpointSpec:
    return load_definitions(definitions_dir()).endpoint("support_smollm")


def step(rate: float, within: bool, error_rate: float = 0.0, validity: str = "valid") -> StepResult:
    lat = LatencySummary(p50=100.0, p90=150.0, p95=200.0 if within else 5000.0, p99=300.0, mean=120.0)
    return StepResult(
        target_rate=rate,
        achieved_rate=rate,
        throughput_rps=rate if within else rate * 0.6,
        duration_s=6.0,
        requests=int(rate * 6),
        errors=int(rate * 6 * error_rate),
        error_rate=error_rate,
        ttft_ms=lat,
        itl_ms=lat,
        e2e_ms=lat,
        send_lag_ms=LatencySummary(p99=0.4),
        within_sla=within,
        sla_violations=[] if within else ["ttft p95 5000ms > 2000ms"],
        validity=validity,
        invalid_reason=None if validity == "valid" else "client fell behind: p99 lag 80 ms",
    )


def sweep(capacity: float, rates=(0.5, 1.0, 2.0, 3.0, 4.0), args=("--max-num-seqs", "2"), **step_kw) -> SweepResult:
    steps = [step(r, r <= capacity, **step_kw) for r in rates]
    validity = "invalid" if step_kw.get("validity", "valid") != "valid" else "valid"
    return SweepResult(
        endpoint="support_smollm",
        engine_args=list(args),
        launch_config_hash="h",
        started_at=0.0,
        steps=steps,
        capacity_rps=capacity,
        capacity_per_gpu=capacity,
        validity=validity,
        invalid_reason="step at 0.5 req/s: client fell behind" if validity == "invalid" else None,
    )


def pool(n: int = 20) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "arrival_offset_s": [float(i) for i in range(n)],
            "body": ['{"messages": []}'] * n,
            "prompt_tokens": [100 + i for i in range(n)],
            "expected_output_tokens": [32] * n,
            "prefix_group": [f"g{i % 4}" for i in range(n)],
            "logged_cached_tokens": [None] * n,
            "source": ["test"] * n,
        },
        schema=POOL_SCHEMA,
    )


# ------------------------------------------------------------------------------------------ state
def test_state_round_trips_atomically_and_accumulates_active_time(tmp_path: Path):
    store = StateStore(tmp_path, "camp")
    noise = noise_floor([sweep(1.0), sweep(1.0)])
    base = BaselineRecord(engine_args=["--max-num-seqs", "2"], sweeps=[sweep(1.0)], noise=noise, wall_s=60)
    state = CampaignState(
        campaign="camp", campaign_id="camp-1", endpoint="support_smollm", reference=base, working=base, baselines=[base]
    )
    eid = experiment_id("candidate", base.engine_args, ["--max-num-seqs", "16"], 2)
    state.experiments[eid] = ExperimentState(
        experiment_id=eid,
        round=1,
        proposal_ids=["p1"],
        title="seqs",
        baseline_args=base.engine_args,
        engine_args=["--max-num-seqs", "16"],
        diff={"--max-num-seqs": "16"},
        verdict="better",
        confirmed=True,
        sweeps=[sweep(3.0), sweep(3.0)],
    )
    state.rounds.append(RoundRecord(round=1, baseline_args=base.engine_args, experiment_ids=[eid]))
    time.sleep(0.05)
    store.save(state)
    first = state.active_seconds
    assert first >= 0.05
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary file left behind"
    loaded = StateStore(tmp_path, "camp").load()
    assert loaded == state
    assert loaded.experiments[eid].capacity_mean == 3.0
    # the same change on the same baseline is the same experiment; another baseline is not
    assert experiment_id("candidate", base.engine_args, ["--max-num-seqs", "16"], 2) == eid
    assert experiment_id("candidate", ["--max-num-seqs", "4"], ["--max-num-seqs", "16"], 2) != eid
    store.save(state)
    assert state.active_seconds >= first


def test_unreadable_state_is_a_clear_error(tmp_path: Path):
    (tmp_path / "camp.state.json").write_text("{not json")
    with pytest.raises(ValueError, match="(?s)camp.state.json.*move it away"):
        StateStore(tmp_path, "camp").load()


# ------------------------------------------------------------------------------------------ verdicts
def test_judge_confirms_only_a_win_repeated_beyond_the_noise(smollm: EndpointSpec):
    noise = noise_floor([sweep(1.0), sweep(1.0)])
    verdict, confirmed, reason, comp = judge([sweep(3.0), sweep(3.0)], noise, smollm, compare)
    assert (verdict, confirmed, reason) == ("better", True, None)
    assert comp.capacity_ratio == pytest.approx(3.0)
    verdict, confirmed, _, _ = judge([sweep(1.0), sweep(1.0)], noise, smollm, compare)
    assert (verdict, confirmed) == ("same", False)
    verdict, confirmed, _, _ = judge([sweep(3.0), sweep(1.0)], noise, smollm, compare)
    assert verdict != "better" and not confirmed  # one repeat did not win
    verdict, _, _, _ = judge([sweep(0.5), sweep(0.5)], noise, smollm, compare)
    assert verdict == "worse"


def test_judge_makes_client_lag_and_errors_invalid(smollm: EndpointSpec):
    noise = noise_floor([sweep(1.0), sweep(1.0)])
    verdict, confirmed, reason, _ = judge([sweep(3.0), sweep(3.0, validity="invalid")], noise, smollm, compare)
    assert verdict == "invalid" and not confirmed and "client fell behind" in reason
    failing = sweep(3.0, error_rate=0.2)
    for s in failing.steps:
        s.error_examples = ['HTTP 400: "auto" tool choice requires --enable-auto-tool-choice']
    verdict, _, reason, _ = judge([failing], noise, smollm, compare)
    assert verdict == "invalid" and "error rate" in reason and "SLA" in reason
    # timeouts at the lowest rate are overload (capacity 0), not a broken configuration
    overloaded = sweep(0.0, error_rate=0.5)
    for s in overloaded.steps:
        s.error_examples = ["timeout: no complete response after 60s"]
    verdict, _, _, _ = judge([overloaded, overloaded], noise, smollm, compare)
    assert verdict == "worse"
    assert judge([], noise, smollm, compare)[0] == "invalid"


def test_a_candidate_that_cannot_launch_is_invalid_not_an_exception(smollm: EndpointSpec, tmp_path: Path):
    result = run_candidate(
        smollm,
        ["--max-num-seqs", "2", "--no-such-flag", "1"],
        pool(),
        None,
        2,
        workdir=tmp_path,
        progress=lambda _: None,
    )
    assert result.verdict == "invalid" and "launch failed" in result.invalid_reason
    assert "--no-such-flag" in result.invalid_reason and not result.sweeps


# ------------------------------------------------------------------------------------------ budget
def test_launch_check_refuses_an_experiment_that_would_overrun(tmp_path: Path, smollm: EndpointSpec):
    campaign = CampaignSpec(name="c", endpoint="support_smollm", deadline_minutes=10, gpu_hours=0.05)
    limits = Limits.of(campaign, smollm)
    assert limits.deadline_s == 600 and limits.units == 1 and limits.gpu_hours == 0.05
    store = StateStore(tmp_path, "c")
    state = CampaignState(campaign="c", campaign_id="c-1", endpoint="support_smollm")
    first = estimate_seconds(state, smollm, 2)  # from the sweep spec: nothing measured yet
    assert first > 0
    assert budget_problem(state, store, limits, 60) is None
    assert "deadline" in budget_problem(state, store, limits, 700)
    state.gpu_hours_used = 0.04
    assert "budget" in budget_problem(state, store, limits, 60)  # 60 s = 0.0167 GPU-h > 0.01 left
    # this campaign's measurements replace the prior: engine starts of 30 s, sweeps of 100-110 s
    state.startup_s, state.sweep_s = [28.0, 32.0], [100.0, 110.0]
    assert estimate_seconds(state, smollm, 2) == pytest.approx(30 + 2 * 110)
    assert estimate_seconds(state, smollm, 4) == pytest.approx(30 + 4 * 110)
    assert estimate_seconds(state, smollm, 4, launches=2) == pytest.approx(60 + 4 * 110)


def test_a_campaign_that_cannot_afford_its_baseline_ends_cleanly(tmp_path: Path, smollm: EndpointSpec):
    tight = smollm.model_copy(update={"budget": BudgetSpec(gpu_hours=0.001, wall_clock_minutes=30)})
    campaign = CampaignSpec(name="tight", endpoint="support_smollm")
    lines: list[str] = []
    outcome = run_campaign(campaign, tight, state_dir=tmp_path, pool=pool(), progress=lines.append)
    assert outcome.finished and "budget" in outcome.end_reason
    assert outcome.experiments_run == 0 and outcome.reference_capacity is None
    state = StateStore(tmp_path, "tight").load()
    assert state.finished and state.gpu_hours_used == 0
    # starting it again does nothing: it already ended
    again = run_campaign(campaign, tight, state_dir=tmp_path, pool=pool(), progress=lines.append)
    assert again.end_reason == outcome.end_reason and any("already finished" in l for l in lines)
    # ... and names the review it wrote, so a new run of the campaign job records the same report
    assert outcome.report_path and again.report_path == outcome.report_path
    # a review lost to a kill between saving the state and writing the report is written on the re-run
    Path(outcome.report_path).unlink()
    third = run_campaign(campaign, tight, state_dir=tmp_path, pool=pool(), progress=lines.append)
    assert third.report_path == outcome.report_path and Path(third.report_path).read_text().startswith("# Review")


def test_campaign_refuses_an_endpoint_it_does_not_target(tmp_path: Path, smollm: EndpointSpec):
    with pytest.raises(ValueError, match="targets endpoint 'other'"):
        run_campaign(CampaignSpec(name="c", endpoint="other"), smollm, state_dir=tmp_path, pool=pool())


def test_workload_signature_follows_the_pool_shape():
    assert workload_signature(pool()) == workload_signature(pool())
    longer = pool().with_columns(pl.col("prompt_tokens") * 10)
    assert workload_signature(longer) != workload_signature(pool())


# ------------------------------------------------------------------------------------------ orphans
def test_stop_orphan_stops_only_the_recorded_process(tmp_path: Path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30  # until the child has exec'd (a busy host forks slowly)
        while b"time.sleep(60)" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        active = tmp_path / "active_engine.json"
        active.write_text(json.dumps({"pid": proc.pid, "argv": ["something", "else"]}))
        assert not stop_orphan(active, progress=lambda _: None)  # command line differs: pid reused
        assert proc.poll() is None and not active.exists()
        active.write_text(json.dumps({"pid": proc.pid, "argv": [a.decode() for a in argv if a]}))
        assert stop_orphan(active, progress=lambda _: None)
        assert proc.wait(timeout=10) != 0 and not active.exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


# ------------------------------------------------------------------------------------------ report
def test_review_report_shows_diff_curves_noise_repeats_correctness_and_command(tmp_path: Path, smollm: EndpointSpec):
    ref_sweeps = [sweep(1.0), sweep(1.0)]
    ref = BaselineRecord(
        engine_args=list(smollm.engine.args), sweeps=ref_sweeps, noise=noise_floor(ref_sweeps), wall_s=480
    )
    best_args = ["--max-num-seqs", "16", "--max-model-len", "2048", "--enforce-eager", "--enable-prefix-caching"]
    win_sweeps = [sweep(3.0, args=best_args), sweep(3.0, args=best_args)]
    correctness = CorrectnessReport(
        mode="lossless",
        passed=True,
        lossless_equivalent=True,
        float32=False,
        flag_for_review=False,
        reason="outputs kept",
        greedy_identical=8,
        greedy_total=8,
    )
    eid = "cand-abc"
    exp = ExperimentState(
        experiment_id=eid,
        round=1,
        proposal_ids=["p1"],
        title="batch more",
        baseline_args=ref.engine_args,
        engine_args=best_args,
        diff={"--max-num-seqs": "16"},
        verdict="better",
        confirmed=True,
        sweeps=win_sweeps,
        comparison=compare(ref.noise, win_sweeps),
        correctness=correctness,
        wall_s=300,
    )
    best = BaselineRecord(
        engine_args=best_args,
        sweeps=win_sweeps,
        noise=noise_floor(win_sweeps),
        source_experiment=eid,
        identity={"launch_command": ["python", "-m", "vllm.entrypoints.openai.api_server", "--max-num-seqs", "16"]},
        wall_s=420,  # its own 300 s as a candidate and 120 s of extra baseline sweeps
    )
    rnd = RoundRecord(round=1, baseline_args=ref.engine_args, experiment_ids=[eid], adopted=eid, diagnosis_s=90)
    state = CampaignState(
        campaign="support_smollm_default",
        campaign_id="c-1",
        endpoint="support_smollm",
        reference=ref,
        working=best,
        baselines=[ref, best],
        experiments={eid: exp},
        finished=True,
        end_reason="max rounds",
        open_questions=["why?"],
        rounds=[rnd],
        active_seconds=1200,
    )
    campaign = CampaignSpec(name="support_smollm_default", endpoint="support_smollm")
    path = write_report(state, smollm, campaign, tmp_path / "review")
    text = path.read_text()
    png = tmp_path / "review" / "load_curves.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Nothing has been deployed" in text
    assert "| `--max-num-seqs` | 2 | 16 |" in text and "`--enable-prefix-caching`" in text
    assert "x3" in text and "lossless (outputs kept: lossless, checked on logprobs)" in text
    assert "Noise floor" in text and "[1.0, 1.0]" in text and "[3.0, 3.0]" in text
    assert "greedy 8/8 identical" in text
    assert "## Cost and energy at capacity" in text and "Energy: no power telemetry (CPU host)." in text
    assert "| config | offered req/s | done req/s | queue |" in text  # the load curve, sustained or not
    assert "autoresearch campaign run support_smollm_default" in text
    # the reproduce command parses as printed and gives exactly the best configuration
    import shlex

    from autoresearch.cli import _apply_sets, build_parser

    line = next(l for l in text.splitlines() if l.startswith("autoresearch sweep "))
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert "{port}" not in text
    assert _apply_sets(smollm, args.set, args.unset).engine.args == best_args
    assert "- why?" in text
    # where the 20 active minutes went, stage by stage; what no stage counted is said as the rest
    times = text.split("## Where the time went")[1].split("##")[0]
    for row in (
        "| reference baseline (sweeps, soak, reference outputs) | 8.0 |",
        "| round 1: diagnosis | 1.5 |",
        "| round 1: batch more (better) | 5.0 |",
        "| round 1: the new baseline's extra sweeps | 2.0 |",
        "| other (proposals, recording, reports) | 3.5 |",
        "| **active in all** | **20.0** |",
    ):
        assert row in times, times
    from research.review import _time_section

    verified = state.model_copy(update={"production_check": {"seconds": 60, "rows": [{"label": "before"}]}})
    assert "| other (proposals, recording, reports, the production-shaped verification) | 3.5 |" in _time_section(
        verified
    )


def test_a_finished_campaign_is_kept_and_the_next_starts_from_the_confirmed_configuration(tmp_path: Path, monkeypatch):
    """`autoresearch campaign run` twice: the first run's folder is kept, the second starts from memory's
    last confirmed configuration (the deadline here is too short for a baseline: nothing launches)."""
    from autoresearch import workflows
    from specs import paths
    from memory_db import Conditions, ConfirmationRecord, ExperimentRecord, MemoryStore
    from research.state import CampaignState, StateStore

    monkeypatch.setenv("AUTORESEARCH_MODELS", str(paths.models_dir()))  # the real model cache
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))
    endpoint = load_definitions(definitions_dir()).endpoint("tiny_random")
    campaign = CampaignSpec(name="again", endpoint="tiny_random", deadline_minutes=0.01, proposer="rules")
    folder = workflows.campaign_dir(campaign)
    StateStore(folder, "again").save(
        CampaignState(
            campaign="again",
            endpoint="tiny_random",
            campaign_id="again-1",
            finished=True,
            end_reason="max rounds: 1 rounds done",
        )
    )
    confirmed = [*endpoint.engine.args, "--max-num-batched-tokens", "4096"]
    store = MemoryStore(paths.memory_db_path())
    win = ExperimentRecord(
        endpoint="tiny_random",
        campaign_id="again-1",
        conditions=Conditions(model="tiny", engine="vllm", engine_version="0.32.0", workload_signature="wl"),
        bottleneck="batch_limit",
        technique="raise_max_num_batched_tokens",
        change={"--max-num-batched-tokens": "4096"},
        verdict="better",
        capacity_ratio=1.6,
        noise_threshold=0.1,
    )
    store.record(win)
    store.record(
        ConfirmationRecord(
            experiment_id=win.experiment_id,
            endpoint="tiny_random",
            campaign_id="again-1",
            engine_args=confirmed,
            new_config_hash="cfg",
        )
    )
    lines: list[str] = []
    out = workflows.launch_campaign(campaign, endpoint, progress=lines.append)
    assert (tmp_path / "campaigns" / "again.again-1" / "again.state.json").exists()
    assert out.campaign_id != "again-1" and out.end_reason.startswith("deadline"), out
    assert any("research memory confirmed last" in line and "--max-num-batched-tokens 4096" in line for line in lines)
    again = StateStore(folder, "again").load()
    assert again is not None and again.campaign_id == out.campaign_id and again.finished


def test_a_call_window_pauses_before_an_experiment_whose_soak_would_not_fit(tmp_path, definitions):
    """A call's window (stop_after_s) must hold the experiment and its soak: the H200 run lost a
    candidate cut in its soak by the window's end. It pauses instead, and runs when the window holds both."""
    import time as _time
    from types import SimpleNamespace

    from research.campaign.budget import Budget, Limits, Paused
    from research.state import CampaignState, StateStore

    endpoint = definitions.endpoint("chat_azure_h200")
    soak_s = endpoint.soak.hold_s + endpoint.soak.overload_s + endpoint.soak.recovery_s
    assert soak_s > 0
    state = CampaignState(campaign="c", endpoint=endpoint.name, campaign_id="c-1")
    ctx = SimpleNamespace(
        state=state, store=StateStore(tmp_path, "c"), endpoint=endpoint, campaign=CampaignSpec(name="c", endpoint="e")
    )
    limits = Limits(deadline_s=10_000, gpu_hours=10, units=1)
    sweep_s = 150.0
    tight = Budget(ctx, limits, stop_after_s=sweep_s + soak_s / 2, call_started=_time.monotonic())
    with pytest.raises(Paused, match="with its soak"):
        tight.check(sweep_s)
    roomy = Budget(ctx, limits, stop_after_s=sweep_s + soak_s + 60, call_started=_time.monotonic())
    assert roomy.check(sweep_s) is None


def test_the_review_writes_an_effect_whose_interval_or_mde_is_unbounded(tmp_path: Path, smollm: EndpointSpec):
    """An effect with an unbounded interval side or no MDE (a fit with no spread: CI's resumed campaign)
    is written as such; it once raised inside write_report and the review was lost."""
    ref_sweeps = [sweep(1.0), sweep(1.0)]
    ref = BaselineRecord(engine_args=list(smollm.engine.args), sweeps=ref_sweeps, noise=noise_floor(ref_sweeps))
    args = ["--max-num-seqs", "8"]
    won = [sweep(3.0, args=args)]
    comparison = compare(ref.noise, won).model_copy(
        update={"effect": 1.354, "effect_low": 0.979, "effect_high": None, "mde": None}
    )
    exp = ExperimentState(
        experiment_id="e1", round=1, proposal_ids=["p1"], title="batch more", baseline_args=ref.engine_args,
        engine_args=args, diff={"--max-num-seqs": "8"}, verdict="better", confirmed=True, sweeps=won,
        comparison=comparison,
    )  # fmt: skip
    adopted = BaselineRecord(engine_args=args, sweeps=won, noise=noise_floor(won), source_experiment="e1")
    state = CampaignState(
        campaign="c", campaign_id="c-1", endpoint="support_smollm", reference=ref, working=adopted,
        baselines=[ref, adopted], experiments={"e1": exp}, finished=True, end_reason="max rounds",
    )  # fmt: skip
    text = write_report(state, smollm, CampaignSpec(name="c", endpoint="support_smollm"), tmp_path / "r").read_text()
    assert "**+135.4%** (95% interval +97.9% to unbounded)" in text and "none (the fit's spread" in text
