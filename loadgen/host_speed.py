"""How fast the host's memory is right now: a covariate for engines that compute on the host CPU.

On a shared 2-core VM the vLLM CPU engine's service rate drifts with the host by several percent over a
minute, for the same requests at the same CPU share (benchmarks/results/host_speed/): its neighbours
take memory bandwidth the hypervisor does not report as steal. The time one core takes to read a
buffer larger than the caches follows that drift: on prefix caching (decode-bound) the engine's rate
followed it with an exponent of about -1, while the prefill-bound reference did not follow it at all
(benchmarks/results/host_elasticity/). So a step records that time with the engine idle before it and
before the next step (a reading during the step would also hear the engine's own traffic, which a
candidate changes), and service rates are compared at a common host speed with each configuration's own
exponent (:mod:`loadgen.host_elasticity`).
"""

from __future__ import annotations

import time

import numpy as np

#: Larger than any L3 cache of the machines this runs on, so each pass reads memory.
BUFFER_BYTES = 32 * 2**20
_buffer: np.ndarray | None = None


def memory_pass_s(seconds: float = 1.0) -> float | None:
    """Median thread-CPU seconds of one pass over :data:`BUFFER_BYTES`, over passes for ``seconds``.
    Thread CPU time, not wall time: a pass the scheduler pauses is not counted as slow memory. None when
    the clock cannot resolve a pass (a pass must take at least 10 clock ticks)."""
    global _buffer
    if _buffer is None:
        _buffer = np.ones(BUFFER_BYTES // 8)
    passes = []
    end = time.monotonic() + seconds
    while time.monotonic() < end or len(passes) < 5:
        began = time.thread_time()
        _buffer.sum()
        passes.append(time.thread_time() - began)
    resolution = time.get_clock_info("thread_time").resolution
    median = float(np.median(passes))
    return median if median >= 10 * resolution else None
