"""Chrome-trace (torch profiler) parsing: where a profiled window's time went, and its timeline.

vLLM writes one ``*.pt.trace.json.gz`` per worker rank (plus one for the API front end) when
``/start_profile`` ... ``/stop_profile`` is called. We analyse the device timeline of one rank:

* GPU traces: kernel / memcpy / memset events on the GPU streams; CPU threads only for overlap.
* CPU traces (vLLM's CPU build): the worker thread's ``cpu_op`` events (aten / custom ops).

Each operation's exclusive time goes to a category (attention, matmul incl. MoE, communication,
sampling, cpu_scheduling, memory, other) by its own name when that is specific (a kernel or a
custom op), else by its nearest enclosing named scope (python function / record_function), so an
``aten::copy_`` inside input preparation counts as CPU scheduling and one inside attention as
attention. Time the device thread is busy with no operation running (Python overhead) and short
gaps between steps count as ``cpu_scheduling``: from the device's point of view that is time
spent waiting on the host. vLLM's ``execute_context_N(..)_generation_M(..)`` step annotations say
whether prefill runs mixed into decode steps and how much longer those steps take.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from research.proposals import CATEGORIES, ProfileBreakdown, ProfileStep

# (category, pattern) checked in order against a lower-cased op name; first match wins.
_SPECIFIC: list[tuple[str, re.Pattern]] = [
    (
        "cpu_scheduling",
        re.compile(
            r"shm_broadcast|schedul|prepare_inputs|update_states|bookkeep"
            r"|slot_mapping|block_table|attention_metadata|attn_group_metadata|copy_to_gpu"
            r"|input_batch|_preprocess|cudastreamsynchronize|cudaeventsynchronize"
        ),
    ),
    (
        "communication",
        re.compile(
            r"nccl|all_reduce|allreduce|all_gather|allgather|reduce_scatter|reducescatter"
            r"|all_to_all|alltoall|c10d|gloo|custom_ar|cross_device|sendrecv|quick_ar"
            r"|device_communicators"
        ),
    ),
    ("matmul", re.compile(r"moe|expert|topk_softmax|marlin")),  # MoE gating/experts count as matmul
    (
        "attention",
        re.compile(
            r"attn|attention|flash|paged|fmha|mha|scaled_dot_product|sdpa|reshape_and_cache"
            r"|kv_cache|rotary|rope|merge_attn"
        ),
    ),
    (
        "sampling",
        re.compile(
            r"sampl|top_?k|top_?p|argmax|gumbel|multinomial|softmax|penalt|logprob|bitmask"
            r"|grammar|structured_output|rejection|\bsort\b|radix_sort"
        ),
    ),
    (
        "matmul",
        re.compile(
            r"gemm|gemv|cutlass|cublas|nvjet|xmma|wgmma|s16816|onednn_mm|dnnl|mkl|\bmm\b|::mm$"
            r"|addmm|bmm|matmul|aten::linear|_scaled_mm|splitk|dense"
        ),
    ),
    ("memory", re.compile(r"memcpy|memset|dtoh|htod|dtod")),
    # The model's forward pass: generic ops in it (norms, activations, adds) are "other" compute,
    # not the host overhead of an enclosing scope such as the worker's RPC loop.
    ("other", re.compile(r"_model_forward|nn\.module:|model_executor/models/|model_executor/layers/")),
]
# Generic ops: named by their enclosing scope, not by themselves (an aten::copy_ can be anything).
_GENERIC = re.compile(
    r"^aten::(?!(mm|addmm|bmm|matmul|linear|_scaled_mm|scaled_dot_product|_flash|_efficient_attention))"
)
_STEP = re.compile(r"execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)")
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_SCOPE_CATS = {"python_function", "user_annotation", "gpu_user_annotation", "cpu_op"}


class TraceError(ValueError):
    """The file is not a usable Chrome trace; the message says why."""


def classify(name: str) -> str | None:
    """Category of an op by its own name, or None when the name says nothing specific."""
    lowered = name.lower()
    for category, pattern in _SPECIFIC:
        if pattern.search(lowered):
            return category
    return None


def _own_category(name: str) -> str | None:
    if _GENERIC.match(name) or _STEP.search(name):
        return None
    return classify(name)


def load_trace(path: Path | str) -> dict:
    """Read a (gzipped) Chrome trace; raise TraceError naming the file when it is not one."""
    path = Path(path)
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: not a readable Chrome trace JSON ({exc})") from exc
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: no traceEvents list (expected Chrome trace format)")
    return data


def find_worker_trace(path: Path | str) -> Path:
    """The worker-rank trace to analyse: ``path`` itself, or (when it is the API front end's
    trace, which holds no device ops) the newest ``rank*`` trace next to it."""
    path = Path(path)
    if path.is_dir():
        candidates = sorted(path.rglob("rank*.pt.trace.json*"), key=lambda p: p.stat().st_mtime)
        if not candidates:
            candidates = sorted(path.rglob("*.pt.trace.json*"), key=lambda p: p.stat().st_mtime)
        if not candidates:
            raise TraceError(f"{path}: no *.pt.trace.json(.gz) files")
        return candidates[-1]
    if "async_llm" in path.name or "api_server" in path.name:
        ranks = sorted(
            path.parent.glob("rank*.pt.trace.json*"), key=lambda p: abs(p.stat().st_mtime - path.stat().st_mtime)
        )
        if ranks:
            return ranks[0]
    return path


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _length(intervals: list[tuple[float, float]]) -> float:
    return float(sum(b - a for a, b in intervals))


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _categorise(events: list[dict], scopes: list[dict], nest: bool = True) -> dict[int, tuple[str, float]]:
    """Category and exclusive time of each of ``events`` (one thread), by ``id(event)``.

    Both lists hold ``{"ts", "end", "name"}``; scopes (python functions, annotations, ops)
    enclose events and name the generic ones. Exclusive = own duration minus nested events'
    (``nest=False`` for GPU kernels, which do not nest and may overlap across streams).
    """
    items = [(e["ts"], -(e["end"] - e["ts"]), 0, e) for e in events] + [
        (s["ts"], -(s["end"] - s["ts"]), 1, s) for s in scopes
    ]
    items.sort(key=lambda t: (t[0], t[1], -t[2]))  # outer first; a scope before an event of equal span
    stack: list[tuple[dict, int, str | None]] = []  # (item, is_scope, category)
    child_time: dict[int, float] = defaultdict(float)
    category_of: dict[int, str] = {}
    for ts, _, is_scope, item in items:
        while stack and stack[-1][0]["end"] <= ts:
            stack.pop()
        own = item.get("category") or _own_category(item["name"])
        inherited = next((cat for _, _, cat in reversed(stack) if cat is not None), None)
        category = own or inherited
        if not is_scope:
            parent = next((it for it, sc, _ in reversed(stack) if not sc), None) if nest else None
            if parent is not None:
                child_time[id(parent)] += item["end"] - item["ts"]
            category_of[id(item)] = category or _fallback(item["name"])
        stack.append((item, is_scope, category))
    return {id(e): (category_of[id(e)], max(0.0, (e["end"] - e["ts"]) - child_time.get(id(e), 0.0))) for e in events}


def _totals(events: list[dict], categorised: dict[int, tuple[str, float]]):
    by_cat: dict[str, float] = defaultdict(float)
    by_op: dict[tuple[str, str], float] = defaultdict(float)
    for e in events:
        cat, exclusive = categorised[id(e)]
        by_cat[cat] += exclusive
        by_op[(e["name"], cat)] += exclusive
    return dict(by_cat), dict(by_op)


def _fallback(name: str) -> str:
    """Category of a generic op with no named scope around it."""
    lowered = name.lower()
    if re.search(r"softmax|topk|sort|argmax|multinomial|exponential", lowered):
        return "sampling"
    if re.search(r"copy|_to_copy|aten::to$|index|cat$|empty", lowered):
        return "memory"
    return "other"


def _steps(annotations: list[dict]) -> list[ProfileStep]:
    steps = []
    for a in annotations:
        match = _STEP.search(a["name"])
        if match:
            ctx_req, ctx_tok, gen_req, gen_tok = (int(g) for g in match.groups())
            steps.append(
                ProfileStep(
                    start_us=a["ts"],
                    duration_us=a["end"] - a["ts"],
                    context_requests=ctx_req,
                    context_tokens=ctx_tok,
                    generation_requests=gen_req,
                    generation_tokens=gen_tok,
                )
            )
    return sorted(steps, key=lambda s: s.start_us)


def analyse_trace(
    data: dict, source: str = "", gap_threshold_us: float = 50.0, scheduling_gap_max_us: float = 100_000.0
) -> ProfileBreakdown:
    """Break one rank's trace into categories and timeline statistics.

    ``gap_threshold_us``: idle stretches shorter than this are not counted as gaps (launch
    jitter); ``scheduling_gap_max_us``: longer idle stretches are "no work", not host overhead.
    """
    raw = [
        e
        for e in data["traceEvents"]
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and isinstance(e.get("ts"), (int, float))
        and isinstance(e.get("dur"), (int, float))
    ]
    if not raw:
        raise TraceError(f"{source or 'trace'}: no complete ('X') events")
    for e in raw:
        e["end"] = e["ts"] + e["dur"]
    kernels = [e for e in raw if e.get("cat") in _DEVICE_CATS]
    device = "gpu" if kernels else "cpu"

    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in raw:
        if e.get("cat") in _SCOPE_CATS:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    cpu_time = {k: sum(e["dur"] for e in v if e.get("cat") == "cpu_op") for k, v in by_thread.items()}
    if not any(cpu_time.values()) and not kernels:
        raise TraceError(f"{source or 'trace'}: no cpu_op or kernel events (is this the API front end's trace?)")
    host_key = max(cpu_time, key=cpu_time.get) if cpu_time else None
    host = by_thread.get(host_key, [])
    annotations = [e for e in host if e.get("cat") == "user_annotation"]
    if device == "gpu":
        annotations = [e for e in raw if e.get("cat") == "gpu_user_annotation"] or annotations
    steps = _steps(annotations)

    if device == "gpu":
        # A kernel with a generic name ("elementwise_kernel") is named by the host scope that
        # launched it: its cuda_runtime launch (same correlation id) sits inside python/ops.
        launches = [
            {"ts": e["ts"], "end": e["end"], "name": e["name"], "corr": (e.get("args") or {}).get("correlation")}
            for e in raw
            if e.get("cat") == "cuda_runtime"
        ]
        host_scopes = [
            {"ts": e["ts"], "end": e["end"], "name": e["name"]}
            for e in raw
            if e.get("cat") in ("python_function", "user_annotation", "cpu_op")
        ]
        launched = _categorise(launches, host_scopes, nest=False)
        launch_cat = {l["corr"]: launched[id(l)][0] for l in launches if l["corr"] is not None}
        events = []
        for e in kernels:
            name = e["name"] if e.get("cat") == "kernel" else "memcpy " + e["name"]
            corr = (e.get("args") or {}).get("correlation")
            own = _own_category(name)
            hint = launch_cat.get(corr)
            events.append(
                {
                    "ts": e["ts"],
                    "end": e["end"],
                    "name": name,
                    "category": own or (hint if hint not in (None, "other") else None),
                }
            )
        scopes = [
            {"ts": e["ts"], "end": e["end"], "name": e["name"]} for e in raw if e.get("cat") == "gpu_user_annotation"
        ]
        category_us, by_op = _totals(events, _categorise(events, scopes, nest=False))
        busy = _union([(e["ts"], e["end"]) for e in events])
    else:
        events = [{"ts": e["ts"], "end": e["end"], "name": e["name"]} for e in host if e.get("cat") == "cpu_op"]
        scopes = [{"ts": e["ts"], "end": e["end"], "name": e["name"]} for e in host if e.get("cat") != "cpu_op"]
        category_us, by_op = _totals(events, _categorise(events, scopes))
        # The thread is busy while it runs an op or an annotated engine step (incl. Python in between).
        busy = _union([(e["ts"], e["end"]) for e in events] + [(a["ts"], a["end"]) for a in annotations])
    window = (busy[0][0], busy[-1][1])
    window_us = window[1] - window[0]
    busy_us = _length(busy)
    op_us = sum(category_us.values())
    gaps = [b[0] - a[1] for a, b in zip(busy, busy[1:])]
    host_overhead = max(0.0, busy_us - op_us) if device == "cpu" else 0.0
    short_gaps = sum(g for g in gaps if g <= scheduling_gap_max_us)
    category_us["cpu_scheduling"] = category_us.get("cpu_scheduling", 0.0) + host_overhead + short_gaps
    category_us = {c: round(category_us.get(c, 0.0), 3) for c in CATEGORIES}
    total = sum(category_us.values()) or 1.0
    counted_gaps = [g for g in gaps if g >= gap_threshold_us]

    overlap = None
    if device == "gpu" and host:
        host_busy = _union(
            [(e["ts"], e["end"]) for e in host if e.get("cat") == "cpu_op"]
            + [(e["ts"], e["end"]) for e in raw if e.get("cat") == "cuda_runtime"]
        )
        overlap = _intersection(busy, host_busy) / busy_us if busy_us else None

    mixed = [s for s in steps if s.context_requests > 0 and s.generation_requests > 0]
    decode_only = [s for s in steps if s.context_requests == 0 and s.generation_requests > 0]
    decode_ms = float(np.mean([s.duration_us for s in decode_only]) / 1000) if decode_only else None
    mixed_ms = float(np.mean([s.duration_us for s in mixed]) / 1000) if mixed else None
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:15]
    return ProfileBreakdown(
        source=source,
        device=device,
        window_us=round(window_us, 3),
        busy_us=round(busy_us, 3),
        category_us=category_us,
        category_share={c: round(v / total, 4) for c, v in category_us.items()},
        top_ops=[(name, cat, round(us, 1)) for (name, cat), us in top],
        idle_gap_fraction=round(short_gaps / window_us, 4) if window_us else 0.0,
        idle_gaps=len(counted_gaps),
        idle_gap_p95_us=round(float(np.percentile(counted_gaps, 95)), 1) if counted_gaps else 0.0,
        cpu_gpu_overlap=None if overlap is None else round(overlap, 4),
        steps=len(steps),
        mixed_step_fraction=round(len(mixed) / len(steps), 4) if steps else 0.0,
        decode_step_ms=None if decode_ms is None else round(decode_ms, 3),
        mixed_step_ms=None if mixed_ms is None else round(mixed_ms, 3),
        prefill_interrupts_decode=bool(mixed and decode_ms and mixed_ms and mixed_ms > 1.5 * decode_ms),
    )


def parse_profile(path: Path | str, **kwargs) -> ProfileBreakdown:
    """Parse the trace at ``path`` (a file or the profile folder); see :func:`analyse_trace`."""
    trace = find_worker_trace(path)
    return analyse_trace(load_trace(trace), source=trace.name, **kwargs)


def trim_trace(data: dict, start_fraction: float, end_fraction: float) -> dict:
    """A copy of ``data`` keeping the events that overlap a slice of its time span (test samples)."""
    timed = [e for e in data["traceEvents"] if e.get("ph") == "X" and "dur" in e and e.get("cat") != "Trace"]
    lo = min(e["ts"] for e in timed)
    hi = max(e["ts"] + e["dur"] for e in timed)
    a, b = lo + (hi - lo) * start_fraction, lo + (hi - lo) * end_fraction
    kept = [
        e
        for e in data["traceEvents"]
        if e.get("ph") != "X" or e.get("cat") == "Trace" or (e["ts"] < b and e["ts"] + e.get("dur", 0) > a)
    ]
    return {**data, "traceEvents": kept}
