"""The asset graph materialised in-process for real (tiny model, real vLLM CPU engine, real DuckDB):
see the ``research_graph`` fixture in conftest.py for what runs."""

from __future__ import annotations

import os

import dagster as dg
import pytest

# The session fixture research_graph materialises the whole graph (~11 min on a quiet 2-core host)
# inside the first test that asks for it: that test needs more than the suite's 900 s default
# (about 45 min on a slow shared host, where diagnosis alone took 15).
pytestmark = [pytest.mark.engine, pytest.mark.timeout(3600)]


def latest(instance, name: str):
    records = instance.fetch_materializations(dg.AssetKey(["quick", name]), limit=1).records
    assert records, f"quick/{name} was not materialised"
    return records[0].asset_materialization.metadata


def test_replay_pool_passes_its_blocking_fidelity_check(research_graph):
    with research_graph.instance() as instance:
        checks = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [dg.AssetCheckKey(dg.AssetKey(["quick", "replay_pool"]), "replay_fidelity")]
        )
        (execution,) = checks.values()
        assert execution.evaluation.passed
        assert "distances" in execution.evaluation.metadata
        assert latest(instance, "replay_pool")["malformed_lines"].value == 0


def test_load_curve_and_diagnosis_show_the_bottleneck(research_graph):
    with research_graph.instance() as instance:
        curve = latest(instance, "load_curve")
        assert curve["load_curve_plot"].value.startswith("![load curve](data:image/png;base64,")
        assert curve["capacity_rps"].value is not None
        # --max-num-seqs 1: requests queue behind the single running sequence.
        bottlenecks = latest(instance, "diagnosis")["bottlenecks"].value  # a Dagster table: one record each
        assert "batch_limit" in [r.data["bottleneck"] for r in bottlenecks.records]


def test_candidate_is_judged_adopted_and_reviewed(research_graph):
    with research_graph.instance() as instance:
        partitions = instance.get_dynamic_partitions("quick__candidates")
        assert len(partitions) == 1, "one subagent: one candidate partition"
        verdict = latest(instance, "verdicts")
        assert verdict["proposal_id"].value == partitions[0]
        assert verdict["verdict"].value == "better", {k: v.value for k, v in verdict.items()}
        assert latest(instance, "confirmed_baseline")["adopted"].value is True
        report = latest(instance, "review_report")["report"].value
        assert "--max-num-seqs" in report and "lossless" in report and "autoresearch sweep quick" in report


def test_confirmation_is_the_next_working_baseline_in_memory(research_graph):
    from memory_db.store import MemoryStore

    memory = MemoryStore(research_graph.home / "memory.duckdb")
    args = memory.latest_confirmed_engine_args("quick")
    assert args and args[args.index("--max-num-seqs") + 1] != "1"
    rows = memory.query("select verdict, technique from v_experiments where endpoint = 'quick'")
    assert rows.height == 1 and rows["verdict"][0] == "better"
    assert os.environ.get("AUTORESEARCH_HOME") != str(research_graph.home)  # the fixture cleaned up its env


def test_pareto_front_plots_every_configuration_the_graph_ran(research_graph):
    """Baseline and candidate sweeps of the real engine are in memory, one row per step; the Pareto asset
    plots them with the front marked and says plainly that a CPU host has no power telemetry."""
    from memory_db.store import MemoryStore

    memory = MemoryStore(research_graph.home / "memory.duckdb")
    steps = memory.query(
        "select kind, config_hash, output_tokens_per_s_per_gpu, user_tokens_per_s_p50, "
        "joules_per_output_token from v_run_steps where endpoint = 'quick'"
    )
    assert set(steps["kind"]) == {"baseline", "candidate"} and steps["config_hash"].n_unique() == 2
    assert steps["joules_per_output_token"].null_count() == steps.height  # CPU host: no NVML power
    points = memory.query("select label, on_front from v_pareto_points where endpoint = 'quick'")
    with research_graph.instance() as instance:
        meta = latest(instance, "pareto_front")
    assert meta["pareto_plot"].value.startswith("![pareto front](data:image/png;base64,")
    assert meta["configurations"].value == points.height >= 1
    assert meta["on_front"].value == points["on_front"].sum() >= 1
    table = meta["points"].value
    assert sorted(r.data["label"] for r in table.records) == sorted(points["label"].to_list())
    assert meta["energy"].value == "no power telemetry (CPU host)"


def test_drafter_stage_trains_records_and_judges_a_drafter(research_graph, monkeypatch):
    """The drafter assets on the real engine, after the graph: on-policy data -> a few training steps
    and offline acceptance against the untrained control -> the drafter through the one harness against
    the baseline's noise floor, its verdict written to the drafters table (acceptance on random weights
    means nothing: what is checked is that each step hands the next what it needs, with lineage)."""
    from dagster_project.definitions import build_definitions
    from memory_db.store import MemoryStore

    for name, value in research_graph.env.items():
        monkeypatch.setenv(name, value)
    defs = build_definitions(research_graph.definitions_dir)
    graph = defs.resolve_asset_graph()
    stage = [dg.AssetKey(["quick", n]) for n in ("drafter_data", "drafter", "drafter_verdict")]
    assert graph.get(stage[0]).parent_keys == {dg.AssetKey(["quick", "replay_pool"])}
    assert graph.get(stage[2]).parent_keys == {stage[1], dg.AssetKey(["quick", "noise_floor"])}
    run_config = {
        "ops": {
            "quick__drafter_data": {"config": {"examples": 6, "max_tokens": 12, "concurrency": 2}},
            "quick__drafter": {"config": {"heldout": 2, "layers": 2, "steps": 4, "k": 2}},
            "quick__drafter_verdict": {"config": {"repeats": 1}},
        }
    }
    quick = {k for k in graph.get_all_asset_keys() if k.path[0] == "quick" and graph.get(k).is_materializable}
    with research_graph.instance() as instance:
        result = dg.materialize(
            [defs.get_assets_def(k) for k in sorted(quick)],
            instance=instance,
            resources=defs.resources,
            selection=stage,
            run_config=run_config,
        )
        assert result.success
        data, trained, judged = (latest(instance, n) for n in ("drafter_data", "drafter", "drafter_verdict"))
    assert data["examples"].value == 6 and data["reply_tokens"].value > 0
    per_position = trained["accepted_per_position"].value.records
    assert [r.data["position"] for r in per_position] == [0, 1]
    assert all(r.data["untrained"] is not None for r in per_position)  # the control ran too
    assert 1.0 <= trained["acceptance_length"].value <= 3.0
    (rec,) = MemoryStore(research_graph.home / "memory.duckdb").drafters("quick")
    assert rec.drafter_id == trained["drafter_id"].value and rec.train_examples == 4 and rec.steps == 4
    # the verdict asset's verdict is the one the memory keeps, for the drafter and as an experiment
    assert rec.verdict == judged["verdict"].value and rec.verdict in {"better", "same", "worse", "invalid"}
    experiments = MemoryStore(research_graph.home / "memory.duckdb").query(
        "select verdict from v_experiments where endpoint = 'quick' and technique = 'trained_drafter'"
    )
    assert list(experiments["verdict"]) == [rec.verdict]
    if rec.verdict != "invalid":  # served: the engine counted drafts while the harness swept it
        assert rec.acceptance_served["draft_tokens"] > 0
