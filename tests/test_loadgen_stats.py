"""Knee, capacity, noise floor, verdicts, tables and plots from sweep results (pure data)."""

import numpy as np
import pytest

from loadgen.compare import compare
from loadgen.noise import noise_floor
from loadgen.plots import load_curve_png
from loadgen.report import render_text, step_table, step_table_markdown
from loadgen.results import LatencySummary, StepResult, SweepResult
from loadgen.ladder import capacity, extend_down, interpolated_capacity, knee_rate, next_auto_rate, refine_rate
from loadgen.stats import judged_percentile_ms, sla_judgement
from specs.config import SLASpec

SLA = SLASpec(ttft_ms=500, itl_ms=100)


def step(rate, ttft_p95, *, tput=None, ok=True, valid=True, err=0.0):
    lat = LatencySummary(p50=ttft_p95 / 2, p90=ttft_p95 * 0.9, p95=ttft_p95, p99=ttft_p95 * 1.2, mean=ttft_p95 / 2)
    return StepResult(
        target_rate=rate,
        achieved_rate=rate,
        throughput_rps=tput if tput is not None else rate,
        duration_s=5,
        requests=int(rate * 5),
        errors=0,
        error_rate=err,
        ttft_ms=lat,
        itl_ms=LatencySummary(p50=10, p95=20, p99=30),
        e2e_ms=lat,
        send_lag_ms=LatencySummary(p99=0.1),
        within_sla=ok and valid,
        validity="valid" if valid else "invalid",
        invalid_reason=None if valid else "engine crashed: x",
    )


def sweep(cap_steps, label=None, valid=True):
    steps = cap_steps
    cap, bounded = capacity(steps)
    return SweepResult(
        endpoint="e",
        engine_args=[],
        launch_config_hash="h",
        started_at=0,
        steps=steps,
        knee_rate=knee_rate(steps),
        capacity_rps=cap,
        capacity_bounded=bounded,
        label=label,
        validity="valid" if valid else "invalid",
        invalid_reason=None if valid else "boom",
        sla=SLA.model_dump(),
    )


def curve(cap):
    """A curve whose SLA breaks just above ``cap``."""
    return [step(cap / 4, 50), step(cap / 2, 60), step(cap, 200), step(cap * 2, 5000, tput=cap * 1.1, ok=False)]


def test_knee_and_capacity():
    steps = curve(40)
    assert capacity(steps) == (40, True)
    assert knee_rate(steps) == 20  # 40 req/s more than doubled TTFT p95
    # A passing rate above the first failure does not count (noise must not inflate capacity).
    assert capacity(steps + [step(100, 10)]) == (40, True)
    assert capacity([step(5, 10), step(10, 20)]) == (10, False)
    assert capacity([step(5, 900, ok=False)]) == (0.0, True)
    assert capacity([step(5, 10), step(10, 20, valid=False)]) == (5, False)


def test_auto_ladder_doubles_then_bisects():
    assert next_auto_rate([(10, True)], 2.0, 0.15, 0.05) == 20
    assert next_auto_rate([(10, True), (20, False)], 2.0, 0.15, 0.05) == 14
    assert next_auto_rate([(10, False)], 2.0, 0.15, 0.05) == 5
    assert next_auto_rate([(10, True), (11, False)], 2.0, 0.15, 0.05) is None


def test_explicit_ladder_refinement_bisects_the_bracket_around_capacity():
    assert refine_rate([(1.0, True), (1.4, True), (2.0, False), (2.8, False)]) == 1.7
    assert refine_rate([(1.0, True), (1.4, True), (2.0, False), (1.7, False)]) == 1.5
    # the bracket is the highest pass *below* the lowest failure, as in capacity()
    assert refine_rate([(1.0, True), (1.4, False), (2.0, True)]) == 1.2
    assert refine_rate([(1.0, True), (2.0, True)]) is None  # never failed: nothing to refine
    assert refine_rate([(1.0, False)]) is None  # failed at the bottom of the ladder
    assert refine_rate([(1.0, True), (1.04, False)]) is None  # already finer than 5%


def test_noise_floor_and_verdicts():
    base = [sweep(curve(c), f"b{i}") for i, c in enumerate([40, 40, 44])]
    floor = noise_floor(base)
    assert floor.repeats == 3 and floor.capacities == [40, 40, 44]
    assert floor.threshold >= floor.capacity_rel_spread >= 0.09
    assert floor.per_rate["10"]["n"] == 2 and floor.per_rate["11"]["n"] == 1  # per tested rate
    assert compare(floor, [sweep(curve(80)), sweep(curve(88))]).verdict == "better"
    assert compare(floor, [sweep(curve(10))]).verdict == "worse"
    same = compare(floor, [sweep(curve(42))])
    assert same.verdict == "same" and "noise" in same.evidence
    # A big mean gain that one repeat does not reproduce is not "better".
    assert compare(floor, [sweep(curve(100)), sweep(curve(40))]).verdict == "same"
    bad = compare(floor, [sweep(curve(80), valid=False)])
    assert bad.verdict == "invalid" and "boom" in bad.evidence
    assert compare(noise_floor(base + [sweep(curve(40), valid=False)]), [sweep(curve(80))]).verdict == "invalid"


def test_tables_and_plot(tmp_path):
    base, cand = sweep(curve(40), "baseline"), sweep(curve(80), "candidate")
    rows = step_table(base)
    assert [r["rate"] for r in rows] == [10, 20, 40, 80] and rows[-1]["within_sla"] is False
    text = render_text(base)
    assert "capacity 40.00" in text and "knee 20.00" in text
    assert step_table_markdown(base).startswith("| rate/s")
    path = load_curve_png([base, cand], SLA, tmp_path / "curve.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_interpolated_capacity_lies_strictly_inside_the_bracket():
    steps = curve(40)  # TTFT p95: 50, 60, 200 ms pass (limit 500); 5000 ms at 80 req/s fails
    cap, method = interpolated_capacity(steps, SLA)
    assert method == "interpolated" and 40 < cap < 80
    assert cap == pytest.approx(40 + (1 - 200 / 500) / (5000 / 500 - 200 / 500) * 40, rel=1e-3)
    # Unresolved at the failing rate (e.g. cut requests): the crossing is the passing rate.
    failing = steps[-1].model_copy(update={"sla_ratios": {"ttft": None, "errors": 0.0}})
    assert interpolated_capacity(steps[:-1] + [failing], SLA) == (40, "interpolated")
    assert interpolated_capacity([step(5, 10), step(10, 20)], SLA) == (10, "tested")  # never failed: lower bound
    assert interpolated_capacity([step(5, 900, ok=False)], SLA) == (0.0, "none_held")


def test_downward_extension_halves_to_the_floor_then_stops():
    assert extend_down([(0.7, False)], 0.7 / 16) == 0.35
    tried = [(0.7, False), (0.35, False), (0.18, False), (0.09, False)]
    assert extend_down(tried, 0.7 / 16) == 0.045
    assert extend_down(tried + [(0.045, False)], 0.7 / 16) == pytest.approx(0.7 / 16)  # the floor itself, last
    assert extend_down(tried + [(0.045, False), (0.7 / 16, False)], 0.7 / 16) is None
    assert next_auto_rate([(1.0, False)], 2.0, 0.15, 0.8) == 0.8  # the floor, not below it
    assert next_auto_rate([(1.0, False), (0.8, False)], 2.0, 0.15, 0.8) is None


def test_cut_requests_are_judged_worst_case():
    assert judged_percentile_ms([0.1, 0.2, 0.3], 0, 50) == pytest.approx(200)
    assert judged_percentile_ms([0.1] * 39, 1, 95) == pytest.approx(100)  # the 95th rank is still a real value
    assert judged_percentile_ms([0.1] * 19, 1, 95) == float("inf")  # linear rule: it leans on the cut one
    assert judged_percentile_ms([0.1] * 18, 2, 95) == float("inf")  # it falls among the cut requests
    arrays = {"ttft": np.array([0.1] * 18), "itl": np.array([]), "e2e": np.array([0.2] * 18)}
    sla = SLASpec(ttft_ms=500, e2e_ms=1000)
    violations, ratios = sla_judgement(arrays, 0.0, sla, 20, {"ttft": 0, "e2e": 2})
    assert ratios["ttft"] == pytest.approx(0.2) and ratios["e2e"] is None
    assert violations == ["e2e p95 beyond the drain deadline (2 of 20 requests cut unfinished)"]


def test_compare_against_a_side_below_its_floor_is_finite():
    below = sweep([step(0.7, 900, ok=False), step(0.35, 800, ok=False)]).model_copy(
        update={"capacity_rps": 0.0, "capacity_below_rps": 0.35}
    )
    floor = noise_floor([below, below, below])
    assert floor.capacity_mean == 0 and floor.capacity_below == [0.35] * 3
    win = compare(floor, [sweep(curve(1.0)), sweep(curve(1.2))])
    assert win.verdict == "better" and win.ratio_bound == "lower" and win.capacity_ratio == pytest.approx(1.1 / 0.35)
    assert "inf" not in win.evidence and "+214.3%" in win.evidence
    near = compare(floor, [sweep(curve(0.36))])
    assert near.verdict == "same" and near.capacity_ratio < 1.1
    both = compare(floor, [below])
    assert both.verdict == "same" and both.capacity_ratio is None and "inf" not in both.evidence
    lost = compare(noise_floor([sweep(curve(40))] * 3), [below])
    assert lost.verdict == "worse" and lost.ratio_bound == "upper" and lost.capacity_ratio == pytest.approx(0.35 / 40)
    legacy = compare(noise_floor([sweep([step(5, 900, ok=False)])]), [sweep(curve(40))])  # no bound recorded
    assert legacy.verdict == "same" and legacy.capacity_ratio is None and "inf" not in legacy.evidence


def test_sweep_settings_are_strict():
    from specs.config import SweepSpec

    spec = SweepSpec(min_rate=0.05, drain_s=5, warmup_max_tokens=8, warmup_timeout_s=3)
    assert spec.drain_s == 5
    with pytest.raises(ValueError):
        SweepSpec(drain_cap_s=5)
    with pytest.raises(ValueError):
        SweepSpec(min_rate=0)
