"""The shared research memory in DuckDB: schema, migrations, safe writes, queries (no Dagster imports)."""
