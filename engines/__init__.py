"""Inference engine adapters: launch, health, metrics, cache reset, profiling, stop (no Dagster imports)."""
