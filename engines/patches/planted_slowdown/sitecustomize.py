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

On a GPU with async scheduling a sleep in the engine loop hides behind the batch already queued, so
``AUTORESEARCH_PLANTED_SLOWDOWN_ON=gpu_stream`` slows the GPU itself instead: after every forward pass of
vLLM's ``GPUModelRunner.execute_model`` a spin kernel (``torch.cuda._sleep``) of that fraction of the pass's
own GPU time (CUDA events, no synchronisation) is queued on the same stream. With
``AUTORESEARCH_PLANTED_SLOWDOWN_FILE`` the fraction is read from that file (checked once a second), so one
running engine can be the A/A partner first and the slowed candidate after (benchmarks/gpu_vllm.py).

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


class _Fraction:
    """The planted fraction: the environment's, or the file's when one is named (re-read once a second)."""

    def __init__(self) -> None:
        self.path = os.environ.get("AUTORESEARCH_PLANTED_SLOWDOWN_FILE")
        self.value = float(os.environ.get("AUTORESEARCH_PLANTED_SLOWDOWN") or 0)
        self.checked = 0.0

    def __call__(self) -> float:
        now = time.monotonic()
        if self.path and now - self.checked > 1.0:
            self.checked = now
            try:
                with open(self.path) as f:
                    self.value = float(f.read().strip() or 0)
            except (OSError, ValueError):
                self.value = 0.0
        return self.value


def _slow_gpu_stream(fraction: _Fraction) -> str:
    """Patch GPUModelRunner.execute_model when vLLM imports it (an import hook: nothing heavy is imported
    here, in every process the engine starts)."""
    import importlib.abc
    import importlib.util

    # vLLM's V1 model runner, and Model Runner V2 (0.24 and later pick it by default for most models)
    targets = {"vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner"}

    def patch(module) -> None:
        import torch

        runner = module.GPUModelRunner
        original = runner.execute_model
        state = {"cycles_per_ms": None, "ema_ms": None, "pending": None}

        def cycles_per_ms() -> float:
            if state["cycles_per_ms"] is None:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.cuda._sleep(20_000_000)
                end.record()
                end.synchronize()
                state["cycles_per_ms"] = 20_000_000 / max(start.elapsed_time(end), 1e-3)
            return state["cycles_per_ms"]

        def slowed(self, *args, **kwargs):
            share = fraction()
            pending = state["pending"]
            if pending is not None and pending[1].query():  # the last pass's GPU time, once it has run
                ms = pending[0].elapsed_time(pending[1])
                state["ema_ms"] = ms if state["ema_ms"] is None else 0.8 * state["ema_ms"] + 0.2 * ms
                state["pending"] = None
            if share <= 0:
                return original(self, *args, **kwargs)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = original(self, *args, **kwargs)
            end.record()
            if state["pending"] is None:
                state["pending"] = (start, end)
            if state["ema_ms"]:
                torch.cuda._sleep(int(share * state["ema_ms"] * cycles_per_ms()))
            return result

        runner.execute_model = slowed

    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target_module=None):
            if name not in targets:
                return None
            targets.discard(name)  # each once; the lookup below must not find this hook again
            spec = importlib.util.find_spec(name)
            if not targets:
                sys.meta_path.remove(self)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                patch(module)
                print(
                    f"[autoresearch patch] planted slowdown on the GPU stream applied ({name})",
                    file=sys.stderr,
                    flush=True,
                )

            spec.loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, Hook())
    now = fraction()
    return f"planted slowdown: a spin of {now:.3f}x each vLLM forward pass's GPU time after it (fraction from " + (
        f"{fraction.path})" if fraction.path else "the environment)"
    )


def _apply() -> str:
    if os.environ.get("AUTORESEARCH_PLANTED_SLOWDOWN_ON") == "gpu_stream":
        return _slow_gpu_stream(_Fraction())
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
