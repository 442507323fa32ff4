"""GPU leases: which GPUs of this host an engine may use, so that two engines never share one.

One lock file per GPU in a shared folder (``specs.paths.gpu_lock_dir``), held with
``flock``: a lease is an open file whose lock is exclusive. Why flock: the kernel drops the lock
when the last descriptor closes, so a killed campaign never leaves a GPU "taken", and the lock is
per open file, so threads of one process (a campaign running experiments in parallel) exclude each
other as two processes do. ``start_engine`` hands the descriptors to the engine process: the GPU
stays leased while the engine lives, even if the process that started it dies first.

The host's GPUs: ``AUTORESEARCH_GPUS`` ("0,1"; empty = none) when set, else this process's
``CUDA_VISIBLE_DEVICES``, else every GPU NVML sees. A host without GPUs gives no lease (None):
engines start as before. No Dagster imports.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

from engines.base import EngineError


class GpuUnavailable(EngineError):
    """Not enough free GPUs on this host within the wait (or ever, when the host has too few)."""


def host_gpus() -> list[str]:
    """The GPU ids engines on this host may be given (CUDA_VISIBLE_DEVICES values)."""
    for name in ("AUTORESEARCH_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(name)
        if value is not None and (value.strip() or name == "AUTORESEARCH_GPUS"):
            return [d.strip() for d in value.split(",") if d.strip()]
    from engines.gpu import _close_nvml, _open_nvml

    nvml, _ = _open_nvml()
    if nvml is None:
        return []
    try:
        return [str(i) for i in range(nvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 - a driver that answers oddly means "no GPUs we can lease"
        return []
    finally:
        _close_nvml(nvml)


class GpuLease:
    """GPUs held by one engine. ``env`` pins the engine to them; ``release`` (or the end of a ``with``
    block) frees them, unless a child process still holds the inherited descriptors."""

    def __init__(self, devices: Sequence[str], files: Sequence):
        self.devices = tuple(devices)
        self._files = list(files)

    @property
    def env(self) -> dict[str, str]:
        # The ids are NVML's (PCI bus order); CUDA's own default order is fastest first, which on a host of
        # unlike GPUs names another device by the same index: pin CUDA to NVML's order.
        return {"CUDA_VISIBLE_DEVICES": ",".join(self.devices), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    @property
    def fds(self) -> tuple[int, ...]:
        """Descriptors to pass to the engine process (subprocess ``pass_fds``)."""
        return tuple(f.fileno() for f in self._files if not f.closed)

    def release(self) -> None:
        for f in self._files:
            f.close()  # closing the descriptor drops this process's hold on the flock
        self._files = []

    def __enter__(self) -> "GpuLease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"GpuLease({','.join(self.devices)})"


def _lock_name(device: str) -> str:
    return "gpu-" + re.sub(r"[^A-Za-z0-9._-]", "_", device) + ".lock"


def _try(devices: list[str], count: int, lock_dir: Path) -> GpuLease | None:
    taken = []
    for device in devices:
        handle = open(lock_dir / _lock_name(device), "a+")  # noqa: SIM115 - held for the lease's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")  # for people, not locks
        handle.flush()
        taken.append((device, handle))
        if len(taken) == count:
            return GpuLease([d for d, _ in taken], [h for _, h in taken])
    for _, handle in taken:
        handle.close()
    return None


def acquire(
    count: int,
    *,
    lock_dir: Path | None = None,
    devices: Sequence[str] | None = None,
    wait_s: float | None = None,
    poll_s: float = 0.5,
) -> GpuLease | None:
    """Lease ``count`` free GPUs of this host, waiting up to ``wait_s`` (None = until some are free).

    Returns None when there is nothing to lease (``count`` 0, or a host without GPUs). Raises
    GpuUnavailable when the host has fewer GPUs than ``count`` or the wait runs out."""
    if count <= 0:
        return None
    devices = list(devices) if devices is not None else host_gpus()
    if not devices:
        return None
    if count > len(devices):
        raise GpuUnavailable(f"an engine needs {count} GPU(s); this host has {len(devices)} ({','.join(devices)})")
    if lock_dir is None:
        from specs.paths import gpu_lock_dir

        lock_dir = gpu_lock_dir()
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = None if wait_s is None else time.monotonic() + wait_s
    while True:
        lease = _try(devices, count, lock_dir)
        if lease is not None:
            return lease
        if deadline is not None and time.monotonic() >= deadline:
            raise GpuUnavailable(
                f"no {count} free GPU(s) of {','.join(devices)} within {wait_s:g} s (leases in {lock_dir})"
            )
        time.sleep(poll_s)
