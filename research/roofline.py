"""The memory-bandwidth roofline of a decode step: what an engine without metrics or a profiler
can still be judged against.

At batch ~1 a decode step must read every weight once, so it cannot take less than
``weight bytes / memory bandwidth``. A measured inter-token latency many times that bound is
time the device spends waiting: kernel launches, Python scheduling, input preparation. That is
evidence any engine gives, because it needs only client-side latencies, the model's files and
the hardware named in the YAML.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

#: peak HBM bandwidth (GB/s) of common serving GPUs, from the vendors' data sheets
KNOWN_BANDWIDTH_GBPS: dict[str, float] = {
    "H200": 4800.0,
    "H100": 3350.0,
    "H100-PCIE": 2000.0,
    "H800": 3350.0,
    "H20": 4000.0,
    "GH200": 4000.0,
    "B200": 8000.0,
    "B100": 8000.0,
    "A100": 2039.0,
    "A100-40GB": 1555.0,
    "A10G": 600.0,
    "A10": 600.0,
    "L40S": 864.0,
    "L40": 864.0,
    "L4": 300.0,
    "T4": 320.0,
    "V100": 900.0,
    "MI300X": 5300.0,
    "MI325X": 6000.0,
}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


@dataclass(frozen=True)
class Roofline:
    """The bandwidth bound of one decode step at batch 1."""

    weight_bytes: int
    bandwidth_gbps: float
    device: str
    source: str  # where the bandwidth came from (declared, data sheet, measured)

    @property
    def decode_step_ms(self) -> float:
        return self.weight_bytes / (self.bandwidth_gbps * 1e9) * 1000.0

    def describe(self) -> str:
        return (
            f"{self.weight_bytes / 1e9:.2f} GB of weights / {self.bandwidth_gbps:.0f} GB/s ({self.device}, "
            f"{self.source}) = {self.decode_step_ms:.3f} ms per decode step"
        )


def model_weight_bytes(model_dir: Path) -> int:
    """Bytes of weight files in a model folder (what a decode step reads at least once)."""
    return sum(p.stat().st_size for p in Path(model_dir).rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


@functools.lru_cache(maxsize=1)
def host_bandwidth_gbps(size_mb: int = 128, repeats: int = 5) -> float:
    """This host's memory bandwidth, measured once: the best of a few large array copies (read + write)."""
    import numpy as np

    src = np.ones(size_mb * 2**20 // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best / 1e9


def bandwidth_for(gpu_type: str, declared_gbps: float | None = None) -> tuple[float, str] | None:
    """(GB/s, source) for the hardware in the YAML: declared, else the data sheet, else measured (CPU)."""
    if declared_gbps:
        return declared_gbps, "declared in hardware.memory_bandwidth_gbps"
    if gpu_type.lower() == "cpu":
        return host_bandwidth_gbps(), "measured on this host"
    key = gpu_type.upper().replace("NVIDIA ", "").replace(" ", "-")
    for name in (key, key.split("-")[0]):
        if name in KNOWN_BANDWIDTH_GBPS:
            return KNOWN_BANDWIDTH_GBPS[name], "data sheet"
    return None


def roofline_for(
    model_dir: Path, gpu_type: str, gpu_count: int = 1, declared_gbps: float | None = None
) -> Roofline | None:
    """The roofline of a model on the declared hardware; None when the weights or the bandwidth are unknown.

    With several GPUs the weights are split across them (tensor parallel), so the bound divides."""
    weights = model_weight_bytes(model_dir)
    found = bandwidth_for(gpu_type, declared_gbps)
    if not weights or found is None:
        return None
    bandwidth, source = found
    return Roofline(weight_bytes=weights, bandwidth_gbps=bandwidth * max(gpu_count, 1), device=gpu_type, source=source)
