"""Code location entry point (``dagster dev -m dagster_project.definitions`` or ``dg dev``)."""

from dagster_project.factory import build_definitions

defs = build_definitions()
