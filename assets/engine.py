"""Engine identity: what exactly is served (engine version, model revision, launch config hash)."""

import dagster as dg

from assets.common import key, table
from specs.config import EndpointSpec


def build(endpoint: EndpointSpec, definitions=None) -> dg.Definitions:
    @dg.asset(
        key=key(endpoint.name, "engine_identity"),
        group_name=endpoint.name,
        kinds={endpoint.engine.kind},
        description=f"Engine, version, model revision and launch-config hash of {endpoint.name}. "
        "Changes here mean measurements are no longer comparable.",
        code_version=endpoint.launch_config_hash(),
    )
    def engine_identity(context: dg.AssetExecutionContext) -> dict:
        from engines import engine_identity as identify

        identity = identify(endpoint)
        record = {
            "endpoint": endpoint.name,
            "engine": identity.engine,
            "engine_version": identity.engine_version,
            "model": identity.model,
            "model_revision": identity.model_revision,
            "launch_config_hash": identity.launch_config_hash,
            "launch_command": list(identity.launch_command),
        }
        context.add_output_metadata(
            {
                "identity": table([{k: v for k, v in record.items() if k != "launch_command"}]),
                "launch_command": dg.MetadataValue.json(record["launch_command"]),
                "launch_config_hash": identity.launch_config_hash,
            }
        )
        return record

    return dg.Definitions(assets=[engine_identity])
