"""Does the engine's service rate follow the host's memory speed? Steps of the same requests, one launch.

    .venv/bin/python benchmarks/host_speed.py run --sweeps 2 --out benchmarks/results/host_speed
    .venv/bin/python benchmarks/host_speed.py report --out benchmarks/results/host_speed

``run`` starts the endpoint's engine once (``--engine-args`` for another configuration; the default is the
main job's working baseline, prefix caching on) and sweeps it ``--sweeps`` times over ``--rates`` repeated
``--cycles`` times, every rate held (a verdict's round: :func:`loadgen.sweep.run_sweep` with
``stop_when_broken=False``) with ``sweep.host_speed_probe`` on, so each step carries the host's memory-pass
time on either side of it (:mod:`loadgen.host_speed`). A side process also reads the host once a second
while the steps run (``probe_during.jsonl``): readings during a step hear the engine's own memory traffic,
which is why the product takes its readings with the engine idle.

``report`` fits, over the steps that queued, log(service rate) on log(host memory-pass time) with one
level per rate, and states the residual sd of one step's rate with no covariate, with the exponent fixed at
-1 and with it fitted, for the readings on either side of the step and for those during it; then the sd of
three-step groups' service rates as measured and at one host speed (with the exponent the groups fit, as
the product does: loadgen.host_elasticity).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BASELINE = (
    "--max-num-seqs 2 --max-model-len 2048 --enforce-eager --enable-auto-tool-choice --tool-call-parser hermes "
    "--enable-prefix-caching"
)
DURING = r"""
import json, sys, time
from loadgen.host_speed import memory_pass_s
with open(sys.argv[1], "a") as out:
    while True:
        began = time.monotonic()
        out.write(json.dumps({"t": time.time(), "pass_s": memory_pass_s(0.05)}) + "\n")
        out.flush()
        time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
"""


def run(args) -> None:
    from autoresearch.workflows import load_pool
    from dagster_project.lib import load_definitions
    from engines import run_engine
    from loadgen.sweep import run_sweep
    from specs.paths import definitions_dir

    spec = load_definitions(definitions_dir()).endpoint(args.endpoint)
    engine = spec.engine.model_copy(update={"args": shlex.split(args.engine_args)})
    sweep = spec.sweep.model_copy(update={"host_speed_probe": True, "estimator": "service_rate"})
    spec = spec.model_copy(update={"engine": engine, "sweep": sweep})
    pool = load_pool(spec)
    args.out.mkdir(parents=True, exist_ok=True)
    rates = [float(r) for r in args.rates.split(",")] * args.cycles
    side = subprocess.Popen([sys.executable, "-c", DURING, str(args.out / "probe_during.jsonl")], cwd=ROOT)
    try:
        with run_engine(spec, workdir=args.out / ".run", purpose="sweep") as running:
            for s in range(args.sweeps):
                began = time.time()
                result = run_sweep(running, pool, spec, rates=rates, stop_when_broken=False, repeats_label=f"h{s}")
                (args.out / f"l0-s{s}.json").write_text(result.model_dump_json())
                print(f"sweep {s}: {len(result.steps)} steps in {time.time() - began:.0f} s", flush=True)
    finally:
        side.terminate()


def _fit(y: np.ndarray, levels: list[np.ndarray], x: np.ndarray | None, fixed: bool) -> float:
    """Residual sd of y on one level per rate, plus log host time fitted (fixed: exponent -1)."""
    base = np.column_stack(levels)
    if x is None:
        design, target, extra = base, y, 0
    elif fixed:
        design, target, extra = base, y + x, 0
    else:
        design, target, extra = np.column_stack([x, *levels]), y, 1
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    resid = target - design @ coef
    return float(np.sqrt(np.sum(resid**2) / (len(y) - len(levels) - extra)))


def report(out: Path) -> dict:
    from loadgen.host_elasticity import host_adjustment
    from loadgen.queue_rate import queued, service_rate, step_host_s
    from loadgen.results import SweepResult

    sweeps = [SweepResult.model_validate_json(p.read_text()) for p in sorted(out.glob("l*-s*.json"))]
    steps = [st for s in sweeps for st in s.steps if queued(st)]
    during_path = out / "probe_during.jsonl"
    during = [json.loads(line) for line in during_path.read_text().splitlines()] if during_path.exists() else []
    t = np.array([d["t"] for d in during if d["pass_s"]])
    p = np.array([d["pass_s"] for d in during if d["pass_s"]])

    def during_s(st) -> float | None:
        inside = (t >= st.started_at) & (t <= st.started_at + (st.wall_s or 0)) if len(t) else np.array([])
        return float(np.median(p[inside])) if inside.any() else None

    rows = [
        {
            "rate": st.target_rate,
            "service_rate": st.target_rate / (1 + st.ttft_growth["slope"]),
            "host_around_s": step_host_s(st),
            "host_during_s": during_s(st),
        }
        for st in steps
    ]
    y = np.log([r["service_rate"] for r in rows])
    levels = [np.array([r["rate"] == v for r in rows], float) for v in sorted({r["rate"] for r in rows})]
    result: dict = {"steps": rows, "fits": {}}
    result["fits"]["none"] = {"resid_sd": _fit(y, levels, None, False)}
    for key in ("host_around_s", "host_during_s"):
        if all(r[key] for r in rows):
            x = np.log([r[key] for r in rows])
            coef, *_ = np.linalg.lstsq(np.column_stack([x, *levels]), y, rcond=None)
            result["fits"][key] = {
                "exponent": float(coef[0]),
                "resid_sd_fixed": _fit(y, levels, x, True),
                "resid_sd_fitted": _fit(y, levels, x, False),
            }
    # three-step groups (one of each rate in a cycle) as a sweep's service rate: as measured, at one host speed
    ordered = [st for s in sweeps for st in s.steps]
    width = len(levels)
    groups = [ordered[i : i + width] for i in range(0, len(ordered) - width + 1, width)]
    host = host_adjustment(groups, groups)  # the exponent the groups' repeated rates fit
    raw = [service_rate(g) for g in groups]
    at = [service_rate(g, host=host) for g in groups] if host else []
    logs_raw = [math.log(r.rate) for r in raw if r and r.rate]
    logs_at = [math.log(r.rate) for r in at if r and r.rate]
    result["groups"] = {
        "n": len(groups),
        "sd_as_measured": float(np.std(logs_raw, ddof=1)) if len(logs_raw) > 1 else None,
        "sd_at_one_host_speed": float(np.std(logs_at, ddof=1)) if len(logs_at) > 1 else None,
    }
    idle = [r for s in sweeps for st in s.steps for r in st.host_memory_pass_s]
    result["host_idle_median_s"] = float(np.median(idle)) if idle else None
    result["host_busy_median_s"] = float(np.median([r["host_during_s"] for r in rows if r["host_during_s"]] or [0]))
    return result


def _text(result: dict) -> str:
    lines = ["rate  service rate  host around (ms)  host during (ms)"]
    for r in result["steps"]:
        around = f"{r['host_around_s'] * 1e3:.3f}" if r["host_around_s"] else "-"
        during = f"{r['host_during_s'] * 1e3:.3f}" if r["host_during_s"] else "-"
        lines.append(f"{r['rate']:>4g}  {r['service_rate']:>12.3f}  {around:>16}  {during:>16}")
    fits = result["fits"]
    lines.append(f"one step's service rate, residual sd with one level per rate: {fits['none']['resid_sd']:.1%}")
    for key, name in (("host_around_s", "idle readings on either side"), ("host_during_s", "readings during")):
        if key in fits:
            f = fits[key]
            lines.append(
                f"  with the {name}: exponent {f['exponent']:.2f}; residual sd {f['resid_sd_fixed']:.1%} at "
                f"exponent -1, {f['resid_sd_fitted']:.1%} fitted"
            )
    g = result["groups"]
    if g["sd_as_measured"] is not None:
        at = f"{g['sd_at_one_host_speed']:.1%}" if g["sd_at_one_host_speed"] is not None else "-"
        lines.append(
            f"{g['n']} groups of one step per rate: service rate sd {g['sd_as_measured']:.1%} as measured, {at} at one "
            "host speed"
        )
    if result.get("host_idle_median_s") and result.get("host_busy_median_s"):
        lines.append(
            f"memory pass: {result['host_idle_median_s'] * 1e3:.3f} ms with the engine idle, "
            f"{result['host_busy_median_s'] * 1e3:.3f} ms during steps (the engine's own traffic)"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--endpoint", default="support_smollm")
    r.add_argument("--engine-args", default=BASELINE, help="the engine's whole argument list (one string)")
    r.add_argument("--rates", default="2.0,2.8,4.0", help="rates past capacity, comma-separated")
    r.add_argument("--cycles", type=int, default=3)
    r.add_argument("--sweeps", type=int, default=2)
    r.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("report")
    p.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.cmd == "run":
        run(args)
    result = report(args.out)
    (args.out / "host_speed.json").write_text(json.dumps(result, indent=1))
    text = _text(result)
    (args.out / "host_speed.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
