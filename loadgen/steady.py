"""Warm an engine until it is steady, not for a fixed count.

An engine that captures CUDA graphs lazily (one per new padded shape, ~0.2 s of stall each, on
`transformers serve`), compiles on first use or grows its allocator pools is slower in its first
minute than later: a fixed warm-up either wastes time or leaves the first sweep slower than the
second (4.69 vs 6.01 req/s on the H200, the same configuration). Here the engine gets bursts at a
rate near its capacity until a burst's median inter-token latency and median TTFT have stopped
falling: both within ``tolerance`` of the best seen so far, ``settle`` bursts in a row.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl
from pydantic import BaseModel, Field

from specs.config import EndpointSpec


class SteadyWarmup(BaseModel):
    """What the warm-up saw: per burst, the median ITL and TTFT (ms); whether it settled."""

    rate: float
    burst_s: float
    itl_p50_ms: list[float | None] = Field(default_factory=list)
    ttft_p50_ms: list[float | None] = Field(default_factory=list)
    steady: bool = False
    wall_s: float = 0.0
    tolerance: float = 0.05  # the rule it stopped on (warm_until_steady's), so describe() names the same
    settle: int = 2

    def describe(self) -> str:
        def ms(values: list[float | None]) -> str:
            return ", ".join("-" if v is None else f"{v:.0f}" for v in values)

        state = "steady"
        if not self.steady:  # name the latency that kept falling (a rising one is load, not warm-up)
            unsettled = [name for name, ok in self.settled().items() if not ok]
            state = f"{' and '.join(unsettled) or 'latency'} still falling at the last burst"
        return (
            f"{len(self.itl_p50_ms)} burst(s) of {self.burst_s:g} s at {self.rate:g} req/s, "
            f"ITL p50 {ms(self.itl_p50_ms)} ms, TTFT p50 {ms(self.ttft_p50_ms)} ms: {state}"
        )

    def settled(self) -> dict[str, bool]:
        """Per latency, whether it met the rule :func:`warm_until_steady` stops on."""
        return {
            "ITL": is_steady(self.itl_p50_ms, self.tolerance, self.settle),
            "TTFT": is_steady(self.ttft_p50_ms, 2 * self.tolerance, self.settle),
        }


def is_steady(values: list[float | None], tolerance: float, settle: int) -> bool:
    """The last ``settle`` values are each within ``tolerance`` of the best (lowest) seen before them."""
    seen = [v for v in values if v is not None]
    if len(seen) < settle + 1:
        return False
    for i in range(len(seen) - settle, len(seen)):
        best = min(seen[:i])
        if seen[i] < best * (1 - tolerance):
            return False
    return True


def warm_until_steady(
    engine,
    pool: pl.DataFrame,
    spec: EndpointSpec,
    rate: float,
    *,
    burst_s: float = 10.0,
    max_bursts: int = 8,
    tolerance: float = 0.05,
    settle: int = 2,
    progress: Callable[[str], None] | None = None,
) -> SteadyWarmup:
    """Bursts of ``burst_s`` at ``rate`` through the product's own sweep step until latency is steady
    (see :func:`is_steady`) or ``max_bursts`` have run. The bursts are not measurements: they only
    bring the engine to the state it serves production in."""
    import time

    from loadgen.sweep import run_sweep

    began = time.monotonic()
    result = SteadyWarmup(rate=rate, burst_s=burst_s, tolerance=tolerance, settle=settle)
    for i in range(max_bursts):
        sweep = run_sweep(
            engine,
            pool,
            spec,
            rates=[rate],
            max_steps=1,
            step_duration_s=burst_s,
            repeats_label=f"warm-up {i + 1}",
            check_client=False,
        )
        step = sweep.steps[0] if sweep.steps else None
        result.itl_p50_ms.append(step.itl_ms.p50 if step is not None else None)
        result.ttft_p50_ms.append(step.ttft_ms.p50 if step is not None else None)
        if progress:
            progress(
                f"  warm-up burst {i + 1}: ITL p50 {result.itl_p50_ms[-1]} ms, TTFT p50 {result.ttft_p50_ms[-1]} ms"
            )
        if all(result.settled().values()):
            result.steady = True
            break
    result.wall_s = round(time.monotonic() - began, 1)
    return result
