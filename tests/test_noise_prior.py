"""The endpoint's between-run noise (loadgen.noise_prior, research.campaign.steps.endpoint_prior): every
repeated configuration is A/A evidence, read from all its repeats, pooled into the prior of the endpoint's
later floors through the research memory (a real DuckDB file), and only under the same protocol."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from loadgen.noise import noise_floor
from loadgen.noise_prior import PRIOR_DF, PRIOR_SD, NoisePrior, log_evidence, repeat_evidence, sweeps_evidence
from loadgen.results import AAEvidence, SweepResult
from memory_db import MemoryStore
from research.campaign.steps import campaign_evidence, endpoint_prior, evidence_records, protocol_key
from research.state import BaselineRecord, CampaignState, ExperimentState

from test_judge import _sweeps
from test_queue_rate import BASE, OUTPUTS, PROMPTS, SLA
from loadgen import simengine


@pytest.fixture(scope="module")
def rates() -> list[float]:
    served = simengine.virtual_step(BASE, 90.0, 60.0, PROMPTS, OUTPUTS, SLA, seed=1, run_seed=1).throughput_rps
    return [served * f for f in (0.6, 0.8, 1.0, 1.2, 1.4, 1.6)]


def test_two_repeats_give_their_squared_difference_and_more_repeats_an_unbiased_variance_with_k_minus_1_df():
    ev = log_evidence([math.log(1.0), math.log(1.1)], "crossing")
    assert ev.df == 1 and ev.sum_sq == pytest.approx(math.log(1.1) ** 2)  # what one disjoint pair says
    rng = np.random.default_rng(7)
    run_sd = 0.04  # each run's log estimate: the variance of a paired difference is 2 x 0.04^2
    for k in (2, 3, 5):
        evs = [log_evidence(list(rng.normal(0.0, run_sd, k)), "service_rate") for _ in range(4000)]
        assert {e.df for e in evs} == {k - 1}
        mean_var = np.mean([e.sum_sq / e.df for e in evs])
        assert mean_var == pytest.approx(2 * run_sd**2, rel=0.06), k
    # four repeats are three degrees of freedom (disjoint pairs would give two)
    assert log_evidence([0.0, 0.02, -0.01, 0.03], "crossing").df == 3


def test_simulated_repeats_give_evidence_for_both_estimators_and_the_floor_keeps_its_own(rates):
    sweeps = _sweeps(BASE, rates, 5, "A", "service_rate")
    evidence = sweeps_evidence(sweeps)
    assert {e.estimator for e in evidence} == {"crossing", "service_rate"} and all(e.df == 1 for e in evidence)
    floor = noise_floor(sweeps)
    own = {e.estimator: e for e in floor.aa_evidence}
    # an experiment's evidence and a floor of the same sweeps name the same class, for both estimators
    assert floor.limiting is not None and {e.limiting for e in evidence + floor.aa_evidence} == {floor.limiting}
    assert own["service_rate"].sum_sq == pytest.approx(
        next(e for e in evidence if e.estimator == "service_rate").sum_sq
    )
    assert floor.service_between_df == PRIOR_DF + 1 and floor.prior_source.startswith("default sd 3%")
    steps = [s.steps for s in sweeps]
    assert repeat_evidence(steps[:1], "crossing").df == 0  # one run says nothing about between-run noise


def test_pooled_history_tightens_the_floor_when_it_agrees_and_widens_it_when_it_is_noisier(rates):
    """The floor's MDE falls as the endpoint's earlier floors add degrees of freedom at the noise they
    measured, and rises when they measured more noise than the default: pooling is not a discount."""
    sweeps = _sweeps(BASE, rates, 11, "A", "service_rate")
    default = noise_floor(sweeps)

    def history(sd: float, floors: int) -> NoisePrior:
        evs = [AAEvidence(estimator=e, sum_sq=3 * sd**2, df=3, sweeps=4) for e in ("crossing", "service_rate")]
        return NoisePrior.from_history(evs * floors, floors)

    calm = noise_floor(sweeps, prior=history(PRIOR_SD, 6))
    noisy = noise_floor(sweeps, prior=history(3 * PRIOR_SD, 6))
    assert calm.service_between_df == default.service_between_df + 18
    assert calm.mde < default.mde < noisy.mde, (calm.mde, default.mde, noisy.mde)
    assert "6 earlier floors" in calm.prior_source


def test_the_review_shows_the_floors_own_repeats_beside_the_pooled_noise(rates):
    """A quiet baseline pooled with a noisy configuration of its endpoint: the review line says both, so a
    reader sees that the pool, not this baseline, set the MDE (docs/measurement.md, session 24's run)."""
    from research.review import _noise_lines

    sweeps = _sweeps(BASE, rates, 15, "A", "service_rate")  # a pair whose service rates agree to 0.5%
    noisy = [AAEvidence(estimator=e, sum_sq=3 * 0.09**2, df=3, sweeps=4) for e in ("crossing", "service_rate")]
    floor = noise_floor(sweeps, prior=NoisePrior.from_history(noisy, 1))
    own = {e.estimator: e.sd for e in floor.aa_evidence}
    line = _noise_lines("working baseline", BaselineRecord(engine_args=["--x"], sweeps=sweeps, noise=floor))[0]
    assert f"sd of a paired difference {floor.between_var**0.5:.1%}" in line
    said = (
        f"its own repeats alone: crossing {own['crossing']:.1%} (1 df), service rate {own['service_rate']:.1%} (1 df)"
    )
    assert said in line
    assert floor.service_between_var**0.5 > 2 * own["service_rate"]  # the pool is what widened it here


def _memory_rows(endpoint, campaign_id, source, sd, df=3):
    evs = [
        AAEvidence(estimator=e, sum_sq=df * sd**2, df=df, sweeps=math.ceil(df) + 1)
        for e in ("crossing", "service_rate")
    ]
    return evidence_records(endpoint, campaign_id, source, "cfg", evs)


def test_the_memory_pools_the_endpoints_other_campaigns_under_the_same_protocol_only(tmp_path):
    from test_campaign_deadline import _endpoint

    endpoint = _endpoint(tmp_path)
    memory = MemoryStore(tmp_path / "memory.duckdb")
    for row in _memory_rows(endpoint, "c1", "reference", 0.05) + _memory_rows(endpoint, "c1", "e1", 0.05):
        memory.record_aa_evidence(row)
    for row in _memory_rows(endpoint, "c2", "reference", 0.05):
        memory.record_aa_evidence(row)
    longer = endpoint.model_copy(
        update={"sweep": endpoint.sweep.model_copy(update={"step_duration_s": endpoint.sweep.step_duration_s * 2})}
    )
    assert protocol_key(longer) != protocol_key(endpoint)
    for row in _memory_rows(longer, "c3", "reference", 0.5):  # another protocol: not pooled
        memory.record_aa_evidence(row)

    prior = endpoint_prior(endpoint, memory, exclude_campaign="c2")  # c2 pools its own from its state
    assert prior.floors == 2 and prior.service_rate.df == PRIOR_DF + 6
    expected = math.sqrt((PRIOR_DF * PRIOR_SD**2 + 6 * 0.05**2) / (PRIOR_DF + 6))
    assert prior.service_rate.sd == pytest.approx(expected)
    assert endpoint_prior(endpoint, memory).floors == 3
    # a re-recorded source replaces its row (an adopted floor holds its experiment's sweeps and more)
    for row in _memory_rows(endpoint, "c1", "e1", 0.05, df=5):
        memory.record_aa_evidence(row)
    assert endpoint_prior(endpoint, memory, exclude_campaign="c2").service_rate.df == PRIOR_DF + 8
    view = memory.query("SELECT * FROM v_endpoint_noise WHERE estimator = 'service_rate' ORDER BY df")
    assert view["sources"].to_list() == [1, 3] and view["df"].to_list() == [3, 11]
    assert view["between_run_sd"][1] == pytest.approx(0.05)
    # a floor whose host exponent was fitted on its own pair keeps a fraction of its degree of freedom
    # (loadgen.host_elasticity), and the memory keeps the fraction
    for row in _memory_rows(endpoint, "c4", "reference", 0.05, df=0.25):
        memory.record_aa_evidence(row)
    assert endpoint_prior(endpoint, memory, exclude_campaign="c2").service_rate.df == pytest.approx(PRIOR_DF + 8.25)


def test_a_failing_memory_leaves_the_history_out_and_says_so(tmp_path):
    from test_campaign_deadline import _endpoint

    class Broken:
        def aa_evidence(self, *a, **k):
            raise OSError("disk gone")

    said = []
    prior = endpoint_prior(_endpoint(tmp_path), Broken(), progress=said.append)
    assert prior.floors == 0 and prior.service_rate.df == PRIOR_DF
    assert any("endpoint noise" in line and "disk gone" in line for line in said)


def test_a_campaign_counts_each_repeated_configuration_once(rates):
    """An experiment's repeats are evidence; a floor adopted from it replaces it, and the floor being
    built from an experiment's sweeps does not count them twice."""

    def sweeps(seed: int) -> list[SweepResult]:
        return _sweeps(BASE, rates, seed, "A", "service_rate")

    def experiment(eid: str, s: list[SweepResult]) -> ExperimentState:
        return ExperimentState(
            experiment_id=eid,
            round=1,
            proposal_ids=[],
            title=eid,
            baseline_args=[],
            engine_args=[eid],
            diff={},
            verdict="same",
            sweeps=s,
        )

    ref_sweeps, e1, e2 = sweeps(21), sweeps(22), sweeps(23)
    for i, s in enumerate(e1 + e2):
        s.started_at = 100.0 + i
    state = CampaignState(campaign="c", campaign_id="c-1", endpoint="sim")
    ref = BaselineRecord(engine_args=[], sweeps=ref_sweeps, noise=noise_floor(ref_sweeps))
    state.baselines.append(ref)
    state.experiments = {"e1": experiment("e1", e1), "e2": experiment("e2", e2)}
    assert set(campaign_evidence(state)) == {"reference", "e1", "e2"}
    assert set(campaign_evidence(state, exclude=list(e1))) == {"reference", "e2"}
    adopted = BaselineRecord(engine_args=["e1"], sweeps=e1, noise=noise_floor(e1), source_experiment="e1")
    state.baselines.append(adopted)
    assert campaign_evidence(state)["e1"] == adopted.noise.aa_evidence


def _classed(sd: float, limiting: str | None, df: int = 3) -> list[AAEvidence]:
    return [
        AAEvidence(estimator=e, sum_sq=df * sd**2, df=df, sweeps=df + 1, limiting=limiting)
        for e in ("crossing", "service_rate")
    ]


def test_a_floor_pools_only_its_own_noise_class_and_keeps_the_others_for_candidates(rates):
    """The simulated engine's floor is ITL-limited. A noisy TTFT-limited history does not widen its MDE
    (it would, unclassed), a calm ITL-limited one tightens it, and the noisy class stays on the floor for
    a candidate the TTFT target limits."""
    sweeps = _sweeps(BASE, rates, 11, "A", "service_rate")
    alone = noise_floor(sweeps)
    assert alone.limiting == "itl" and all(ev.limiting == "itl" for ev in alone.aa_evidence)
    classed = NoisePrior.from_history(_classed(0.25, "ttft") * 2 + _classed(PRIOR_SD, "itl") * 3, 5)
    unclassed = NoisePrior.from_history(_classed(0.25, None) * 2 + _classed(PRIOR_SD, "itl") * 3, 5)
    mine, blind = noise_floor(sweeps, prior=classed), noise_floor(sweeps, prior=unclassed)
    assert mine.service_between_df == alone.service_between_df + 9  # the three ITL-limited floors only
    assert mine.mde < alone.mde < blind.mde, (mine.mde, alone.mde, blind.mde)
    assert "that itl limits" in mine.prior_source
    ttft_var, ttft_df = mine.class_noise["ttft"]["service_rate"]
    assert ttft_df == PRIOR_DF + 6 and ttft_var > 10 * mine.service_between_var
    any_var, _ = mine.class_noise["any"]["service_rate"]
    assert mine.service_between_var < any_var < ttft_var
    from research.review import _noise_lines

    line = _noise_lines("working baseline", BaselineRecord(engine_args=["--x"], sweeps=sweeps, noise=mine))[0]
    assert "limited by itl, pooled with configurations itl limits" in line
    from assets.measurement import noise_floor_metadata

    assert noise_floor_metadata(mine)["noise_class"] == "itl"  # what the Dagster UI shows
    assert f"adds its class's sd: ttft {ttft_var**0.5:.1%} ({ttft_df:.3g} df)" in line


def test_combining_two_classes_adds_their_variances_on_satterthwaite_df():
    from loadgen.noise_prior import combine

    assert combine((0.01, 5), (0.01, 5)) == (pytest.approx(0.01), 10)  # alike: as one pooled class
    var, df = combine((0.001, 20), (0.09, 4))
    assert var == pytest.approx(0.0455) and df == 4  # the noisy side's few df decide
    assert combine((0.02, 3), (0.5, 0)) == (0.02, 3)  # a class without evidence adds nothing it cannot know
    assert combine((0.01, 5), (0.02, 9), shared=True) == (pytest.approx(0.015), 5)  # b pools a: not independent


def test_a_candidate_another_target_limits_is_judged_with_both_sides_noise(rates):
    """Against an ITL-limited floor, a candidate limited by TTFT (a small batch: it queues) gets the TTFT
    class's variance added, and the verdict says so; a candidate of the floor's own class keeps its noise."""
    import dataclasses

    from loadgen.compare import _priors, compare

    sweeps = _sweeps(BASE, rates, 11, "A", "service_rate")
    floor = noise_floor(sweeps, prior=NoisePrior.from_history(_classed(0.2, "ttft") * 2, 2))
    queued = _sweeps(dataclasses.replace(BASE, max_batch=16), rates, 12, "B", "service_rate")
    same_class = _sweeps(BASE, rates, 13, "B", "service_rate")
    other, said = _priors(floor, [s.steps for s in queued])
    assert other["service_rate"][0] > 5 * floor.service_between_var and "candidate limited by ttft" in said
    own, said = _priors(floor, [s.steps for s in same_class])
    assert own["service_rate"] == (floor.service_between_var, floor.service_between_df) and "itl" in said
    verdicts = [compare(floor, c) for c in (queued, same_class)]
    assert "baseline by itl: both sides' variances" in verdicts[0].evidence
    assert "both sides limited by itl" in verdicts[1].evidence
    # ITL limits this floor: a candidate that serves less than it, or one ITL limits too, is judged by the
    # crossing alone (loadgen.judge), and the noisier pairing states the larger between-run sd
    assert all(v.decided_by == "SLA crossing" and "SLA limit is ITL" in v.evidence for v in verdicts)
    sds = [float(re.search(r"between-run sd of a paired difference ([\d.]+)%", v.evidence)[1]) for v in verdicts]
    assert other["crossing"][0] > own["crossing"][0] and sds[0] > sds[1], sds


def test_the_memory_keeps_each_rows_noise_class(tmp_path):
    from test_campaign_deadline import _endpoint

    endpoint = _endpoint(tmp_path)
    memory = MemoryStore(tmp_path / "memory.duckdb")
    for source, sd, limiting in (("reference", 0.03, "ttft"), ("e1", 0.3, "itl"), ("e2", 0.03, None)):
        for row in evidence_records(endpoint, "c1", source, "cfg", _classed(sd, limiting)):
            memory.record_aa_evidence(row)
    prior = endpoint_prior(endpoint, memory)
    assert prior.classes() == ["itl", "ttft"]
    ttft = prior.for_limit("ttft")
    assert ttft.service_rate.df == PRIOR_DF + 6 and ttft.floors == 2  # its own class and the unclassed row
    assert prior.for_limit("itl").service_rate.sd > 3 * ttft.service_rate.sd
    view = memory.query(
        "SELECT limiting, between_run_sd FROM v_endpoint_noise_by_limit "
        "WHERE estimator = 'crossing' AND limiting IS NOT NULL ORDER BY limiting"
    )
    assert view["limiting"].to_list() == ["itl", "ttft"] and view["between_run_sd"][0] == pytest.approx(0.3)


def test_an_endpoints_declared_calibration_is_pooled_into_its_floors_by_class(tmp_path, rates):
    """The noise an endpoint's protocol measured on its hardware before any campaign (``noise_calibration``)
    is in a fresh machine's first floor: a noisy TTFT class widens that class's floors only, a calm ITL
    class tightens the simulated (ITL-limited) floor, the prior says where it came from, and a research
    memory's history still adds to it."""
    from test_campaign_deadline import _endpoint

    bare = _endpoint(tmp_path)
    # as a lab in Nairobi might have measured it: a decode-bound configuration 9% apart between launches
    declared = bare.model_copy(
        update={
            "noise_calibration": [
                _calibration(bare, "service_rate", "ttft", 0.09, 6),
                _calibration(bare, "service_rate", "itl", 0.015, 8),
                _calibration(bare, "crossing", "itl", 0.02, 8),
            ]
        }
    )
    assert endpoint_prior(bare, None).floors == 0
    prior = endpoint_prior(declared, None)
    assert "declared calibration" in prior.source and prior.classes() == ["itl", "ttft"]
    ttft, itl = prior.for_limit("ttft"), prior.for_limit("itl")
    assert ttft.service_rate.df == PRIOR_DF + 6 and itl.service_rate.df == PRIOR_DF + 8
    # pooled with the 3% default it would read 7.2%: narrower than the launches it was measured on
    assert math.sqrt((PRIOR_DF * PRIOR_SD**2 + 6 * 0.09**2) / (PRIOR_DF + 6)) < ttft.service_rate.sd == 0.09
    assert itl.service_rate.sd < PRIOR_SD < ttft.service_rate.sd
    assert ttft.crossing.df == PRIOR_DF  # no crossing evidence of that class was declared

    sweeps = _sweeps(BASE, rates, 11, "A", "service_rate")
    fresh, calibrated = noise_floor(sweeps, prior=endpoint_prior(bare, None)), noise_floor(sweeps, prior=prior)
    assert fresh.limiting == calibrated.limiting == "itl"
    assert calibrated.mde < fresh.mde and calibrated.service_between_df == fresh.service_between_df + 8
    # a candidate the TTFT target limits is judged with that class's declared noise (loadgen.noise_prior.combine)
    ttft_var, ttft_df = calibrated.class_noise["ttft"]["service_rate"]
    assert ttft_df == PRIOR_DF + 6 and ttft_var > 4 * calibrated.service_between_var

    memory = MemoryStore(tmp_path / "memory.duckdb")
    for row in _memory_rows(declared, "c1", "reference", 0.05):
        memory.record_aa_evidence(row)
    with_history = endpoint_prior(declared, memory)
    assert with_history.service_rate.df == PRIOR_DF + 6 + 8 + 3  # both classes' calibration and the memory's row


def _calibration(endpoint, estimator, limiting, sd, df, **change):
    """A calibration measured between launches on ``endpoint``'s own hardware and sweep protocol."""
    from research.campaign.steps import run_hardware
    from specs.config import CalibrationProtocol, NoiseCalibration

    fields = dict(
        estimator=estimator,
        limiting=limiting,
        sd=sd,
        df=df,
        source="lab runs",
        scope="between_launches",
        hardware=run_hardware(endpoint),
        protocol=CalibrationProtocol.of(endpoint.sweep),
    )
    return NoiseCalibration(**(fields | change))


def test_a_calibration_is_ignored_on_another_protocol_or_other_hardware_and_the_prior_says_why(tmp_path, rates):
    """A declared sd speaks for the hardware and sweep settings it was measured with: on another protocol
    (a longer step) or other hardware it is left out, every floor rests on what remains, and the prior's
    source (the review's noise-floor line) says what was ignored and why. Within-launch evidence is never
    taken for between-launch noise."""
    from research.review import _noise_lines
    from specs.config import CalibrationProtocol
    from test_campaign_deadline import _endpoint

    bare = _endpoint(tmp_path)
    longer = CalibrationProtocol.of(bare.sweep).model_copy(update={"step_duration_s": 30.0})
    for calibration, said in (
        (_calibration(bare, "service_rate", "itl", 0.015, 8, protocol=longer), "step_duration_s 30.0 (this run 15.0)"),
        (
            _calibration(bare, "service_rate", "itl", 0.015, 8, hardware="cpu x 2"),
            "measured on cpu x 2, this run is H200 x 1",
        ),
        (_calibration(bare, "service_rate", "itl", 0.015, 8, scope="within_launch"), "within-launch evidence"),
    ):
        declared = bare.model_copy(update={"noise_calibration": [calibration]})
        prior = endpoint_prior(declared, None)
        assert prior.floors == 0 and prior.classes() == [] and not prior.bounds
        assert "declared calibration ignored (lab runs)" in prior.source and said in prior.source, prior.source
        assert prior.for_limit("itl").service_rate.sd == pytest.approx(PRIOR_SD)
        sweeps = _sweeps(BASE, rates, 11, "A", "service_rate")
        floor = noise_floor(sweeps, prior=prior)
        assert floor.mde == pytest.approx(noise_floor(sweeps, prior=endpoint_prior(bare, None)).mde)
        assert "declared calibration ignored" in floor.prior_source
        review = _noise_lines("reference", BaselineRecord(engine_args=[], sweeps=sweeps, noise=floor))[0]
        assert "declared calibration ignored (lab runs)" in review and said in review  # the review says why
    # the same calibration on its own protocol and hardware applies (the calm ITL class tightens the floor)
    applied = endpoint_prior(
        bare.model_copy(update={"noise_calibration": [_calibration(bare, "service_rate", "itl", 0.015, 8)]}), None
    )
    assert applied.floors == 1 and "ignored" not in applied.source
    assert (
        endpoint_prior(bare, None, hardware="cpu x 16").source == endpoint_prior(bare, None).source
    )  # nothing declared


def test_no_floor_of_a_class_is_narrower_than_its_declared_between_launch_noise(tmp_path, rates):
    """Two sweeps of one launch (a floor's own repeats) can agree more closely than two launches do: a
    floor's between-run variance, and the prior of its class, never fall below the declared between-launch
    sd, over seeds; another class is not bound by it."""
    from test_campaign_deadline import _endpoint

    bare = _endpoint(tmp_path)
    declared = bare.model_copy(update={"noise_calibration": [_calibration(bare, "service_rate", "itl", 0.06, 2)]})
    prior = endpoint_prior(declared, None)
    assert prior.for_limit("itl").service_rate.sd == pytest.approx(0.06)  # pooled with the 3% default: 4.2%
    assert "at least sd 6.0%" in prior.for_limit("itl").source
    assert prior.for_limit("ttft").service_rate.sd == pytest.approx(PRIOR_SD)
    classes = []
    for seed in range(11, 17):
        sweeps = _sweeps(BASE, rates, seed, "A", "service_rate")
        floor, free = noise_floor(sweeps, prior=prior), noise_floor(sweeps, prior=endpoint_prior(bare, None))
        classes.append(floor.limiting)
        if floor.limiting == "itl":
            assert math.sqrt(floor.service_between_var) >= 0.06 - 1e-12
            assert floor.service_between_var > free.service_between_var and floor.mde > free.mde
        else:  # a floor of another class keeps its own noise
            assert floor.service_between_var == pytest.approx(free.service_between_var)
    assert classes.count("itl") >= 3, classes


def test_the_embedded_default_declares_only_between_launch_noise_no_narrower_than_the_project_measured():
    """Each of support_smollm's calibrations is between launches, at least the paired sd of two launches
    that benchmarks/launch_variance.py recorded for its configuration at one host speed, and on no more df
    than those launches' between-launch estimate has; it applies on the 2-core host it was measured on."""
    import json
    from pathlib import Path

    from specs import paths
    from dagster_project.lib import load_definitions

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    endpoint = load_definitions(paths.definitions_dir()).endpoint("support_smollm")
    assert endpoint.noise_calibration
    for c in endpoint.noise_calibration:
        assert c.scope == "between_launches" and c.hardware == "cpu x 2" and not c.protocol.differences(endpoint.sweep)
        measured = json.loads((results / c.source.split(",")[0] / "launch_variance.json").read_text())
        at_host = measured["estimators"]["service_rate_at_host"]
        assert c.estimator == "service_rate" and c.sd >= round(at_host["sd_pair_two_launches"], 3)
        assert c.df <= at_host["df_between"]
    prior = endpoint_prior(endpoint, None, hardware="cpu x 2")
    assert prior.for_limit("itl").service_rate.sd >= 0.038 and prior.for_limit("ttft").service_rate.sd >= 0.043
    assert "ignored" in endpoint_prior(endpoint, None, hardware="cpu x 16").source


def test_a_calibration_the_product_cannot_use_is_refused_with_its_field():
    from pydantic import ValidationError

    from specs.config import CalibrationProtocol, NoiseCalibration, SweepSpec

    where = dict(source="x", scope="between_launches", hardware="cpu x 2", protocol=CalibrationProtocol.of(SweepSpec()))
    with pytest.raises(ValidationError, match="estimator"):
        NoiseCalibration(estimator="p95", sd=0.05, df=3, **where)
    with pytest.raises(ValidationError, match="sd"):
        NoiseCalibration(estimator="crossing", sd=5.0, df=3, **where)  # 500%: a percentage written as one
    with pytest.raises(ValidationError, match="df"):
        NoiseCalibration(estimator="crossing", sd=0.05, df=0, **where)
    with pytest.raises(ValidationError, match="limiting"):
        NoiseCalibration(estimator="crossing", limiting="tpot", sd=0.05, df=3, **where)
    with pytest.raises(ValidationError, match="scope"):  # which launches it compares must be said
        NoiseCalibration(estimator="crossing", sd=0.05, df=3, **(where | {"scope": "runs"}))
    with pytest.raises(ValidationError, match="protocol"):  # and what it was measured with
        NoiseCalibration(estimator="crossing", sd=0.05, df=3, source="x", scope="between_launches", hardware="cpu x 2")
