"""Pareto stage: throughput per GPU against per-user speed over every configuration in the research memory."""

import dagster as dg

from assets.common import key, md_image
from specs.config import EndpointSpec

# The table's columns: (v_pareto_points column, Dagster type, description).
COLUMNS = [
    ("label", "string", "technique and engine-argument change (baseline: the declared or confirmed configuration)"),
    ("on_front", "bool", "on the Pareto front: no other configuration is as good on both axes and better on one"),
    ("output_tokens_per_s_per_gpu", "float", "output tokens/s per GPU at capacity (median over repeats)"),
    ("user_tokens_per_s_p50", "float", "output tokens/s one request sees, p50 (1 / time per output token)"),
    ("capacity_step_rps", "float", "the highest tested rate that held the SLA"),
    ("usd_per_million_output_tokens", "float", "$ per million output tokens at capacity (needs a price per GPU-hour)"),
    ("joules_per_output_token", "float", "GPU energy per output token at capacity (NVML power; none on CPU hosts)"),
    ("runs", "int", "sweeps of this configuration in memory"),
    ("config_hash", "string", "launch configuration hash"),
]


def build(endpoint: EndpointSpec, definitions=None) -> dg.Definitions:
    name = endpoint.name

    @dg.asset(
        key=key(name, "pareto_front"),
        group_name=name,
        deps=[key(name, "baseline_runs"), key(name, "candidate_runs")],
        description="Throughput per GPU against per-user tokens/s for every configuration this endpoint ran "
        "(all experiments in the research memory), the Pareto front marked, each point labelled with its "
        "change, $ per million tokens and joules per token where known.",
    )
    def pareto_front(context: dg.AssetExecutionContext) -> list[dict]:
        from specs import paths
        from loadgen.plots import pareto_png
        from memory_db.queries import pareto_curves, pareto_points
        from memory_db.store import MemoryStore

        with MemoryStore(paths.memory_db_path()).connect() as con:
            points, curves = pareto_points(con, name), pareto_curves(con, name)
        plot = pareto_png(
            points,
            curves,
            paths.runs_dir() / "plots" / f"{name}-pareto.png",
            title=f"{name}: throughput per GPU vs per-user speed ({len(points)} configurations)",
        )
        energy = [p["joules_per_output_token"] for p in points if p["joules_per_output_token"] is not None]
        context.add_output_metadata(
            {
                "pareto_plot": md_image(plot, "pareto front"),
                "configurations": len(points),
                "on_front": sum(1 for p in points if p["on_front"]),
                "points": dg.MetadataValue.table(
                    records=[dg.TableRecord({c: _cell(p[c]) for c, _, _ in COLUMNS}) for p in points],
                    schema=dg.TableSchema(columns=[dg.TableColumn(c, t, description=d) for c, t, d in COLUMNS]),
                ),
                "energy": "measured (NVML power per step)"
                if energy
                else (
                    "no power telemetry (CPU host)"
                    if endpoint.hardware.gpu_count == 0
                    else "no power telemetry (NVML not available during the sweeps)"
                ),
                "price_per_gpu_hour_usd": endpoint.hardware.price_per_gpu_hour_usd,
            }
        )
        return points

    return dg.Definitions(assets=[pareto_front])


def _cell(value):
    """Table cells take plain scalars; a NaN-free float, int, bool, str or None."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
