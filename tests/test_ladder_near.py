"""A candidate's sweep begins near its baseline's capacity (loadgen.ladder.rungs_from, research.harness
.ladder_near): the rungs far below it hold the SLA on both sides and cost the longest steps. The first
sweep of a campaign, with nothing to be near, walks the whole ladder."""

from __future__ import annotations

from pathlib import Path

from loadgen.ladder import START_SHARE, rungs_from
from loadgen.results import NoiseFloor
from research.campaign import default_compare
from research.harness import ladder_near, run_candidate
from test_campaign import pool, sweep
from test_gpu_cap import _endpoint

LADDER = [0.7, 1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0]


def _floor(capacity: float, fitted: float | None = None) -> NoiseFloor:
    return NoiseFloor(
        repeats=2,
        capacities=[capacity, capacity],
        capacity_mean=capacity,
        capacity_std=0.0,
        capacity_rel_spread=0.0,
        capacity_fit_rps=fitted,
    )


def test_the_ladder_starts_at_the_highest_rung_below_a_share_of_the_capacity():
    assert rungs_from(LADDER, 2.48) == [1.4, 2.0, 2.8, 4.0, 5.6, 8.0]  # 0.75 x 2.48 = 1.86
    assert rungs_from(LADDER, 0.79) == LADDER  # the CPU default's reference: no rung is that low
    assert rungs_from(LADDER, None) == LADDER and rungs_from(LADDER, 0.0) == LADDER
    assert rungs_from(LADDER, 100.0) == [8.0]  # the top rung: the sweep adds rates that queue above it
    for capacity in (1.2, 1.7, 2.5, 3.3, 6.0):
        kept = rungs_from(LADDER, capacity)
        assert kept == LADDER[LADDER.index(kept[0]) :]
        assert kept[0] <= START_SHARE * capacity < kept[1]  # the highest such rung: no lower one is kept


def test_a_candidate_is_swept_from_near_its_baselines_fitted_capacity_and_a_first_baseline_from_the_bottom(
    tmp_path: Path,
):
    endpoint = _endpoint(tmp_path)
    endpoint = endpoint.model_copy(update={"sweep": endpoint.sweep.model_copy(update={"rates": LADDER})})
    assert ladder_near(endpoint, None) is endpoint
    assert ladder_near(endpoint, _floor(0.6)).sweep.rates == LADDER
    assert ladder_near(endpoint, _floor(2.8, fitted=2.48)).sweep.rates[0] == 1.4  # the fit, not the rung
    seen: list[list[float]] = []

    def recording(engine, pool_, spec):
        seen.append(list(spec.sweep.rates))
        return sweep(2.0, rates=tuple(spec.sweep.rates))

    for floor in (_floor(2.8, fitted=2.48), None):
        result = run_candidate(
            endpoint,
            ["--max-num-seqs", "4"],
            pool(),
            floor,
            1,
            workdir=tmp_path / "runs",
            sweep_fn=recording,
            compare_fn=default_compare,
            extra_repeats=0,
            progress=lambda line: None,
        )
        assert result.verdict != "invalid" or floor is None, result.invalid_reason
    assert seen[0][0] == 1.4 and seen[1] == LADDER, seen
    assert endpoint.sweep.rates == LADDER  # the endpoint's own spec is untouched
