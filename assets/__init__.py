"""Dagster asset definitions, one module per stage. Each module exposes ``build(endpoint) -> list``
of definitions for one endpoint; the logic lives in the plain packages they call."""
