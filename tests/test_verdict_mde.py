"""One MDE, the verdict's (research.verdict_mde): the review, the console summary and the research memory
headline the MDEs of the verdicts a campaign made, per verdict and their median with its range; a floor's
MDE is an input, shown as the floor's below them. Narrow floors under wide verdicts are the case that
matters: an ITL-limited floor's MDE describes no verdict judged on it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from autoresearch.cli import format_outcome
from helpers_memory import T0, experiment, memory_store
from loadgen.compare import compare
from loadgen.noise import noise_floor
from memory_db import CampaignRecord
from memory_db.export import export_endpoint_markdown
from memory_db.records import AAEvidenceRecord
from research.campaign import run_campaign
from research.review import write_report
from research.state import BaselineRecord, CampaignState, ExperimentState, StateStore
from research.verdict_mde import verdict_mdes
from specs.config import CampaignSpec
from test_campaign import pool, smollm, sweep  # noqa: F401 - smollm is a fixture
from test_campaign_deadline import _compare
from test_gpu_cap import Recorder, _endpoint

FLOOR_MDE = 0.04  # narrow floors ...
WIDE = {"--max-num-seqs 16": 0.50, "--max-num-seqs 8": 0.20, "--max-num-seqs 4": 0.30}  # ... wide verdicts


def _narrow(sweeps):
    return noise_floor(sweeps).model_copy(update={"mde": FLOOR_MDE, "threshold": FLOOR_MDE})


def _state(verdicts: dict[str, tuple[str, float | None]]) -> CampaignState:
    """A finished campaign: a reference floor with a 4% MDE, and one experiment per ``verdicts`` entry
    (id -> (verdict, its MDE)), each judged on that floor."""
    ref_sweeps = [sweep(1.0), sweep(1.0)]
    ref = BaselineRecord(engine_args=["--max-num-seqs", "2"], sweeps=ref_sweeps, noise=_narrow(ref_sweeps))
    experiments = {}
    for i, (eid, (verdict, mde)) in enumerate(verdicts.items()):
        args = ["--max-num-seqs", str(4 + i)]
        won = [sweep(1.0, args=args)]
        comparison = compare(ref.noise, won).model_copy(
            update={
                "effect": 0.01 * i,
                "effect_low": -0.3,
                "effect_high": 0.3,
                "mde": mde,
                "decided_by": "SLA crossing",
            }
        )
        experiments[eid] = ExperimentState(
            experiment_id=eid, round=1, proposal_ids=[f"p{i}"], title=f"seqs {4 + i}", baseline_args=ref.engine_args,
            engine_args=args, diff={"--max-num-seqs": str(4 + i)}, verdict=verdict, sweeps=won,
            comparison=comparison, started_at=float(i),
        )  # fmt: skip
    return CampaignState(
        campaign="c", campaign_id="c-1", endpoint="support_smollm", reference=ref, working=ref, baselines=[ref],
        experiments=experiments, finished=True, end_reason="max rounds",
    )  # fmt: skip


def test_the_review_headlines_the_verdicts_median_mde_not_the_narrow_floors(tmp_path: Path, smollm):  # noqa: F811
    state = _state({"e1": ("same", 0.30), "e2": ("worse", 0.50), "e3": ("same", 0.20), "e4": ("invalid", 0.01)})
    mdes = verdict_mdes(state, 0.10)
    assert [v.experiment_id for v in mdes.verdicts] == ["e1", "e2", "e3"]  # an invalid run judged nothing
    assert (mdes.median, mdes.low, mdes.high, mdes.reached) == (0.30, 0.20, 0.50, False)

    campaign = CampaignSpec(name="c", endpoint="support_smollm", target_mde=0.10)
    text = write_report(state, smollm, campaign, tmp_path / "r").read_text()
    summary = text.split("## Summary")[1].split("\n## ")[0]
    assert (
        "| minimum detectable effect (the verdicts') | **median 30.0% (range 20.0%-50.0%, 3 verdict(s))**; "
        "target 10%: NOT reached on this host (median 30.0%); no prior was tuned to close the gap |"
    ) in summary
    assert "4.0%" not in summary  # the floor's figure is no headline
    section = text.split("## Detectable effects (the verdicts')")[1].split("\n## ")[0]
    for eid, verdict, mde in (("e1", "same", "30.0%"), ("e2", "worse", "50.0%"), ("e3", "same", "20.0%")):
        assert f"| `{eid}` | 1 |" in section and f"| {verdict} | SLA crossing |" in section and f"| {mde} |" in section
    assert "`e4`" not in section
    assert "This host cannot see changes as small as the campaign's 10% target" in section
    # the floor's MDE is still there, named as the floor's, an input, and below the verdicts' figure
    floor_at = text.index("## Noise floor (an input to the verdicts)")
    assert text.index("## Detectable effects (the verdicts')") < floor_at
    assert "the floor's MDE 4.0% (an input to the verdicts, not a verdict's MDE" in text[floor_at:]


def test_a_campaign_without_verdicts_says_its_mde_is_not_measured(tmp_path: Path, smollm):  # noqa: F811
    state = _state({"e1": ("invalid", None)})
    text = write_report(state, smollm, CampaignSpec(name="c", endpoint="support_smollm", target_mde=0.10), tmp_path)
    said = text.read_text()
    assert "**not measured: no verdict was made**; target 10%: not measured (no verdict stated an MDE)" in said
    unbounded = verdict_mdes(_state({"e1": ("better", None), "e2": ("same", 0.12)}), 0.15)
    assert unbounded.headline() == "median 12.0% (range 12.0%-12.0%, 1 verdict(s); 1 stated none)"
    assert unbounded.target_line() == "target 15%: reached (median 12.0%)"


def test_the_memory_reports_each_verdicts_mde_and_the_campaign_median(tmp_path: Path):
    """v_verdict_mde per verdict, v_campaign_mde per campaign (median, min-max), and v_endpoint_noise with
    the verdicts' figures before the floors' pooled noise, on a real DuckDB file."""
    store = memory_store(tmp_path)
    rows = [("c1", "same", 0.30), ("c1", "worse", 0.50), ("c1", "better", 0.20), ("c1", "invalid", 0.01)]
    rows += [("c2", "same", 0.12), ("c2", "same", None)]
    for i, (campaign, verdict, mde) in enumerate(rows):
        store.record(
            experiment(
                campaign_id=campaign, verdict=verdict, mde=mde, change={"--max-num-seqs": str(i)},
                created_at=T0 + timedelta(minutes=i),
            )
        )  # fmt: skip
    store.record(
        AAEvidenceRecord(
            endpoint="chat", campaign_id="c1", source="reference", config_hash="cfg", protocol="p",
            estimator="service_rate", sweeps=2, df=4, sum_sq=4 * 0.02**2, created_at=T0,
        )
    )  # fmt: skip
    per_verdict = store.query("SELECT campaign_id, verdict, mde FROM v_verdict_mde")
    assert per_verdict["verdict"].to_list() == ["same", "worse", "better", "same", "same"]  # not the invalid run
    campaigns = store.query("SELECT * FROM v_campaign_mde ORDER BY campaign_id").to_dicts()
    c1, c2 = campaigns
    assert (c1["verdicts"], c1["verdicts_with_mde"], c1["min_mde"], c1["max_mde"]) == (3, 3, 0.20, 0.50)
    assert c1["median_mde"] == pytest.approx(0.30) and c2["median_mde"] == pytest.approx(0.12)
    assert (c2["verdicts"], c2["verdicts_with_mde"]) == (2, 1)
    noise = store.query("SELECT * FROM v_endpoint_noise").to_dicts()[0]
    assert noise["verdicts"] == 4 and noise["verdict_mde_median"] == pytest.approx(0.25)
    assert (noise["verdict_mde_min"], noise["verdict_mde_max"]) == (0.12, 0.50)
    assert noise["latest_campaign_id"] == "c2" and noise["latest_campaign_median_mde"] == pytest.approx(0.12)
    assert noise["between_run_sd"] == pytest.approx(0.02)  # the floors' input, kept beside
    columns = list(noise)
    assert columns.index("verdict_mde_median") < columns.index("between_run_sd")
    assert store.query("SELECT worst_mde FROM v_endpoint_mde")["worst_mde"].to_list() == [0.50]
    store.record(CampaignRecord(campaign_id="c1", campaign="tune", endpoint="chat", started_at=T0, status="finished"))
    page = export_endpoint_markdown(store, "chat")  # the memory's markdown page says the same
    campaigns = page.split("## Campaigns")[1].split("\n## ")[0]
    assert "| verdicts' median MDE | MDE min | MDE max |" in campaigns and "| 0.300 | 0.200 | 0.500 |" in campaigns
    experiments = page.split("## Experiments")[1].split("\n## ")[0]
    assert "| worse | 1.200 | 0.500 | 0.050 |" in experiments and "| invalid | 1.200 |  | 0.050 |" in experiments


def test_a_campaign_with_narrow_floors_and_wide_verdicts_headlines_the_wide_verdicts(tmp_path: Path):
    """The whole path: a campaign run (stand-in engines, stub sweeps) whose floors read 4% and whose
    verdicts read 20-50%; the outcome, the console summary, the review and the memory all say the verdicts'."""

    def wide(noise, sweeps, *, final=True):
        change = " ".join(sweeps[0].engine_args[:2])
        return _compare(noise, sweeps, final=final).model_copy(update={"mde": WIDE[change]})

    def propose(endpoint, diagnosis, state, n, skip):
        from test_gpu_cap import _propose

        return [p for p in _propose(endpoint, diagnosis, state, 4, skip) if p.title in WIDE][:3]

    spec = CampaignSpec(
        name="wide", endpoint="tiny_random", repeats=1, extra_repeats=0, max_rounds=1, subagents=3,
        proposer="rules", deadline_minutes=30, gpu_hours=5, target_mde=0.10,
    )  # fmt: skip
    memory = memory_store(tmp_path)
    outcome = run_campaign(
        spec, _endpoint(tmp_path), state_dir=tmp_path / "state", pool=pool(), sweep_fn=Recorder(),
        compare_fn=wide, noise_fn=_narrow, diagnose_fn=lambda *a: {"bottlenecks": []}, propose_fn=propose,
        progress=lambda line: None, memory=memory,
    )  # fmt: skip
    state = StateStore(tmp_path / "state", "wide").load()
    assert state.reference.noise.mde == FLOOR_MDE
    made = outcome.verdict_mde
    assert sorted(v.mde for v in made.verdicts) == [0.20, 0.30, 0.50], made
    assert (made.median, made.low, made.high, made.reached) == (0.30, 0.20, 0.50, False)
    console = format_outcome(outcome)
    assert "detectable effect   median 30.0% (range 20.0%-50.0%, 3 verdict(s)); target 10%: NOT reached" in console
    assert "4.0%" not in console
    review = Path(outcome.report_path).read_text()
    assert "**median 30.0% (range 20.0%-50.0%, 3 verdict(s))**" in review.split("## Summary")[1].split("\n## ")[0]
    row = memory.query("SELECT * FROM v_campaign_mde").to_dicts()[0]
    assert row["campaign_id"] == outcome.campaign_id and row["median_mde"] == pytest.approx(0.30)
    assert (row["min_mde"], row["max_mde"]) == (0.20, 0.50)
