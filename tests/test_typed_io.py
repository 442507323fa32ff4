"""Typed asset IO (assets.io_manager) and table metadata, in-process, no engine.

The real noise_floor and load_curve assets read a stored list[SweepResult] and get typed values
back; a partitioned asset's values reach an unpartitioned one as {partition: value}; a polars frame
round-trips as Parquet.
"""

import dagster as dg
import polars as pl
from pydantic import BaseModel

from specs.paths import definitions_dir
from assets.io_manager import TypedIOManager
from loadgen.results import LatencySummary, NoiseFloor, StepResult, SweepResult


def _step(rate: float, ttft: float, within: bool) -> StepResult:
    lat = LatencySummary(p50=ttft * 0.7, p95=ttft, p99=ttft * 1.2, mean=ttft * 0.8)
    return StepResult(
        target_rate=rate,
        achieved_rate=rate,
        throughput_rps=rate,
        duration_s=10,
        requests=int(10 * rate),
        errors=0,
        error_rate=0.0,
        ttft_ms=lat,
        itl_ms=lat,
        e2e_ms=lat,
        send_lag_ms=lat,
        within_sla=within,
        sla_violations=[] if within else ["ttft"],
    )


def _sweep(capacity: float) -> SweepResult:
    return SweepResult(
        endpoint="tiny_random",
        engine_args=[],
        launch_config_hash="h",
        started_at=0.0,
        capacity_rps=capacity,
        steps=[_step(1.0, 200, True), _step(2.0, 400, True), _step(4.0, 3000, False)],
    )


def test_measurement_assets_get_typed_values_and_show_step_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))
    from dagster_project.definitions import build_definitions

    defs = build_definitions(definitions_dir())
    manager: TypedIOManager = defs.resources["io_manager"]
    runs_key = dg.AssetKey(["tiny_random", "baseline_runs"])
    sweeps = [_sweep(2.0), _sweep(2.0), _sweep(1.9)]
    manager.handle_output(dg.build_output_context(asset_key=runs_key), sweeps)

    floor_key, curve_key = dg.AssetKey(["tiny_random", "noise_floor"]), dg.AssetKey(["tiny_random", "load_curve"])
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize(
            [defs.get_assets_def(k) for k in (runs_key, floor_key, curve_key)],
            selection=[floor_key, curve_key],
            resources=defs.resources,
            instance=instance,
        )
    assert result.success
    floor = result.output_for_node("tiny_random__noise_floor")
    assert isinstance(floor, NoiseFloor) and floor.capacities == [2.0, 2.0, 1.9]
    stored = tmp_path / "assets" / "tiny_random" / "noise_floor" / "value.json"
    assert NoiseFloor.model_validate_json(stored.read_text()) == floor  # load_curve's input type-checked as NoiseFloor

    steps = next(m for m in result.asset_materializations_for_node("tiny_random__load_curve")).metadata["steps"]
    assert isinstance(steps, dg.TableMetadataValue)
    columns = {c.name: c.type for c in steps.schema.columns}
    assert columns["rate"] == "float" and columns["within_sla"] == "bool" and columns["ttft_p95_ms"] == "float"
    assert [r.data["rate"] for r in steps.records] == [1.0, 2.0, 4.0]
    assert result.output_for_node("tiny_random__load_curve")["noise_threshold"] == floor.threshold


class Verdict(BaseModel):
    proposal: str
    better: bool


def test_partitions_reach_an_unpartitioned_asset_and_frames_round_trip(tmp_path):
    proposals = dg.DynamicPartitionsDefinition(name="proposals")

    @dg.asset(partitions_def=proposals)
    def verdict(context: dg.AssetExecutionContext) -> Verdict:
        return Verdict(proposal=context.partition_key, better=context.partition_key == "p2")

    @dg.asset
    def winners(verdict: dict[str, Verdict]) -> pl.DataFrame:
        return pl.DataFrame({"proposal": sorted(k for k, v in verdict.items() if v.better)})

    @dg.asset
    def report(winners: pl.DataFrame) -> str:
        return ",".join(winners["proposal"])

    resources = {"io_manager": TypedIOManager(base_dir=str(tmp_path))}
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("proposals", ["p1", "p2", "p3"])
        for key in ("p1", "p2"):  # p3 not run yet: simply absent, as before
            assert dg.materialize([verdict], partition_key=key, resources=resources, instance=instance).success
        result = dg.materialize(
            [verdict, winners, report], selection=[winners, report], resources=resources, instance=instance
        )
    assert result.output_for_node("report") == "p2"
    assert (tmp_path / "winners" / "value.parquet").exists() and (tmp_path / "verdict" / "p1.json").exists()
