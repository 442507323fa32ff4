"""The project's persistent Dagster instance: the one ``scripts/dev.sh`` serves and headless campaigns
record into, so what the CLI ran is what the UI shows.

Its folder is ``$DAGSTER_HOME``, else ``$AUTORESEARCH_HOME/dagster`` (``.autoresearch/dagster``).
A new folder gets the project's ``dagster.yaml``: no telemetry, and a pool that ``autoresearch pools
apply`` has not set runs one asset at a time.
"""

from __future__ import annotations

import os
from pathlib import Path

from specs import paths

DAGSTER_YAML = """\
telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1  # a pool `autoresearch pools apply` did not set runs one at a time
"""


def dagster_home() -> Path:
    """The instance folder (created, with the project's dagster.yaml when it has none)."""
    folder = Path(os.environ.get("DAGSTER_HOME") or paths.home() / "dagster")
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    return folder


def persistent_instance():
    """The project's Dagster instance (a context manager: ``with persistent_instance() as instance``)."""
    import dagster as dg

    return dg.DagsterInstance.from_config(str(dagster_home()))


if __name__ == "__main__":  # scripts/dev.sh: where the UI's instance lives
    print(dagster_home())
