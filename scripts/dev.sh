#!/usr/bin/env bash
# The Dagster UI: apply the GPU cap's pool limits from the YAML to the instance, then `dagster dev`.
# Dagster keeps pool limits on the instance (not in code): without this step the pools are unlimited.
# DAGSTER_HOME defaults to .autoresearch/dagster; its dagster.yaml caps any pool not applied at 1.
set -euo pipefail
cd "$(dirname "$0")/.."
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/.autoresearch/dagster}"
mkdir -p "$DAGSTER_HOME"
if [[ ! -f "$DAGSTER_HOME/dagster.yaml" ]]; then
  printf 'telemetry:\n  enabled: false\nconcurrency:\n  pools:\n    default_limit: 1  # a pool `autoresearch pools apply` did not set runs one at a time\n' \
    > "$DAGSTER_HOME/dagster.yaml"
fi
.venv/bin/autoresearch pools apply
exec .venv/bin/dagster dev -m dagster_project.definitions "$@"
