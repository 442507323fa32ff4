"""Sensors that start campaigns by themselves: traffic drift, model drift, SLA change.

Each keeps a cursor so one change starts exactly one campaign however many ticks see it; the
YAML is re-read on every tick (an edited SLA or model revision counts without a reload). What
counts as drift is decided in research.drift; these are only the Dagster wiring.
"""

import hashlib
import json
from collections.abc import Callable

import dagster as dg

from specs.config import EndpointSpec

TRIGGER_TAG = "autoresearch/trigger"


def _start(partitions: dg.DynamicPartitionsDefinition, partition: str, cursor: dict, tags: dict) -> dg.SensorResult:
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=partition, partition_key=partition, tags=tags)],
        dynamic_partitions_requests=[partitions.build_add_request([partition])],
        cursor=json.dumps(cursor),
    )


def _mark_drafters_stale(context, endpoint: str, fingerprint: str | None = None, *, reason: str | None = None) -> None:
    """A drafter's acceptance was measured on the old model or traffic: mark it stale (retrain, not reuse)."""
    from specs.paths import memory_db_path
    from memory_db.store import MemoryStore

    stale = MemoryStore(memory_db_path()).mark_drafters_stale(endpoint, fingerprint, reason=reason)
    if stale:
        context.log.info(
            f"{endpoint}: {reason or 'model changed'}: {len(stale)} drafter(s) marked stale: {', '.join(stale)}"
        )


def build(
    endpoint: EndpointSpec, reread: Callable[[], EndpointSpec], job, partitions: dg.DynamicPartitionsDefinition
) -> list:
    """``reread`` reads the endpoint's defs.yaml afresh (an edited SLA or model counts without a reload)."""
    name = endpoint.name
    status = dg.DefaultSensorStatus.STOPPED  # an engineer turns drift detection on per endpoint

    @dg.sensor(
        name=f"{name}__traffic_drift",
        job=job,
        minimum_interval_seconds=600,
        default_status=status,
        description=f"Compares {name}'s traffic source with the profile its replay pool was built from; "
        "beyond the fidelity thresholds it starts one campaign.",
    )
    def traffic_drift(context: dg.SensorEvaluationContext):
        from autoresearch.workflows import production_profile_path
        from replay.fidelity import TrafficProfile
        from research.drift import traffic_drift as measure

        spec = reread()
        reference = production_profile_path(spec)
        if not reference.exists():
            return dg.SkipReason(f"no replay pool profile yet: materialize {name}/replay_pool first")
        drift = measure(spec, TrafficProfile.load(reference))
        cursor = json.loads(context.cursor or "{}")
        if not drift.drifted:
            return dg.SkipReason(f"traffic within thresholds: {drift.summary()}")
        if cursor.get("signature") == drift.source_signature:
            return dg.SkipReason(f"drift already started campaign {cursor.get('partition')}: {drift.summary()}")
        partition = "traffic-drift-" + hashlib.sha256(drift.source_signature.encode()).hexdigest()[:10]
        _mark_drafters_stale(context, name, reason=f"traffic drifted ({', '.join(drift.exceeded)})")
        context.log.info(f"{name}: traffic drifted ({', '.join(drift.exceeded)}): starting {partition}")
        return _start(
            partitions,
            partition,
            {"signature": drift.source_signature, "partition": partition},
            {
                TRIGGER_TAG: "traffic_drift",
                "autoresearch/exceeded": ",".join(drift.exceeded),
                "autoresearch/distances": json.dumps({k: round(v, 4) for k, v in drift.distances.items()}),
            },
        )

    def fingerprint_sensor(kind: str, fingerprint_of, describe: str):
        @dg.sensor(
            name=f"{name}__{kind}",
            job=job,
            minimum_interval_seconds=300,
            default_status=status,
            description=f"Starts one campaign when {name}'s {describe} changes.",
        )
        def watch(context: dg.SensorEvaluationContext):
            spec = reread()
            now = fingerprint_of(spec)
            cursor = json.loads(context.cursor or "{}")
            before = cursor.get("fingerprint")
            if before is None:
                context.update_cursor(json.dumps({"fingerprint": now}))
                return dg.SkipReason(f"recorded {describe} fingerprint {now}")
            if before == now:
                return dg.SkipReason(f"{describe} unchanged ({now})")
            partition = f"{kind.replace('_', '-')}-{now}"
            if kind == "model_drift":
                _mark_drafters_stale(context, spec.name, now)
            return _start(
                partitions,
                partition,
                {"fingerprint": now, "partition": partition},
                {TRIGGER_TAG: kind, "autoresearch/previous": before, "autoresearch/current": now},
            )

        return watch

    from research.drift import model_fingerprint, sla_fingerprint

    return [
        traffic_drift,
        fingerprint_sensor("model_drift", model_fingerprint, "model revision or checkpoint"),
        fingerprint_sensor("sla_change", sla_fingerprint, "latency SLA"),
    ]
