"""Dagster concurrency pools from the YAML: which pool each endpoint's engine-starting assets take,
and the instance limits that enforce the GPU cap (``autoresearch pools apply``).

Scheme (docs/architecture.md, "The GPU cap"):

* an endpoint on GPUs (``hardware.gpu_count`` >= 1) has its own pool ``gpu_<endpoint>``, limit
  ``max_concurrent_gpus // gpu_count`` (at least 1) of the endpoint's campaign: one slot is one
  engine, so the endpoint never holds more GPUs than its campaign's cap;
* endpoints on the CPU (``gpu_count`` 0) share one pool ``cpu``, limit 1: an engine and its load
  generator share the host's cores, so a second engine would spoil both measurements.

Which physical GPUs an engine gets is not Dagster's business: ``engines.gpu_lease`` gives every
engine GPUs no other engine on the host holds (so two endpoints never share a GPU either).

Dagster keeps pool limits on the instance, not in code: a pool without a limit is unlimited
(unless dagster.yaml sets ``concurrency: pools: default_limit``). :func:`apply_limits` writes them;
it is run by ``autoresearch pools apply`` and by ``scripts/dev.sh`` before the UI starts.
"""

from __future__ import annotations

from specs.config import DefinitionSet, EndpointSpec

CPU_POOL = "cpu"


def pool_for(endpoint: EndpointSpec) -> str:
    """The concurrency pool of every asset of ``endpoint`` that starts an engine."""
    return f"gpu_{endpoint.name}" if endpoint.hardware.gpu_count > 0 else CPU_POOL


def pool_limits(definitions: DefinitionSet) -> dict[str, int]:
    """{pool: how many of its assets may run at once}, derived from the YAML."""
    limits: dict[str, int] = {}
    for endpoint in definitions.endpoints.values():
        pool = pool_for(endpoint)
        limits[pool] = 1 if pool == CPU_POOL else definitions.campaign_of(endpoint.name).concurrent_engines(endpoint)
    return dict(sorted(limits.items()))


def apply_limits(instance, limits: dict[str, int]) -> list[tuple[str, int | None, int]]:
    """Set each pool's limit on the Dagster ``instance``; returns (pool, limit before, limit now).

    Pools of endpoints no longer declared are left alone (a person may have set them)."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        raise RuntimeError(
            "this Dagster instance's storage keeps no concurrency limits (an in-memory instance?); "
            "set DAGSTER_HOME to a folder with a dagster.yaml"
        )
    changes = []
    for pool, limit in limits.items():
        before = storage.get_concurrency_info(pool).slot_count if pool in storage.get_concurrency_keys() else None
        if before != limit:
            storage.set_concurrency_slots(pool, limit)
        changes.append((pool, before, limit))
    return changes
