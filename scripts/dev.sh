#!/usr/bin/env bash
# The Dagster UI: apply the GPU cap's pool limits from the YAML to the instance, then `dagster dev`.
# Dagster keeps pool limits on the instance (not in code): without this step the pools are unlimited.
# The instance is the project's persistent one (dagster_project/instance.py: DAGSTER_HOME, else
# .autoresearch/dagster), where `autoresearch campaign run` (scripts/main.sh) records its runs; a new
# one gets a dagster.yaml that caps any pool not applied at 1.
set -euo pipefail
cd "$(dirname "$0")/.."
DAGSTER_HOME="${DAGSTER_HOME:-$(.venv/bin/python -m dagster_project.instance)}"
export DAGSTER_HOME
.venv/bin/python -m dagster_project.instance >/dev/null  # its dagster.yaml, when the folder has none
.venv/bin/autoresearch pools apply
exec .venv/bin/dagster dev -m dagster_project.definitions "$@"
