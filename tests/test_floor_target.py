"""The sequential rule applied to a floor (CampaignSpec.floor_target_mde): a baseline whose minimum
detectable effect is over the campaign's target gets one more sweep at a time, up to floor_max_sweeps
and as the budget allows; the reference and every adopted baseline alike. Stand-in engine processes and
stub sweeps (test_gpu_cap); the floor's MDE is set per sweep count so that the rule, not the noise, is
what is tested (the MDE itself: test_verdict_power, test_service_rate_verdict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.noise import noise_floor
from research.campaign import run_campaign
from research.campaign.budget import Budget
from research.state import StateStore
from specs.config import CampaignSpec
from test_campaign import pool
from test_campaign_deadline import _compare, _propose
from test_gpu_cap import Recorder, _endpoint


def _run(tmp_path: Path, mdes: dict[int, float], best: dict[int, float] | None = None, **campaign):
    spec = CampaignSpec(
        name="ft",
        endpoint="tiny_random",
        repeats=1,
        extra_repeats=1,
        max_rounds=1,
        subagents=1,
        proposer="rules",
        deadline_minutes=30,
        gpu_hours=5,
        **campaign,
    )
    lines: list[str] = []

    def noise(sweeps):
        k = len(sweeps)
        return noise_floor(sweeps).model_copy(update={"mde": mdes[k], "mde_next_best": (best or {}).get(k)})

    tmp_path.mkdir(parents=True, exist_ok=True)
    folder = tmp_path / "state"
    run_campaign(
        spec,
        _endpoint(tmp_path),
        state_dir=folder,
        pool=pool(),
        sweep_fn=Recorder(),
        compare_fn=_compare,
        noise_fn=noise,
        diagnose_fn=lambda *a: {"bottlenecks": []},
        propose_fn=lambda *a: _propose(*a)[:1],  # one candidate: --max-num-seqs 16, twice the capacity
        progress=lines.append,
    )
    return StateStore(folder, "ft").load(), lines


def test_a_floor_over_its_target_gets_sweeps_until_it_is_under(tmp_path: Path):
    state_dir = tmp_path / "state"
    state, lines = _run(tmp_path, {2: 0.14, 3: 0.09}, floor_target_mde=0.10)
    assert len(state.reference.sweeps) == 3 and state.reference.noise.mde == pytest.approx(0.09)
    # the adopted candidate: its own sweep, the re-measure to K = 2, then one more for the target
    assert state.working is not state.reference and len(state.working.sweeps) == 3
    asked = [line for line in lines if "one more sweep" in line]
    said = "MDE 14.0% over the 10% floor target after 2 sweeps"
    assert len(asked) == 2 and all(said in line for line in asked), asked
    # the review says why each floor has its sweeps
    assert state.reference.notes[0] == "MDE 14.0% over the 10% floor target after 2 sweeps: one more sweep"
    review = next(state_dir.glob("*.review/review.md")).read_text()
    assert "  - floor: MDE 9.0% over 3 sweeps" in review


def test_without_a_target_or_under_it_a_floor_keeps_its_repeats(tmp_path: Path):
    state, _ = _run(tmp_path / "none", {2: 0.14})
    assert len(state.reference.sweeps) == 2 and len(state.working.sweeps) == 2
    state, _ = _run(tmp_path / "under", {2: 0.08}, floor_target_mde=0.10)
    assert len(state.reference.sweeps) == 2 and len(state.working.sweeps) == 2


def test_a_floor_stops_at_its_most_sweeps_and_says_it_missed(tmp_path: Path):
    state, lines = _run(tmp_path, {2: 0.14, 3: 0.12}, floor_target_mde=0.10, floor_max_sweeps=3)
    assert len(state.reference.sweeps) == 3 and state.reference.noise.mde == pytest.approx(0.12)
    assert any("MDE 12.0% over the 10% floor target after 3 sweeps (the most)" in line for line in lines), lines


def test_a_floor_takes_no_sweep_the_budget_refuses(tmp_path: Path, monkeypatch):
    real_check = Budget.check

    def check(self, estimate_s, running_s=0.0):
        if self.ctx.state.reference is None and estimate_s and self.ctx.state.sweep_s:
            return "deadline: stand-in refusal"  # the floor's extra sweep, after the baseline's own
        return real_check(self, estimate_s, running_s)

    monkeypatch.setattr(Budget, "check", check)
    state, lines = _run(tmp_path, {2: 0.14, 3: 0.09}, floor_target_mde=0.10)
    assert len(state.reference.sweeps) == 2
    assert any("no sweep more fits (deadline: stand-in refusal)" in line for line in lines), lines


def test_a_floor_takes_no_sweep_that_cannot_bring_it_under_its_target(tmp_path: Path):
    """One more sweep adds a df and, at best, no spread (NoiseFloor.mde_next_best): a floor that even such a
    sweep would leave over the target gives that time to the experiments, and says so; one within reach
    takes it."""
    state, lines = _run(tmp_path / "futile", {2: 0.14, 3: 0.12}, {2: 0.11}, floor_target_mde=0.10)
    assert len(state.reference.sweeps) == 2 and len(state.working.sweeps) == 2
    said = "MDE 14.0% over the 10% floor target after 2 sweeps; one more could reach 11.0% at best"
    assert state.reference.notes and state.reference.notes[0].startswith(said), state.reference.notes
    assert not any("one more sweep" in line for line in lines), lines
    state, _ = _run(tmp_path / "within", {2: 0.14, 3: 0.09}, {2: 0.095}, floor_target_mde=0.10)
    assert len(state.reference.sweeps) == 3 and state.reference.noise.mde == pytest.approx(0.09)
