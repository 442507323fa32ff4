"""Open-loop load generation, arrival schedules, capacity sweeps and latency statistics (no Dagster imports)."""
