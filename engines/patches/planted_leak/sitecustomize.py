"""A planted memory leak that only sustained load reveals, for testing the soak (loadgen.soak).

Put this folder on the engine's PYTHONPATH and set AUTORESEARCH_PLANTED_LEAK_MB_PER_S:

    engine:
      env: {PYTHONPATH: engines/patches/planted_leak, AUTORESEARCH_PLANTED_LEAK_MB_PER_S: "8",
            AUTORESEARCH_PLANTED_LEAK_CEILING_MB: "160"}

Every engine step of vLLM's EngineCore keeps real, touched memory in proportion to the time it took
(MB per second of engine work), and frees none of it. When the leak passes its ceiling the step
raises ``MemoryError``, as an allocator out of memory would: the engine core dies with the error in
its log. Short sweep steps do little engine work and never reach the ceiling; a configuration held at
its capacity works without pause and does: the fault the H200 showed (an OOM after a minute of
sustained load). The ceiling keeps the host safe. Only the engine process it is given to is touched.
"""

import os
import sys
import time


def _apply() -> str:
    rate = float(os.environ.get("AUTORESEARCH_PLANTED_LEAK_MB_PER_S") or 0)
    ceiling = float(os.environ.get("AUTORESEARCH_PLANTED_LEAK_CEILING_MB") or 256)
    if rate <= 0:
        return ""
    try:
        from vllm.v1.engine import core
    except Exception:  # noqa: BLE001 - not a vLLM interpreter: nothing to leak
        return ""
    original = core.EngineCoreProc._process_engine_step
    leaked: list[bytearray] = []
    state = {"busy_s": 0.0, "bytes": 0}

    def leaking(self):
        began = time.perf_counter()
        executed = original(self)
        if executed:
            state["busy_s"] += time.perf_counter() - began
            due = int(state["busy_s"] * rate * 2**20) - state["bytes"]
            if due > 0:
                leaked.append(bytearray(b"\x01" * due))  # touched: resident, not just reserved
                state["bytes"] += due
            if state["bytes"] > ceiling * 2**20:
                raise MemoryError(
                    f"planted leak: out of memory after {state['bytes'] / 2**20:.0f} MiB "
                    f"leaked in {state['busy_s']:.1f} s of engine work"
                )
        return executed

    core.EngineCoreProc._process_engine_step = leaking
    return f"planted leak: {rate:g} MiB per second of engine work, failing past {ceiling:g} MiB"


try:
    _message = _apply()
    if _message:
        print(f"[autoresearch patch] {_message}", file=sys.stderr, flush=True)
except Exception as _exc:  # noqa: BLE001 - never stop an engine from starting
    print(f"[autoresearch patch] planted leak not applied: {_exc!r}", file=sys.stderr, flush=True)
