"""Recorded rounds of real vLLM on the CPU, kept request by request, for judging estimators offline.

    .venv/bin/python benchmarks/cpu_rounds.py --rounds 8 --out .autoresearch/cpu_rounds

Each round sweeps three engines on the same rates and schedules (common random numbers), in a
rotating order: two of the baseline (SmolLM2, prefix caching on: an A/A pair) and one of the
baseline slowed by ``--slowdown`` (engines/patches/planted_slowdown: a planted effect). Every
sweep's steps (with per-request SLA samples) go to ``<out>/r<round>-<side>.json`` and its request
records to Parquet beside them, so a change of the capacity estimator or the verdict can be judged
on the same engine time again (``benchmarks/rejudge_rounds.py``) instead of hours of new trials.
A run resumes: sweeps already on disk are skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIDES = ("U1", "U2", "S")  # unpatched twice (A/A), slowed once (planted)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--slowdown", type=float, default=0.1)
    ap.add_argument("--capacity-guess", type=float, default=2.8)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    from specs.engine_args import REMOVE, apply_diff
    from specs.paths import definitions_dir
    from autoresearch.workflows import load_pool
    from dagster_project.lib import load_definitions
    from engines import run_engine
    from loadgen.sweep import run_sweep

    spec = load_definitions(definitions_dir()).endpoint("support_smollm")
    spec = spec.with_engine_args(
        apply_diff(spec.engine.args, {"--no-enable-prefix-caching": REMOVE, "--enable-prefix-caching": None})
    )
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"refine_steps": 0})})
    pool = load_pool(spec)
    patch = str(ROOT / "engines" / "patches" / "planted_slowdown")
    env = {**spec.engine.env, "PYTHONPATH": patch, "AUTORESEARCH_PLANTED_SLOWDOWN": str(args.slowdown)}
    slowed = spec.model_copy(update={"engine": spec.engine.model_copy(update={"env": env})})
    # denser than the verdict's grid (default_grid: 0.6-1.4x in 5 steps): subsets of these rates
    # stand for other grids when the rounds are judged again
    rates = [float(f"{args.capacity_guess * f:.4g}") for f in (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "design.json").write_text(
        json.dumps({"rates": rates, "slowdown": args.slowdown, "sides": SIDES, "sla": spec.sla.model_dump()}, indent=1)
    )
    for i in range(args.rounds):
        order = SIDES[i % 3 :] + SIDES[: i % 3]
        for side in order:
            path = args.out / f"r{i}-{side}.json"
            if path.exists():
                continue
            records = args.out / f"r{i}-{side}"
            records.mkdir(exist_ok=True)
            t0 = time.time()
            with run_engine(slowed if side == "S" else spec, workdir=args.out / ".run", purpose="sweep") as engine:
                sweep = run_sweep(engine, pool, spec, rates=rates, repeats_label=f"{side}{i}", records_dir=records)
            path.write_text(sweep.model_dump_json())
            print(
                f"round {i} {side}: {sweep.validity} {[round(s.throughput_rps, 2) for s in sweep.steps]} "
                f"{time.time() - t0:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
