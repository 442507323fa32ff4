"""Watching the engine while load runs: /metrics samples and liveness, on a side thread.

The sampler scrapes ``engine.metrics()`` and calls ``engine.check_alive()`` every interval. A
crash (``EngineCrashed``, or repeated failed scrapes) is remembered as a reason that the runner
polls through ``stop_check``, so a dead server ends the step at once and invalidates it.

Where the engine runs on this host, the step also records how much CPU it got: the engine process group's
CPU seconds per wall second (``engine_cpu_util``) and the share of the host's CPU time its hypervisor gave
to other guests (``host_steal_fraction``). An engine that ran slower in one sweep than in the next, serving
the same requests, either had less CPU or a slower one: these say which.

Beside it, an ``engines.gpu.GpuSampler`` samples the engine's GPUs through NVML (utilisation,
memory, power) for the same interval; ``device_summary()`` is the step's ``device_metrics`` and
``device_note`` says why there are none (no NVML on this host, an engine on another host).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol
from urllib.parse import urlparse


class Engine(Protocol):
    """What loadgen needs from an engine (engines.RunningEngine satisfies it)."""

    base_url: str
    served_model: str

    def metrics(self) -> Any: ...

    def reset_prefix_cache(self) -> None: ...

    def check_alive(self) -> None: ...


GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage")
COUNTERS = (
    "preemptions_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "spec_decode_draft_tokens_total",
    "spec_decode_accepted_tokens_total",
)


def _crash_types() -> tuple[type, ...]:
    try:
        from engines.base import EngineCrashed

        return (EngineCrashed,)
    except ImportError:  # pragma: no cover
        return ()


def _gpu_sampler(engine: Engine, interval_s: float) -> tuple[Any | None, str | None]:
    """A GpuSampler for the GPUs the engine's process sees, or (None, why none): an engine this
    project did not start and that is not on this host uses no GPU we can read."""
    process = getattr(engine, "process", None)
    env = getattr(process, "env", None)
    if process is None and urlparse(engine.base_url).hostname not in ("127.0.0.1", "localhost", "::1"):
        return None, "no GPU telemetry: the engine is not on this host"
    try:
        from engines.gpu import GpuSampler, visible_devices
    except ImportError:  # pragma: no cover
        return None, "no GPU telemetry: engines.gpu is not importable"
    return GpuSampler(visible_devices(env), interval_s=interval_s), None


def _cpu_reading(engine: Engine) -> tuple[float, float | None, tuple[int, int] | None]:
    """(wall clock, the engine group's CPU seconds, the host's (stolen, total) ticks) now; None where unknown."""
    from engines.process import group_cpu_seconds, host_cpu_ticks

    process = getattr(engine, "process", None)
    pgid = getattr(process, "pgid", None) if process is not None else None
    try:
        engine_s = group_cpu_seconds(pgid) if isinstance(pgid, int) else None
    except (OSError, ValueError):
        engine_s = None
    return time.time(), engine_s, host_cpu_ticks()


class EngineWatch:
    """Context manager: samples metrics and liveness until exit; ``crash`` holds the reason if it died."""

    def __init__(
        self, engine: Engine, interval_s: float = 1.0, max_failed_scrapes: int = 3, gpu_interval_s: float = 0.25
    ):
        self.engine = engine
        self.gpu, self.device_note = _gpu_sampler(engine, gpu_interval_s)
        self.interval_s = interval_s
        self.max_failed = max_failed_scrapes
        self.samples: list[Any] = []
        self.crash: str | None = None
        self.t0 = time.time()
        self._cpu: list[tuple[float, float | None, tuple[int, int] | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine-watch", daemon=True)

    def stop_check(self) -> str | None:
        return self.crash

    def _loop(self) -> None:
        failed = 0
        crash_types = _crash_types()
        while not self._stop.is_set():
            try:
                self.engine.check_alive()
                self.samples.append(self.engine.metrics())
                failed = 0
            except crash_types as exc:  # type: ignore[misc]
                self.crash = f"engine crashed: {str(exc).splitlines()[0]}"
                return
            except Exception as exc:  # noqa: BLE001 - a scrape may fail under load; three in a row is a crash
                failed += 1
                if failed >= self.max_failed:
                    self.crash = (
                        f"engine not answering: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    )
                    return
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "EngineWatch":
        self.t0 = time.time()
        self._cpu = [_cpu_reading(self.engine)]
        if self.gpu is not None:
            self.gpu.start()
            self.device_note = self.gpu.note
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._cpu.append(_cpu_reading(self.engine))
        self._stop.set()
        if self.gpu is not None:
            self.gpu.stop()
            self.device_note = self.gpu.note
        self._thread.join(timeout=15)

    def device_summary(self) -> dict[str, float]:
        """The step's GPU telemetry (engines.gpu.summarize_ticks); {} where there is none (see device_note)."""
        return self.gpu.summary() if self.gpu is not None else {}

    def final_check(self) -> str | None:
        """One last liveness check after the load (a crash in the last interval must not slip through)."""
        if self.crash:
            return self.crash
        try:
            self.engine.check_alive()
        except _crash_types() as exc:  # type: ignore[misc]
            self.crash = f"engine crashed: {str(exc).splitlines()[0]}"
        except Exception:  # noqa: BLE001
            pass
        return self.crash

    def summary(self) -> tuple[dict[str, float], list[dict[str, float]]]:
        """(per-step aggregates, timeline of gauges). Means/max of gauges, deltas of counters, rates."""
        rows = []
        for snap in self.samples:
            row = {"t": round(snap.timestamp - self.t0, 3)}
            for name in GAUGES + COUNTERS:
                value = getattr(snap, name, None)
                if value is not None:
                    row[name] = float(value)
            rows.append(row)
        out: dict[str, float] = {"samples": float(len(rows))}
        for name in GAUGES:
            values = [r[name] for r in rows if name in r]
            if values:
                out[f"{name}_mean"] = sum(values) / len(values)
                out[f"{name}_max"] = max(values)
        for name in COUNTERS:
            values = [r[name] for r in rows if name in r]
            if len(values) >= 2:
                out[name.removesuffix("_total") + "_delta"] = values[-1] - values[0]
        q, h = out.get("prefix_cache_queries_delta"), out.get("prefix_cache_hits_delta")
        if q:
            out["prefix_cache_hit_rate"] = (h or 0.0) / q
        d, a = out.get("spec_decode_draft_tokens_delta"), out.get("spec_decode_accepted_tokens_delta")
        if d:
            out["spec_decode_acceptance_rate"] = (a or 0.0) / d
        timeline = [{k: v for k, v in r.items() if k == "t" or k in GAUGES} for r in rows]
        return out | self._cpu_summary(), timeline

    def _cpu_summary(self) -> dict[str, float]:
        """The engine's CPU seconds per wall second and the host's stolen share over the step (see module doc)."""
        readings = self._cpu
        if len(readings) < 2:
            return {}
        (t0, e0, h0), (t1, e1, h1) = readings[0], readings[-1]
        out = {}
        if e0 is not None and e1 is not None and t1 > t0 and e1 >= e0:
            out["engine_cpu_util"] = (e1 - e0) / (t1 - t0)
        if h0 is not None and h1 is not None and h1[1] > h0[1]:
            out["host_steal_fraction"] = (h1[0] - h0[0]) / (h1[1] - h0[1])
        return out
