"""GPU telemetry through NVML (the ``nvidia-ml-py`` package, ``import pynvml``); no Dagster imports.

Two uses:

* :class:`GpuSampler` runs beside a sweep step (``loadgen.watch.EngineWatch`` starts and stops it)
  and samples, a few times a second, utilisation, memory used and power of the GPUs the engine
  uses (``CUDA_VISIBLE_DEVICES`` of the engine's environment when set, otherwise every GPU).
  :func:`summarize_ticks` turns the samples into one step's ``device_metrics``:
  ``gpu_util_mean``/``gpu_util_max`` (%), ``mem_bw_util_mean`` (% of time the memory controller
  was busy), ``memory_used_max_bytes`` (summed over the GPUs), ``power_mean_w`` and ``energy_j``
  (the time integral of power, trapezoidal, summed over the GPUs), plus ``energy_counter_j`` from
  the driver's own energy counter where the GPU has one.
* :func:`memory_used` and :func:`wait_memory_released` let ``engines.process.ManagedProcess.stop``
  check that the memory an engine held is given back after its processes end.

Where there is no NVML (no NVIDIA driver, or the package is missing) everything says so in a
``note`` and returns no numbers: never a made-up zero.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

RELEASE_TOLERANCE_BYTES = 512 * 2**20  # per GPU: what may stay above the pre-start level and still count as released


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment. ``None`` where the GPU does not report a quantity."""

    gpu: int  # NVML index
    util_pct: float | None = None
    mem_util_pct: float | None = None
    memory_used_bytes: int | None = None
    power_w: float | None = None


@dataclass(frozen=True)
class GpuTick:
    """The readings of every sampled GPU at one time ``t`` (seconds, any monotonic origin)."""

    t: float
    readings: tuple[GpuReading, ...]


# -- NVML access ------------------------------------------------------------------------------


def _open_nvml() -> tuple[Any | None, str | None]:
    """(pynvml, None) with NVML initialised (the caller must nvmlShutdown), or (None, why not)."""
    try:
        import pynvml
    except ImportError:
        return None, "no GPU telemetry: the nvidia-ml-py package (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"no GPU telemetry: no NVML on this host ({exc})"
    except OSError as exc:  # pragma: no cover - a broken driver installation
        return None, f"no GPU telemetry: NVML could not be loaded ({exc})"
    return pynvml, None


def _close_nvml(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - shutting down must never fail a caller
        pass


def visible_devices(env: Mapping[str, str] | None = None) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` of ``env`` (the engine's environment), else of this process; None = unset."""
    source = os.environ if env is None else env
    return source.get("CUDA_VISIBLE_DEVICES")


def _resolve(nvml: Any, visible: str | None) -> tuple[list[tuple[int, Any]], str | None]:
    """[(NVML index, handle)] of the GPUs ``visible`` (CUDA_VISIBLE_DEVICES syntax) names, and a note
    for what could not be resolved. Integer tokens are taken as NVML indices (CUDA's own order matches
    when CUDA_DEVICE_ORDER=PCI_BUS_ID or the GPUs are alike); ``GPU-...`` tokens are UUIDs (prefixes allowed)."""
    count = nvml.nvmlDeviceGetCount()
    all_handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    if visible is None:
        return all_handles, None if count else "no GPU telemetry: NVML sees no GPU"
    tokens = [t.strip() for t in visible.split(",") if t.strip()]
    if not tokens or tokens[0] in ("-1", "none", "NoDevFiles"):
        return [], f"no GPU telemetry: CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    chosen: list[tuple[int, Any]] = []
    for token in tokens:
        if token.isdigit():
            index = int(token)
            if index >= count:
                break  # CUDA stops enumerating at the first invalid entry
            chosen.append(all_handles[index])
        elif token.startswith("GPU-"):
            match = []
            for i, handle in all_handles:
                uuid = nvml.nvmlDeviceGetUUID(handle)
                uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
                if uuid.startswith(token):
                    match.append((i, handle))
            if len(match) != 1:
                break
            chosen.append(match[0])
        else:  # MIG-... instances: NVML gives no utilisation for them
            return chosen, f"no GPU telemetry for CUDA_VISIBLE_DEVICES entry {token!r} (MIG or unknown form)"
    if not chosen:
        return [], f"no GPU telemetry: CUDA_VISIBLE_DEVICES={visible!r} names no GPU NVML knows"
    return chosen, None


def _read(nvml: Any, index: int, handle: Any) -> GpuReading:
    def attempt(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except nvml.NVMLError:  # NotSupported on this GPU, or a transient failure: no number
            return None

    util = attempt(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    memory = attempt(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    power_mw = attempt(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    return GpuReading(
        gpu=index,
        util_pct=float(util.gpu) if util is not None else None,
        mem_util_pct=float(util.memory) if util is not None else None,
        memory_used_bytes=int(memory.used) if memory is not None else None,
        power_w=power_mw / 1000.0 if power_mw is not None else None,
    )


def _energy_counters_mj(nvml: Any, handles: Iterable[tuple[int, Any]]) -> dict[int, int]:
    out = {}
    for index, handle in handles:
        try:
            out[index] = int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except nvml.NVMLError:
            continue
    return out


# -- the per-step summary (pure) ---------------------------------------------------------------


def _trapezoid(points: list[tuple[float, float]]) -> float:
    return sum((t1 - t0) * (v0 + v1) / 2.0 for (t0, v0), (t1, v1) in zip(points, points[1:]))


def summarize_ticks(ticks: list[GpuTick], energy_counter_j: float | None = None) -> dict[str, float]:
    """One step's device metrics from its samples; only quantities that were actually read appear.

    ``gpu_util_mean``/``_max`` and ``mem_bw_util_mean``/``_max`` are over every reading of every GPU;
    ``memory_used_max_bytes`` is the largest sum over the GPUs at one tick; ``energy_j`` is the
    trapezoidal integral of power over time, per GPU, summed (needs two power readings of a GPU);
    ``power_mean_w`` is ``energy_j / duration`` (time-weighted), or the plain mean with one reading."""
    ticks = sorted(ticks, key=lambda k: k.t)
    out: dict[str, float] = {"samples": float(len(ticks))}
    if not ticks:
        return out
    readings = [r for k in ticks for r in k.readings]
    gpus = sorted({r.gpu for r in readings})
    out["gpus"] = float(len(gpus))
    out["duration_s"] = ticks[-1].t - ticks[0].t
    for key, attr in (("gpu_util", "util_pct"), ("mem_bw_util", "mem_util_pct")):
        values = [getattr(r, attr) for r in readings if getattr(r, attr) is not None]
        if values:
            out[f"{key}_mean"] = sum(values) / len(values)
            out[f"{key}_max"] = max(values)
    totals = []
    for k in ticks:
        used = [r.memory_used_bytes for r in k.readings if r.memory_used_bytes is not None]
        if used and len(used) == len(k.readings):
            totals.append(sum(used))
    if totals:
        out["memory_used_max_bytes"] = float(max(totals))
    energy, mean_power, spans = 0.0, 0.0, []
    for gpu in gpus:
        series = [(k.t, r.power_w) for k in ticks for r in k.readings if r.gpu == gpu and r.power_w is not None]
        if not series:
            continue
        if len(series) == 1:
            mean_power += series[0][1]
            spans.append(0.0)
            continue
        span = series[-1][0] - series[0][0]
        e = _trapezoid(series)
        energy += e
        mean_power += e / span if span > 0 else sum(v for _, v in series) / len(series)
        spans.append(span)
    if spans:
        out["power_mean_w"] = mean_power
        if all(s > 0 for s in spans):
            out["energy_j"] = energy
    if energy_counter_j is not None:
        out["energy_counter_j"] = float(energy_counter_j)
    return out


# -- the sampler -------------------------------------------------------------------------------


class GpuSampler:
    """Context manager: samples the GPUs ``visible`` names every ``interval_s`` on a daemon thread.

    ``available`` is False (and ``note`` says why) where there is no NVML or no GPU to sample;
    ``summary()`` is then ``{}``. Otherwise ``summary()`` gives :func:`summarize_ticks` of the ticks."""

    def __init__(self, visible: str | None = None, interval_s: float = 0.25):
        self.visible = visible
        self.interval_s = interval_s
        self.ticks: list[GpuTick] = []
        self.available = False
        self.note: str | None = None
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        self._energy0: dict[int, int] = {}
        self._energy1: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _tick(self) -> None:
        t = time.monotonic()
        self.ticks.append(GpuTick(t, tuple(_read(self._nvml, i, h) for i, h in self._handles)))

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as exc:  # noqa: BLE001 - telemetry must never fail a measurement
                self.note = f"GPU telemetry stopped early: {type(exc).__name__}: {exc}"
                return
            self._stop.wait(self.interval_s)

    def start(self) -> "GpuSampler":
        self._nvml, self.note = _open_nvml()
        if self._nvml is None:
            return self
        try:
            self._handles, self.note = _resolve(self._nvml, self.visible)
        except self._nvml.NVMLError as exc:
            self._handles, self.note = [], f"no GPU telemetry: NVML could not list the GPUs ({exc})"
        if not self._handles:
            _close_nvml(self._nvml)
            self._nvml = None
            return self
        self.available = True
        self._energy0 = _energy_counters_mj(self._nvml, self._handles)
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._nvml is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._tick()  # the step's end, so the integral covers the whole step
        except Exception:  # noqa: BLE001
            pass
        self._energy1 = _energy_counters_mj(self._nvml, self._handles)
        _close_nvml(self._nvml)
        self._nvml = None

    def __enter__(self) -> "GpuSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def energy_counter_j(self) -> float | None:
        """Energy by the driver's counters over the sampled interval (None unless every GPU has one)."""
        gpus = [i for i, _ in self._handles]
        if not gpus or not all(i in self._energy0 and i in self._energy1 for i in gpus):
            return None
        return sum(self._energy1[i] - self._energy0[i] for i in gpus) / 1000.0

    def summary(self) -> dict[str, float]:
        if not self.available:
            return {}
        return summarize_ticks(self.ticks, self.energy_counter_j())


# -- memory release after an engine stops ------------------------------------------------------


def memory_used(visible: str | None = None) -> tuple[dict[int, int] | None, str | None]:
    """({NVML index: bytes used}, None) for the GPUs ``visible`` names, or (None, why there are no numbers)."""
    nvml, note = _open_nvml()
    if nvml is None:
        return None, note
    try:
        handles, note = _resolve(nvml, visible)
        if not handles:
            return None, note
        return {i: int(nvml.nvmlDeviceGetMemoryInfo(h).used) for i, h in handles}, note
    except nvml.NVMLError as exc:
        return None, f"no GPU memory reading: {exc}"
    finally:
        _close_nvml(nvml)


def compute_process_count(visible: str | None = None) -> dict[int, int]:
    """{NVML index: number of compute processes NVML lists} (empty without NVML). In a container
    NVML often lists none even when memory is held: the host's PIDs are not visible."""
    nvml, _ = _open_nvml()
    if nvml is None:
        return {}
    try:
        handles, _ = _resolve(nvml, visible)
        out = {}
        for i, h in handles:
            try:
                out[i] = len(nvml.nvmlDeviceGetComputeRunningProcesses(h))
            except nvml.NVMLError:
                continue
        return out
    except nvml.NVMLError:
        return {}
    finally:
        _close_nvml(nvml)


@dataclass
class GpuReleaseCheck:
    """Whether the GPU memory an engine held was given back after its processes ended.

    status: ``released``; ``leak`` (still above the level before the engine started, by more than
    the tolerance, after ``waited_s``); ``no-nvml`` (nothing could be checked: ``note`` says why)."""

    status: str
    note: str = ""
    waited_s: float = 0.0
    held_bytes: dict[int, int] = field(default_factory=dict)  # per GPU: used before stop minus used before start
    excess_bytes: dict[int, int] = field(default_factory=dict)  # per GPU: still above the pre-start level at the end
    at_start_bytes: dict[int, int] = field(default_factory=dict)
    after_bytes: dict[int, int] = field(default_factory=dict)

    @property
    def leak(self) -> bool:
        return self.status == "leak"

    def as_dict(self) -> dict[str, Any]:
        return {
            k: ({str(i): v for i, v in val.items()} if isinstance(val, dict) else val)
            for k, val in asdict(self).items()
        }


def excess_over_start(
    at_start: Mapping[int, int], now: Mapping[int, int], tolerance_bytes: int = RELEASE_TOLERANCE_BYTES
) -> dict[int, int]:
    """Per GPU, bytes still in use above the pre-start level where that is more than ``tolerance_bytes``
    (a GPU that disappeared from ``now`` is not judged)."""
    return {i: now[i] - at_start[i] for i in at_start if i in now and now[i] - at_start[i] > tolerance_bytes}


def wait_memory_released(
    at_start: Mapping[int, int],
    read: Callable[[], Mapping[int, int] | None],
    before_stop: Mapping[int, int] | None = None,
    timeout_s: float = 5.0,
    poll_s: float = 0.1,
    tolerance_bytes: int = RELEASE_TOLERANCE_BYTES,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> GpuReleaseCheck:
    """Poll ``read()`` until every GPU is back within ``tolerance_bytes`` of ``at_start`` (the driver
    frees a dead process's memory with a short delay: 125-133 GB read back as 0 within 1 s on an
    H200) or ``timeout_s`` passes; then judge. Another process that took memory on the same GPU
    meanwhile counts too: the leak note says how much, per GPU, so a person can tell."""
    held = {i: before_stop[i] - at_start[i] for i in at_start if before_stop and i in before_stop}
    start = clock()
    now: Mapping[int, int] = {}
    while True:
        reading = read()
        if reading is None:
            return GpuReleaseCheck(
                "no-nvml", "GPU memory could not be read after the stop", clock() - start, held, {}, dict(at_start), {}
            )
        now = reading
        excess = excess_over_start(at_start, now, tolerance_bytes)
        waited = clock() - start
        if not excess:
            return GpuReleaseCheck(
                "released",
                f"GPU memory back to its pre-start level after {waited:.1f}s",
                waited,
                held,
                {},
                dict(at_start),
                dict(now),
            )
        if waited >= timeout_s:
            parts = ", ".join(f"GPU {i}: {v / 2**30:.2f} GiB above the level before start" for i, v in excess.items())
            return GpuReleaseCheck(
                "leak",
                f"GPU memory not released {waited:.1f}s after the engine's processes ended ({parts})",
                waited,
                held,
                excess,
                dict(at_start),
                dict(now),
            )
        sleep(poll_s)
