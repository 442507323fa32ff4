"""Knee, capacity, noise floor, verdicts, tables and plots from sweep results (pure data)."""

from loadgen.compare import compare
from loadgen.noise import noise_floor
from loadgen.plots import load_curve_png
from loadgen.report import render_text, step_table, step_table_markdown
from loadgen.results import LatencySummary, StepResult, SweepResult
from loadgen.sweep import _next_auto_rate, capacity, knee_rate, refine_rate
from autoresearch.config import SLASpec

SLA = SLASpec(ttft_ms=500, itl_ms=100)


def step(rate, ttft_p95, *, tput=None, ok=True, valid=True, err=0.0):
    lat = LatencySummary(p50=ttft_p95 / 2, p90=ttft_p95 * 0.9, p95=ttft_p95, p99=ttft_p95 * 1.2, mean=ttft_p95 / 2)
    return StepResult(target_rate=rate, achieved_rate=rate, throughput_rps=tput if tput is not None else rate,
                      duration_s=5, requests=int(rate * 5), errors=0, error_rate=err, ttft_ms=lat,
                      itl_ms=LatencySummary(p50=10, p95=20, p99=30), e2e_ms=lat, send_lag_ms=LatencySummary(p99=0.1),
                      within_sla=ok and valid, validity="valid" if valid else "invalid",
                      invalid_reason=None if valid else "engine crashed: x")


def sweep(cap_steps, label=None, valid=True):
    steps = cap_steps
    cap, bounded = capacity(steps)
    return SweepResult(endpoint="e", engine_args=[], launch_config_hash="h", started_at=0, steps=steps,
                       knee_rate=knee_rate(steps), capacity_rps=cap, capacity_bounded=bounded, label=label,
                       validity="valid" if valid else "invalid", invalid_reason=None if valid else "boom",
                       sla=SLA.model_dump())


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
    assert _next_auto_rate([(10, True)], 2.0, 0.15, 0.05) == 20
    assert _next_auto_rate([(10, True), (20, False)], 2.0, 0.15, 0.05) == 14
    assert _next_auto_rate([(10, False)], 2.0, 0.15, 0.05) == 5
    assert _next_auto_rate([(10, True), (11, False)], 2.0, 0.15, 0.05) is None


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
