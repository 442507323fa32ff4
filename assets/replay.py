"""Replay stage: production traffic -> redacted, tokenised replay pool, with a blocking fidelity check.

Redaction happens inside the pool build's single streaming pass (unredacted text never leaves
memory), so ``production_logs`` is the source as an external asset and ``replay_pool`` is the
first thing persisted.
"""

import dagster as dg

from assets.common import key, md_image, table
from specs.config import EndpointSpec


def build(endpoint: EndpointSpec, definitions=None) -> dg.Definitions:
    name = endpoint.name
    logs_key, pool_key = key(name, "production_logs"), key(name, "replay_pool")
    source = endpoint.traffic.path or "bundled sample support logs"

    production_logs = dg.AssetSpec(
        key=logs_key,
        group_name=name,
        kinds={"jsonl" if endpoint.traffic.kind in ("request_log", "sample") else "csv"},
        description=f"Production traffic of {name} ({endpoint.traffic.kind}: {source}). Raw logs may hold PII: "
        "nothing reads them except the pool build, which redacts before persisting.",
        metadata={"traffic_kind": endpoint.traffic.kind, "source": source},
    )

    @dg.asset(
        key=pool_key,
        group_name=name,
        deps=[logs_key],
        kinds={"parquet", "polars"},
        description="One row per request: arrival offset, redacted request body, token counts under the "
        "endpoint's tokenizer, expected output length, prefix group.",
        check_specs=[
            dg.AssetCheckSpec(
                "replay_fidelity",
                asset=pool_key,
                blocking=True,
                description="Pool vs production: length distributions, cached-prefix "
                "fraction, inter-arrival times, burstiness, concurrency",
            )
        ],
    )
    def replay_pool(context: dg.AssetExecutionContext):
        from autoresearch.workflows import build_replay_pool
        from replay.build import MalformedSourceError

        try:
            pool_build = build_replay_pool(endpoint)
        except MalformedSourceError as exc:  # the build failed: nothing was replaced
            raise dg.Failure(
                description=str(exc),
                metadata={
                    "malformed_lines": len(exc.malformed),
                    "lines_read": exc.lines_read,
                    "max_malformed_fraction": exc.limit,
                    "first_bad_lines": table(
                        [{"line": f"{exc.source}:{n}", "reason": r} for n, r in exc.malformed[:20]]
                    ),
                },
            ) from exc
        if not pool_build.accepted:
            context.log.error(
                f"{name}: replay pool rejected (fidelity check failed); {pool_build.target_path} "
                f"not replaced, candidate at {pool_build.pool_path}"
            )
        metadata, check = pool_build_events(pool_key, pool_build)
        yield dg.Output(str(pool_build.pool_path), metadata=metadata)
        yield dg.AssetCheckResult(
            check_name=check.check_name,
            asset_key=pool_key,
            passed=check.passed,
            severity=check.severity,
            metadata=check.metadata,
        )

    return dg.Definitions(assets=[production_logs, replay_pool])


def pool_build_events(pool_key: dg.AssetKey, pool_build) -> tuple[dict, dg.AssetCheckEvaluation]:
    """A pool build as the UI shows it: the replay_pool's metadata and its fidelity check's evaluation
    (also recorded by a headless campaign that built its pool, assets/campaign_record.py)."""
    plot = pool_build.plot()
    rows = [
        {
            "metric": r.name,
            "pool": r.pool,
            "production": r.production,
            "distance": r.distance,
            "threshold": r.threshold,
            "status": r.status,
            "note": r.note,
        }
        for r in pool_build.fidelity.rows
    ]
    metadata = {
        "rows": pool_build.stats.get("rows", 0),
        "distinct_requests": pool_build.stats.get("distinct_requests", 0),
        "accepted": pool_build.accepted,
        "path": dg.MetadataValue.path(str(pool_build.pool_path)),
        "pool_in_use": dg.MetadataValue.path(str(pool_build.target_path)),
        "malformed_lines": len(pool_build.malformed),
        "malformed_examples": table([{"line": n, "reason": r} for n, r in pool_build.malformed[:20]]),
        "redactions": table([{"category": k, "count": v} for k, v in sorted(pool_build.redaction_counts.items())]),
        "lineage": dg.MetadataValue.json({k: v for k, v in pool_build.lineage.items() if k != "traffic"}),
    }
    check = dg.AssetCheckEvaluation(
        asset_key=pool_key,
        check_name="replay_fidelity",
        passed=pool_build.fidelity.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "distances": table(rows, ["metric", "pool", "production", "distance", "threshold", "status", "note"]),
            "failures": ", ".join(f"{r.name} ({r.status})" for r in pool_build.fidelity.failures) or "none",
            "length_distributions": md_image(plot, "pool vs production token lengths"),
        },
    )
    return metadata, check
