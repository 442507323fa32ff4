"""A planted slowdown of known size, for measuring the harness itself (benchmarks/harness_power.py).

Put this folder on the engine's PYTHONPATH and set AUTORESEARCH_PLANTED_SLOWDOWN to a fraction:

    engine:
      env: {PYTHONPATH: engines/patches/planted_slowdown, AUTORESEARCH_PLANTED_SLOWDOWN: "0.2"}

Every engine step is followed by a sleep of that fraction of its own duration, so each step takes
(1 + fraction) times as long: a slower engine of the same shape, whose capacity change the power
benchmark measures. The step is vLLM's ``EngineCoreProc._process_engine_step`` (schedule + execute
+ output) or, for ``transformers serve``, one pass of the continuous-batching loop that ran a batch
(``ContinuousBatchingManager._generation_loop_body``: prepare, forward, sampling, update). Only the
engine process it is given to is touched; the installed engine is not.

Another ``sitecustomize`` later on the path (an overlay of settings, the carried site-packages) still
runs: Python imports only the first one it finds, so this one hands on to the next.
"""

import os
import sys
import time


def _slow_vllm(fraction: float) -> str:
    from vllm.v1.engine import core

    original = core.EngineCoreProc._process_engine_step

    def slowed(self):
        began = time.perf_counter()
        executed = original(self)
        if executed:
            time.sleep(fraction * (time.perf_counter() - began))
        return executed

    core.EngineCoreProc._process_engine_step = slowed
    return f"planted slowdown: every vLLM engine step takes {1 + fraction:.3f}x as long"


def _slow_transformers(fraction: float) -> str:
    from transformers.generation.continuous_batching import continuous_api

    manager = continuous_api.ContinuousBatchingManager
    if hasattr(manager, "_generation_loop_body"):  # 5.19: prepare + forward + sampling + update
        original = manager._generation_loop_body

        def slowed(self, batch_processor, bootstrapping):
            before = getattr(self, "current_batch", None)
            began = time.perf_counter()
            keep_going = original(self, batch_processor, bootstrapping)
            if getattr(self, "current_batch", None) != before:  # a batch ran (not an idle wait)
                time.sleep(fraction * (time.perf_counter() - began))
            return keep_going

        manager._generation_loop_body = slowed
        where = "_generation_loop_body"
    else:  # older releases: the forward pass and sampling of one batch
        original = manager._generation_step

        def slowed(self, *args, **kwargs):
            began = time.perf_counter()
            result = original(self, *args, **kwargs)
            time.sleep(fraction * (time.perf_counter() - began))
            return result

        manager._generation_step = slowed
        where = "_generation_step"
    return f"planted slowdown: every transformers batch step ({where}) takes {1 + fraction:.3f}x as long"


def _apply() -> str:
    fraction = float(os.environ.get("AUTORESEARCH_PLANTED_SLOWDOWN") or 0)
    if fraction <= 0:
        return ""
    argv = " ".join(getattr(sys, "orig_argv", sys.argv)[:4])  # orig_argv keeps the ``-m`` module's name
    if "transformers" in argv:
        return _slow_transformers(fraction)
    try:  # vLLM's engine core may run in a spawned process whose command line does not name vLLM
        return _slow_vllm(fraction)
    except ImportError:
        return ""


def _chain() -> None:
    """Run the next sitecustomize on the path (Python stops at the first)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or "."), "sitecustomize.py")
        if os.path.dirname(candidate) != here and os.path.isfile(candidate):
            exec(
                compile(open(candidate).read(), candidate, "exec"),
                {"__name__": "sitecustomize_next", "__file__": candidate},
            )
            return


try:
    _message = _apply()
    if _message:
        print(f"[autoresearch patch] {_message}", file=sys.stderr, flush=True)
except Exception as _exc:  # noqa: BLE001 - never stop an engine from starting
    print(f"[autoresearch patch] planted slowdown not applied: {_exc!r}", file=sys.stderr, flush=True)
if __name__ == "sitecustomize":  # on the path by itself; the overlay loader chains on its own
    _chain()
