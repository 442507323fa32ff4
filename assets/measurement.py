"""Measurement stage: K baseline sweeps -> noise floor -> load curve; production-shaped replay."""

import dagster as dg

from assets.common import key, md_image, refuse_unrunnable, table
from specs import paths
from specs.config import EndpointSpec
from assets.pools import pool_for
from loadgen.report import step_table
from loadgen.results import NoiseFloor, SweepResult


def build(endpoint: EndpointSpec, definitions=None) -> dg.Definitions:
    name = endpoint.name
    pool_key = key(name, "replay_pool")

    @dg.asset(
        key=key(name, "baseline_runs"),
        group_name=name,
        deps=[pool_key, key(name, "engine_identity")],
        pool=pool_for(endpoint),
        kinds={endpoint.engine.kind},
        description=f"{endpoint.sweep.repeats} identical capacity sweeps of the working baseline on the "
        "replay pool (open loop, warm-up and prefix-cache reset per step).",
    )
    def baseline_runs(context: dg.AssetExecutionContext) -> list[SweepResult]:
        refuse_unrunnable(endpoint)
        from autoresearch.workflows import baseline_sweeps, load_pool, record_runs, working_spec
        from engines import EngineRunInvalid

        spec = working_spec(endpoint)
        try:
            sweeps = baseline_sweeps(spec, load_pool(spec), spec.sweep.repeats, progress=context.log.info)
        except EngineRunInvalid as exc:  # no noise floor on an engine that failed or died: the asset fails
            raise engine_failure("baseline runs", exc) from None
        record_runs(
            spec,
            sweeps,
            kind="baseline",
            run_prefix=context.run.run_id,
            campaign_id=f"{name}-interactive",
            dagster_run_id=context.run.run_id,
        )
        context.add_output_metadata(baseline_runs_metadata(spec.engine.args, sweeps))
        return sweeps

    @dg.asset(
        key=key(name, "noise_floor"),
        group_name=name,
        ins={"baseline_runs": dg.AssetIn(key(name, "baseline_runs"))},
        description="Spread of capacity and latency percentiles over the identical baseline sweeps: "
        "what a candidate must beat to count.",
    )
    def noise_floor(context: dg.AssetExecutionContext, baseline_runs: list[SweepResult]) -> NoiseFloor:
        from autoresearch.workflows import endpoint_floor, working_spec

        spec = working_spec(endpoint)  # the configuration baseline_runs measured
        floor = endpoint_floor(spec, baseline_runs, run_id=context.run.run_id, progress=context.log.warning)
        context.add_output_metadata(noise_floor_metadata(floor))
        return floor

    @dg.asset(
        key=key(name, "load_curve"),
        group_name=name,
        ins={
            "baseline_runs": dg.AssetIn(key(name, "baseline_runs")),
            "noise_floor": dg.AssetIn(key(name, "noise_floor")),
        },
        description="p50/p95/p99 TTFT, inter-token and end-to-end latency against arrival rate, "
        "with the SLA, the knee and the capacity within the SLA (per GPU).",
    )
    def load_curve(
        context: dg.AssetExecutionContext, baseline_runs: list[SweepResult], noise_floor: NoiseFloor
    ) -> dict:
        summary, metadata = load_curve_of(endpoint, baseline_runs, noise_floor)
        context.add_output_metadata(metadata)
        return summary

    @dg.asset(
        key=key(name, "production_replay"),
        group_name=name,
        deps=[pool_key],
        pool=pool_for(endpoint),
        kinds={endpoint.engine.kind},
        description="The pool replayed with its own production arrival pattern (bursts, quiet periods), "
        "prefix cache left warm: SLA attainment over time. Multi-turn sessions keep their order: a later "
        "turn goes out after the previous reply plus its logged think time.",
    )
    def production_replay(context: dg.AssetExecutionContext) -> dict:
        refuse_unrunnable(endpoint)
        from autoresearch.workflows import load_pool, working_spec
        from engines import EngineRunInvalid, run_engine
        from loadgen.replay import run_production_replay

        spec = working_spec(endpoint)
        pool = load_pool(spec)
        try:
            with run_engine(spec, workdir=paths.runs_dir() / "replay" / name, purpose="replay") as engine:
                result = run_production_replay(engine, pool, spec, max_duration_s=120.0)
        except EngineRunInvalid as exc:  # a replay on an engine that failed or died measured nothing
            raise engine_failure("production replay", exc) from None
        context.add_output_metadata(
            {
                "attainment": result.attainment,
                "validity": result.validity,
                "reason": result.invalid_reason or "",
                "intervals": table(
                    [i.model_dump() for i in result.intervals],
                    [
                        "start_s",
                        "end_s",
                        "target_rate",
                        "requests",
                        "errors",
                        "attainment",
                        "ttft_p95_ms",
                        "e2e_p95_ms",
                        "within_sla",
                    ],
                ),
                # multi-turn pools replay session-aware: how far later turns moved from their recorded times
                "sessions": result.sessions.model_dump_json()
                if result.sessions
                else "none (open loop: no multi-turn sessions)",
            }
        )
        return result.model_dump(mode="json")

    return dg.Definitions(assets=[baseline_runs, noise_floor, load_curve, production_replay])


def engine_failure(what: str, exc) -> dg.Failure:
    """The asset's failure for an engine that failed to start or died while measured
    (``engines.EngineRunInvalid``): a one-line reason, the engine log's tail as metadata."""
    tail = exc.log_tail or "(no engine log)"
    return dg.Failure(
        description=f"{what} invalid: {exc.reason}",
        metadata={
            "validity": "invalid",
            "invalid_reason": exc.reason,
            "engine_log_tail": dg.MetadataValue.md(f"```\n{tail}\n```"),
        },
        allow_retries=False,
    )


# The metadata of each measurement asset, also recorded by a headless campaign (assets/campaign_record.py).


def baseline_runs_metadata(engine_args: list[str], sweeps: list[SweepResult]) -> dict:
    return {
        "engine_args": " ".join(engine_args),
        "repeats": table(
            [
                {
                    "repeat": s.label,
                    "capacity_rps": s.capacity_rps,
                    "fitted_capacity_rps": s.capacity_fit_rps,
                    "knee_rps": s.knee_rate,
                    "steps": len(s.steps),
                    "validity": s.validity,
                    "reason": s.invalid_reason,
                }
                for s in sweeps
            ]
        ),
    }


def noise_floor_metadata(floor: NoiseFloor) -> dict:
    return {
        "capacity_mean_rps": floor.capacity_mean,
        "capacity_std_rps": floor.capacity_std,
        "relative_spread": floor.capacity_rel_spread,
        "threshold": floor.threshold,
        "validity": floor.validity,
        "invalid_reason": floor.invalid_reason or "",
        # the floor's own MDE, from A/A pairs pooled with the prior: an input to the verdicts judged on it, not
        # their MDE (a crossing-judged or other-class candidate meets a wider one: research.verdict_mde)
        "floor_mde_input": floor.mde,
        "fitted_capacity_rps": floor.capacity_fit_rps,
        "between_run_sd": (floor.between_var or 0.0) ** 0.5 if floor.between_var is not None else None,
        "between_run_df": floor.between_df,
        "noise_prior": floor.prior_source or "",
        # the SLA target that limits this baseline: the noise class its prior pools (loadgen.noise_prior)
        "noise_class": floor.limiting or "unresolved",
        "per_rate": table([{"rate": r, **v} for r, v in floor.per_rate.items()]),
    }


def load_curve_of(endpoint: EndpointSpec, sweeps: list[SweepResult], floor: NoiseFloor) -> tuple[dict, dict]:
    """(the load_curve value, its metadata): the plot of the sweeps, capacity, knee and the first repeat's steps."""
    from loadgen.plots import load_curve_png  # matplotlib: loaded when a plot is drawn

    name = endpoint.name
    plot = load_curve_png(
        sweeps,
        endpoint.sla,
        paths.runs_dir() / "plots" / f"{name}-load-curve.png",
        title=f"{name}: load curve ({len(sweeps)} baseline sweeps)",
    )
    valid = [s.capacity_rps for s in sweeps if s.validity == "valid" and s.capacity_rps is not None]
    summary = {
        "capacity_rps": min(valid) if valid else None,
        "capacity_per_gpu": (min(valid) / endpoint.hardware.capacity_divisor) if valid else None,
        "knee_rps": sweeps[0].knee_rate if sweeps else None,
        "noise_threshold": floor.threshold,
        "plot_path": str(plot),
    }
    metadata = {
        "load_curve_plot": md_image(plot, "load curve"),
        "capacity_rps": summary["capacity_rps"],
        "capacity_per_gpu": summary["capacity_per_gpu"],
        "knee_rps": summary["knee_rps"],
        "steps": table(step_table(sweeps[0])) if sweeps else "no sweeps",  # the first repeat's load curve
    }
    return summary, metadata
