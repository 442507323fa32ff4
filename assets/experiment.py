"""Experiment unit stage: one configuration measured by the experiment unit, launched through Dagster Pipes.

The asset writes the unit's files (spec.json + pool.parquet, see research.experiment) and starts
``python -m autoresearch experiment run`` through the ``pipes_subprocess_client`` resource. The
unit streams its progress and the engine's log back as Pipes logs and reports the load curve and
the verdict's inputs as this asset's materialization. The launcher is only the resource: a
remote one (a GPU host, Modal) runs the same files with the same entry point.
"""

import dagster as dg

from assets.common import key, refuse_unrunnable
from assets.pools import pool_for
from specs.config import EndpointSpec
from autoresearch.experiment_unit import unit_command

PIPES_CLIENT = "pipes_subprocess_client"  # resource key of the launcher


class ExperimentUnitConfig(dg.Config):
    """What to measure: the working baseline with these changes (the CLI's --set / --unset)."""

    set: list[str] = []  # engine.ARG=VALUE (empty VALUE: a bare switch)
    unset: list[str] = []  # engine.ARG
    repeats: int = 1
    label: str = "experiment"


def build(endpoint: EndpointSpec, definitions=None) -> dg.Definitions:
    name = endpoint.name

    @dg.asset(
        key=key(name, "experiment_unit"),
        group_name=name,
        deps=[key(name, "replay_pool")],
        pool=pool_for(endpoint),
        kinds={endpoint.engine.kind, "pipes"},
        required_resource_keys={PIPES_CLIENT},
        description=f"One configuration of {name} (the working baseline, changed by the run config's set/unset) "
        "measured by the experiment unit in its own process, launched through Dagster Pipes: engine start, "
        "repeated capacity sweeps, stop. Metadata: capacity per repeat, load curve, verdict inputs, engine log.",
    )
    def experiment_unit(context: dg.AssetExecutionContext, config: ExperimentUnitConfig):
        refuse_unrunnable(endpoint)
        from specs import paths
        from specs.engine_args import OverrideError, apply_overrides
        from autoresearch.workflows import working_spec, write_experiment

        try:
            spec = apply_overrides(working_spec(endpoint), config.set, config.unset)
        except OverrideError as exc:
            raise dg.Failure(str(exc)) from None
        folder = paths.runs_dir() / "units" / name / f"{config.label}-{context.run.run_id[:8]}"
        spec_file = write_experiment(spec, folder, repeats=config.repeats, label=config.label)
        context.log.info(f"experiment unit {spec_file}: {' '.join(spec.engine.args)}")
        client: dg.PipesSubprocessClient = getattr(context.resources, PIPES_CLIENT)
        return client.run(context=context, command=unit_command(spec_file, folder)).get_materialize_result()

    return dg.Definitions(assets=[experiment_unit])
