"""Code location entry point (``dg dev``, or ``dagster dev -m dagster_project.definitions``).

The definitions are the defs folder's components (``definitions/``, one ``defs.yaml`` per
endpoint, campaign and recipe; ``$AUTORESEARCH_DEFINITIONS`` points elsewhere) plus the resources.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from specs import paths
from dagster_project.lib import defs_tree
from dagster_project.resources import resources


def build_definitions(folder: Path | None = None) -> dg.Definitions:
    """The components under ``folder`` (default: the project's defs folder), as ``dg`` loads them."""
    return dg.Definitions.merge(defs_tree(folder or paths.definitions_dir()).build_defs(), resources())


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
