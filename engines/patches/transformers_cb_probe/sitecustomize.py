"""An evidence overlay for `transformers serve`: what its continuous-batching loop spends its time on.

`transformers serve` exports no /metrics and has no profiler route, yet its own internals decide its
performance on a GPU: CUDA graphs are captured lazily, one per new padded (query, KV) shape, and each
capture stalls every running request. This overlay counts, in the engine process only:

- per step: the host time to prepare a batch, to run it (the forward pass and sampling; it waits for
  the device when batching is synchronous) and to update the requests;
- the padded (query, KV) shapes the model runner was asked for, and how many were distinct;
- CUDA-graph captures: how many, the stall each one cost, and when (seconds since the engine started);
- device memory: peak allocated and reserved;
- the scheduler's queue: requests running and waiting, with the wall time they were read (``queue``), which
  the adapter serves as its queue metrics (the sweep waits on them until a step's queue has drained).

It writes them as one JSON object to ``AUTORESEARCH_PROBE_FILE`` (atomically, once a second, from a
daemon thread of its own), which the adapter reads back (``TransformersServeAdapter.internals``).
Whatever this transformers version does not have is reported as absent (``null``), never as zero:
the wrapping is by name, and a method that is missing is simply not counted.
"""

import json
import os
import threading
import time
import weakref

_OUT = os.environ.get("AUTORESEARCH_PROBE_FILE")
_T0 = time.monotonic()
_LOCK = threading.Lock()
_MAX_EVENTS = 4000
_state = {
    "schema": 1,
    "steps": {},  # phase -> {"n", "total_s", "max_s"}
    "captures": {"n": 0, "stall_s": 0.0, "max_s": 0.0, "at_s": []},
    "padded_shapes": None,  # {"distinct", "max_q", "max_kv", "calls"} once the runner pads
    "memory": None,
    "wrapped": [],
}
_shapes: set = set()
_schedulers: "weakref.WeakSet" = weakref.WeakSet()


def _phase(name: str, seconds: float) -> None:
    with _LOCK:
        slot = _state["steps"].setdefault(name, {"n": 0, "total_s": 0.0, "max_s": 0.0})
        slot["n"] += 1
        slot["total_s"] += seconds
        slot["max_s"] = max(slot["max_s"], seconds)


def _write() -> None:
    now = time.monotonic()
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            free, total = torch.cuda.mem_get_info()
            _state["memory"] = {
                "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3),
                "reserved_gib": round(torch.cuda.memory_reserved() / 2**30, 3),
                "free_gib": round(free / 2**30, 3),
                "total_gib": round(total / 2**30, 3),
            }
    except Exception:  # noqa: BLE001 - memory is evidence, never a reason to disturb the engine
        pass
    queue = _queue()
    with _LOCK:
        _state["uptime_s"] = round(now - _T0, 3)
        if queue is not None:
            _state["queue"] = queue
        text = json.dumps(_state)
    tmp = f"{_OUT}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as handle:
            handle.write(text)
        os.replace(tmp, _OUT)
    except OSError:
        pass


def _queue() -> dict | None:
    """Requests running and waiting in every live scheduler, read now; None before the first one exists."""
    try:
        schedulers = list(_schedulers)
        if not schedulers:
            return None
        running = sum(len(getattr(s, "active_requests", ())) for s in schedulers)
        waiting = sum(len(getattr(s, "waiting_requests", ())) for s in schedulers)
    except Exception:  # noqa: BLE001 - a set or dict changed while read: the next write reads again
        return None
    return {"running": running, "waiting": waiting, "at": time.time()}


def _track_schedulers() -> None:
    """Keep a weak reference to every continuous-batching scheduler made, so the queue can be read."""
    try:
        from transformers.generation.continuous_batching import scheduler
    except Exception:  # noqa: BLE001 - a layout without one: the queue stays unmeasured
        return
    base = getattr(scheduler, "Scheduler", None)
    original = getattr(base, "__init__", None)
    if original is None or getattr(original, "_autoresearch_probe", False):
        return

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _schedulers.add(self)

    init._autoresearch_probe = True
    base.__init__ = init
    _state["wrapped"].append("Scheduler.__init__")


def _timed(owner, name: str, phase: str, after=None) -> None:
    original = getattr(owner, name, None)
    if original is None or getattr(original, "_autoresearch_probe", False):
        return

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        result = original(*args, **kwargs)
        _phase(phase, time.perf_counter() - started)
        if after is not None:
            after(args, result)
        return result

    wrapper._autoresearch_probe = True
    wrapper.__wrapped__ = original
    setattr(owner, name, wrapper)
    _state["wrapped"].append(f"{owner.__name__}.{name}")


def _count_capture(seconds: float) -> None:
    with _LOCK:
        captures = _state["captures"]
        captures["n"] += 1
        captures["stall_s"] += seconds
        captures["max_s"] = max(captures["max_s"], seconds)
        if len(captures["at_s"]) < _MAX_EVENTS:
            captures["at_s"].append(round(time.monotonic() - _T0, 3))


def _wrap_capture(owner, name: str) -> bool:
    """A capture is timed around the outermost capturing call (warm-up runs included: they stall too)."""
    original = getattr(owner, name, None)
    if original is None:
        return False
    depth = threading.local()

    def wrapper(*args, **kwargs):
        outer = not getattr(depth, "n", 0)
        depth.n = getattr(depth, "n", 0) + 1
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            depth.n -= 1
            if outer:
                _count_capture(time.perf_counter() - started)

    setattr(owner, name, wrapper)
    _state["wrapped"].append(f"{owner.__name__}.{name}")
    return True


_sums = {"q": 0, "kv": 0, "padded_q": 0, "padded_kv": 0}


def _record_shape(args, result) -> None:
    """The real (query, KV) sizes the runner was asked to pad, and what it padded them to."""
    if not (isinstance(result, tuple) and len(result) == 2 and len(args) >= 3):
        return
    (q, kv), (padded_q, padded_kv) = args[1:3], result
    with _LOCK:
        _shapes.add(result)
        for key, value in (("q", q), ("kv", kv), ("padded_q", padded_q), ("padded_kv", padded_kv)):
            _sums[key] += int(value or 0)
        _state["padded_shapes"] = {
            "distinct": len(_shapes),
            "max_q": max(q for q, _ in _shapes),
            "max_kv": max(kv for _, kv in _shapes),
            "q_padding_ratio": round(_sums["padded_q"] / _sums["q"], 3) if _sums["q"] else None,
            "kv_padding_ratio": round(_sums["padded_kv"] / _sums["kv"], 3) if _sums["kv"] else None,
        }


def _install() -> None:
    if not _OUT:
        return
    try:
        from transformers.generation.continuous_batching import continuous_api
    except Exception:  # noqa: BLE001 - not a transformers interpreter (a helper process): nothing to count
        return
    processor = getattr(continuous_api, "ContinuousBatchProcessor", None)
    if processor is not None:
        _timed(processor, "prepare_next_batch", "prepare")
        _timed(processor, "_generation_step", "generate")
        _timed(processor, "update_batch", "update")
    captured = False
    try:
        from transformers.generation.continuous_batching import model_runner

        runner = getattr(model_runner, "ModelRunner", None) or getattr(model_runner, "CBModelRunner", None)
        if runner is not None:
            _timed(runner, "maybe_pad_inputs", "pad", after=_record_shape)
            captured = _wrap_capture(runner, "_capture_graph")
    except Exception:  # noqa: BLE001 - an older layout: the torch-level wrapper below still counts captures
        pass
    if not captured:
        _wrap_graph_context()
    _track_schedulers()
    _write()
    threading.Thread(target=_writer, name="autoresearch-probe", daemon=True).start()


def _writer() -> None:
    """Writes the counts once a second (a sweep reads them at its end, so they are at most 1 s old)."""
    while True:
        time.sleep(1.0)
        _write()


def _wrap_graph_context() -> None:
    """Older layouts: time each ``with torch.cuda.graph(...)`` block (the capture itself, not its warm-ups)."""
    import torch

    graph = torch.cuda.graph
    enter, exit_ = graph.__enter__, graph.__exit__

    def entered(self):
        self._autoresearch_started = time.perf_counter()
        return enter(self)

    def exited(self, *exc):
        try:
            return exit_(self, *exc)
        finally:
            _count_capture(time.perf_counter() - getattr(self, "_autoresearch_started", time.perf_counter()))

    graph.__enter__, graph.__exit__ = entered, exited
    _state["wrapped"].append("torch.cuda.graph")


_install()
