"""The Dagster code location: YAML definitions -> per-endpoint asset graphs, jobs, sensors."""
