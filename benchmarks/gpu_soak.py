"""Soaks on one H200: the shipped `chat_azure_h200` endpoint's configurations held at their capacity.

Short sweep steps showed two configurations that then died of ``torch.OutOfMemoryError`` within a
minute of sustained load (docs/gpu.md). This runs the product's soak (``loadgen.soak.run_soak``, the
same code the harness runs before it adopts anything) on those configurations, one per call of the
GPU machine, through the product's own engine start (``engines.start_engine``, the transformers
adapter), with the endpoint's declared soak (``soak:`` in its defs.yaml: hold, 1.3x overload, recovery).

Stages (docs/gpu.md says how to run them):

``run --config NAME`` (GPU machine): builds the random Qwen3 if needed, starts the configuration,
soaks it at its rate, writes ``$OUT/soak_NAME.json`` (the SoakResult, the engine's log tail when it
died, NVML memory at the end).

``production`` (GPU machine): research.production_check (the pool's own arrival pattern, the Azure
conversation trace's ~7 req/s) on each labelled configuration, one engine after another, written to
``$OUT/production_check.json`` as each ends.

``report`` (here): collects ``.gpubench/soak/soak_*.json`` (and ``production_check.json``) into ``benchmarks/results/gpu_soak.json``
and a short ``gpu_soak.md``.

The rates are the configurations' capacities measured earlier on this machine and model
(``benchmarks/results/gpu_campaign.json``); the padding overlay's capacity was not swept (it is held at
the rate it reached in short steps), which the report says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.gpu_campaign import pool, shipped_endpoint  # noqa: E402
from benchmarks.gpu_transformers_serve import WORK  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
CONFIGS = {
    # the campaign's adopted best: 3.65 and 4.69 req/s in its two sweeps (gpu_campaign.json)
    "cuda_graphs": {
        "args": ["--continuous-batching", "--cb-use-cuda-graph"],
        "overlay": None,
        "rate": 4.17,
        "rate_source": "its two sweeps in gpu_campaign.json (3.65, 4.69 req/s)",
    },
    # ITL halved at low load in short steps; reported to die within 45 s at 5 req/s (docs/gpu.md)
    "cuda_graphs_padding_512_4096": {
        "args": ["--continuous-batching", "--cb-use-cuda-graph"],
        "overlay": {"q_padding_interval_size": 512, "kv_padding_interval_size": 4096},
        "rate": 5.0,
        "rate_source": "not swept: the rate it held in short steps (docs/gpu.md)",
    },
    # the fix the OOM suggests: a KV cache that leaves room for the CUDA-graph pools (~16 GiB)
    "cuda_graphs_kv_memory_0.6": {
        "args": ["--continuous-batching", "--cb-use-cuda-graph"],
        "overlay": {"max_memory_percent": 0.6},
        "rate": 4.17,
        "rate_source": "the CUDA-graph configuration's capacity (not swept with this overlay)",
    },
    # The sustained rate (2026-12-03): the internals campaign's baseline died of OOM after 43 s at its
    # sweep capacity 4.13 req/s, so it is held from 0.8x that (the soak backs off x0.8 twice on queue growth).
    "cuda_graphs_sustained": {
        "args": ["--continuous-batching", "--cb-use-cuda-graph"],
        "overlay": None,
        "rate": 3.3,
        "rate_source": "0.8x its sweep capacity in the internals campaign (3.92, 4.34 req/s; OOM after 43 s at 4.14)",
    },
    # the rule bounded_kv_cache's fix: no crash in the campaign, but its queue grew at its sweep capacity
    "bounded_kv_512_sustained": {
        "args": ["--continuous-batching", "--cb-use-cuda-graph", "--cb-num-blocks", "512"],
        "overlay": None,
        "rate": 3.52,
        "rate_source": "its sweep capacity when rejudged in the internals campaign (3.71 and 3.52 req/s)",
    },
    # the batch limit: no crash in the campaign, queue growth at 3.80 req/s (its fitted capacity)
    "batch_limit_64_sustained": {
        "args": ["--continuous-batching", "--cb-use-cuda-graph"],
        "overlay": {"max_requests_per_batch": 64},
        "rate": 3.8,
        "rate_source": "its fitted sweep capacity in the internals campaign (3.80 req/s)",
    },
}

# Production-shaped verification (research.production_check) of the H200 endpoint's configurations: the
# pool's own arrival pattern (the Azure conversation trace, about 7 req/s) replayed on each.
PRODUCTION = {
    "before": ["--continuous-batching"],  # what the first campaign started from
    "cuda_graphs": ["--continuous-batching", "--cb-use-cuda-graph"],  # what it adopted (declared now)
    "bounded_kv_512": ["--continuous-batching", "--cb-use-cuda-graph", "--cb-num-blocks", "512"],
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _gpu_memory() -> dict | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
        return {"used_gib": round(info.used / 2**30, 1), "total_gib": round(info.total / 2**30, 1)}
    except Exception as exc:  # noqa: BLE001 - telemetry is evidence, not a requirement
        return {"unmeasured": repr(exc)[:200]}


def run(args) -> None:
    from engines import start_engine
    from loadgen.soak import run_soak

    config = CONFIGS[args.config]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = shipped_endpoint(args.engine_python, args.model_size)
    if args.hold_s is not None:
        spec = spec.model_copy(update={"soak": spec.soak.model_copy(update={"hold_s": args.hold_s})})
    engine_args = list(config["args"])
    if config["overlay"]:  # the settings overlay, as the product applies it (engines.overlays)
        engine_args += ["--overlay", "transformers_cb_config=" + json.dumps(config["overlay"])]
    rate = args.rate or config["rate"]
    record = {
        "config": args.config,
        "engine_args": config["args"],
        "overlay": config["overlay"],
        "rate_source": config["rate_source"],
        "soak_spec": spec.soak.model_dump(),
        "host": os.uname().nodename,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    began = time.monotonic()
    engine = start_engine(spec, args_override=engine_args, workdir=out / f"engine_{args.config}")
    record["startup_s"] = engine.startup_s
    try:
        soak = run_soak(engine, pool(), spec, rate, progress=log)
        record["soak"] = soak.model_dump()
        record["gpu_memory_end"] = _gpu_memory()
        record["engine_log_tail"] = engine.log_tail(80)[-6000:]
    finally:
        engine.stop()
        record["wall_s"] = round(time.monotonic() - began, 1)
        (out / f"soak_{args.config}.json").write_text(json.dumps(record, indent=1))
        log(f"wrote soak_{args.config}.json")


def production(args) -> None:
    """research.production_check on the labelled configurations, one engine after another."""
    from research.production_check import production_check

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = shipped_endpoint(args.engine_python, args.model_size)
    configs = [(label, PRODUCTION[label]) for label in args.labels.split(",")]
    began, started = time.monotonic(), time.strftime("%Y-%m-%dT%H:%M:%S")
    replayed, rows = pool(), []
    for config in configs:  # one at a time, written as each ends: a call cut short keeps what it measured
        check = production_check(
            spec, replayed, [config], workdir=out / "production", seconds=args.seconds, progress=log
        )
        rows += check.rows
        record = {
            "what": "research.production_check: the pool's own arrival pattern replayed on each configuration",
            "seconds": args.seconds,
            "configs": dict(configs),
            "check": {**check.model_dump(), "rows": [r.model_dump() for r in rows]},
            "host": os.uname().nodename,
            "started": started,
            "wall_s": round(time.monotonic() - began, 1),
        }
        (out / "production_check.json").write_text(json.dumps(record, indent=1))
    log("wrote production_check.json")


def _scrub(text: str) -> str:
    """No machine paths in recorded results: the checkout becomes '.', an interpreter's packages '<site-packages>'."""
    import re

    return re.sub(r"/[\w./-]*?/site-packages/", "<site-packages>/", text.replace(str(REPO), "."))


def report(args) -> Path:
    rows = [json.loads(_scrub(p.read_text())) for p in sorted(Path(args.dir).glob("soak_*.json"))]
    checked = Path(args.dir) / "production_check.json"
    payload = {
        "what": "loadgen.soak on the H200 (transformers serve, random 442 M Qwen3, chat_azure_h200 pool)",
        "command": "benchmarks/gpu_soak.py run --config NAME (docs/gpu.md)",
        "soaks": rows,
        "production_check": json.loads(_scrub(checked.read_text())) if checked.exists() else None,
        "production_command": "benchmarks/gpu_soak.py production --labels before,cuda_graphs,bounded_kv_512",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / "gpu_soak.json"
    target.write_text(json.dumps(payload, indent=1))
    lines = [
        "# Soaks on one H200 (`benchmarks/gpu_soak.py`)",
        "",
        "| configuration | rate held | held | outcome | overload | diagnosis | reasons |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r.get("soak") or {}
        lines.append(
            f"| `{' '.join(r['engine_args'])}`"
            + (f" + overlay `{r['overlay']}`" if r["overlay"] else "")
            + f" | {s.get('rate', 0):.3g} req/s ({r['rate_source']}) | {s.get('held_s', 0):.0f} s of "
            f"{r['soak_spec']['hold_s']:.0f} | {s.get('outcome', 'not run')} | {s.get('overload') or '-'} | "
            f"{s.get('diagnosis') or '-'} | {'; '.join(s.get('reasons') or []) or '-'} |"
        )
    production_rows = ((payload["production_check"] or {}).get("check") or {}).get("rows") or []
    if production_rows:
        seconds = payload["production_check"]["seconds"]
        lines += [
            "",
            f"## Production-shaped replay ({seconds:g} s of the pool's own arrivals per configuration)",
            "",
            "| configuration | requests | SLA attainment | intervals within SLA | TTFT p95 ms | GPU-s / 1,000 | "
            "GPU-s / 1,000 within SLA | invalid |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in production_rows:

            def num(v, fmt):
                return format(v, fmt) if v is not None else "-"

            lines.append(
                f"| {r['label']}: `{' '.join(r['engine_args'])}` | {r['requests']} | {num(r['attainment'], '.1%')} | "
                f"{r['intervals_within_sla']}/{r['intervals']} | {num(r['ttft_p95_ms'], '.0f')} | "
                f"{num(r['gpu_s_per_1k'], '.0f')} | {num(r['gpu_s_per_1k_within_sla'], '.0f')} | "
                f"{r['invalid_reason'] or '-'} |"
            )
    (RESULTS / "gpu_soak.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="stage", required=True)
    r = sub.add_parser("run", help="soak one configuration (GPU machine)")
    r.add_argument("--config", choices=sorted(CONFIGS), required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--hold-s", type=float, help="hold this long instead of the endpoint's soak.hold_s")
    r.add_argument("--rate", type=float, help="hold this rate instead of the configuration's")
    r.add_argument("--engine-python", default=sys.executable)
    r.add_argument("--model-size", default="442m")
    c = sub.add_parser("production", help="production-shaped replay of configurations (GPU machine)")
    c.add_argument("--labels", default=",".join(PRODUCTION))
    c.add_argument("--seconds", type=float, default=75.0)
    c.add_argument("--out", required=True)
    c.add_argument("--engine-python", default=sys.executable)
    c.add_argument("--model-size", default="442m")
    q = sub.add_parser("report", help="collect the soaks into benchmarks/results/gpu_soak.json (here)")
    q.add_argument("--dir", default=str(WORK / "soak"))
    args = parser.parse_args(argv)
    {"run": run, "production": production, "report": report}[args.stage](args)


if __name__ == "__main__":
    main()
