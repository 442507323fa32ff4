"""The research loop's logic: diagnosis, proposers, correctness, verdicts, campaigns (no Dagster imports)."""
