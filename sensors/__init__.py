"""Dagster sensors: drift sensors that start campaigns, and the continuation of the research loop."""
