"""Production logs -> redacted, faithful, replayable request pools (no Dagster imports)."""
