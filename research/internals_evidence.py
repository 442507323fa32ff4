"""What an engine's internals say: lazy graph-capture stalls, padding waste, memory pressure.

The evidence comes from the adapter's evidence overlay (``SweepResult.engine_internals``, cumulative
since the engine started). Diagnosis turns it into bottlenecks with the numbers that point to them;
the review shows the same numbers per configuration (:func:`summary`). Anything the overlay did not
measure stays out: no bottleneck is ever named from a missing figure.
"""

from __future__ import annotations

from research.proposals import Bottleneck

#: captures after this share of the engine's uptime are "late": a warm engine still capturing
LATE_SHARE = 0.3
#: a stall share of uptime above this is a bottleneck (each capture stalls every running request)
STALL_SHARE = 0.01
#: padded KV over real KV read above this ratio: most attention work is padding
KV_PADDING_RATIO = 2.0
#: peak allocated over total device memory above this: little headroom under sustained load
MEMORY_SHARE = 0.93


def latest(sweeps) -> dict | None:
    """What the evidence overlay wrote in the last sweep that has it (its figures are cumulative)."""
    return next((s.engine_internals for s in reversed(list(sweeps)) if s.engine_internals), None)


def bottlenecks(internals: dict | None) -> list[Bottleneck]:
    """Bottlenecks the internals point to, with their evidence (empty when there is none or no data)."""
    if not internals:
        return []
    out: list[Bottleneck] = []
    uptime = float(internals.get("uptime_s") or 0.0)
    captures = internals.get("captures") or {}
    n, stall = int(captures.get("n") or 0), float(captures.get("stall_s") or 0.0)
    if n and uptime > 0:
        late = [t for t in captures.get("at_s") or [] if t > LATE_SHARE * uptime]
        share = stall / uptime
        if late and share >= STALL_SHARE:
            out.append(
                Bottleneck(
                    name="graph_capture_stalls",
                    severity=round(min(1.0, 5 * share + len(late) / max(n, 1) / 2), 3),
                    evidence=[
                        f"{n} CUDA-graph captures, {stall:.1f} s of stalls ({share:.1%} of {uptime:.0f} s uptime)",
                        f"{len(late)} captures after the first {LATE_SHARE:.0%} of the uptime: the engine was still "
                        "capturing while serving",
                    ],
                )
            )
    shapes = internals.get("padded_shapes") or {}
    ratio = shapes.get("kv_padding_ratio")
    if ratio is not None and ratio >= KV_PADDING_RATIO:
        out.append(
            Bottleneck(
                name="padding_waste",
                severity=round(min(1.0, (ratio - 1) / 8), 3),
                evidence=[
                    f"padded KV read {ratio:.1f}x the real KV ({shapes.get('distinct')} distinct padded shapes, "
                    f"largest KV {shapes.get('max_kv')})"
                ],
            )
        )
    memory = internals.get("memory") or {}
    peak, total = memory.get("peak_allocated_gib"), memory.get("total_gib")
    if peak and total and peak / total >= MEMORY_SHARE:
        out.append(
            Bottleneck(
                name="memory_headroom",
                severity=round(min(1.0, (peak / total - MEMORY_SHARE) * 10 + 0.3), 3),
                evidence=[f"peak allocated {peak:.1f} of {total:.1f} GiB ({peak / total:.0%}) of device memory"],
            )
        )
    return out


def oom_bottleneck(reason: str | None) -> Bottleneck | None:
    """A configuration that died of OOM under sustained load: a memory-headroom finding."""
    if not reason or "out of memory" not in reason.lower() and "outofmemory" not in reason.lower():
        return None
    return Bottleneck(
        name="memory_headroom",
        severity=1.0,  # an outage in production outranks every slowness
        evidence=[f"it ran out of device memory under sustained load: {reason.splitlines()[0][:200]}"],
    )


def summary(internals: dict | None) -> str:
    """One line for the review: the step-time breakdown, captures and stalls, padding, memory."""
    if not internals:
        return "unmeasured (the engine exports no internals)"
    parts = []
    steps = internals.get("steps") or {}
    for phase in ("prepare", "generate", "update"):
        slot = steps.get(phase)
        if slot and slot.get("n"):
            parts.append(f"{phase} {1000 * slot['total_s'] / slot['n']:.1f} ms/step")
    captures = internals.get("captures") or {}
    if captures:
        parts.append(f"{captures.get('n', 0)} graph captures, {float(captures.get('stall_s') or 0):.1f} s stalled")
    shapes = internals.get("padded_shapes") or {}
    if shapes.get("kv_padding_ratio") is not None:
        parts.append(f"KV padding x{shapes['kv_padding_ratio']:.1f} over {shapes.get('distinct')} shapes")
    memory = internals.get("memory") or {}
    if memory.get("peak_allocated_gib") is not None:
        parts.append(f"peak {memory['peak_allocated_gib']:.1f} GiB")
    return "; ".join(parts) or "no steps counted"
