"""The open-loop client inside a Dagster materialisation vs on the CLI path: p99 send lag (issue 26).

    .venv/bin/python benchmarks/dagster_send_lag.py --trials 3

Both paths run the product's own sweep (loadgen.sweep.run_sweep, senders in processes of their
own) against the simulated engine (loadgen.simengine: the same service model each time, so only
the caller differs). The CLI path calls it from a plain process, as ``autoresearch sweep`` does;
the Dagster path calls it from inside an asset materialised in-process by ``dg.materialize`` (the
research graph's way, with Dagster's event log and threads around it). Trials alternate the paths.
Writes benchmarks/results/dagster_send_lag.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402
import polars as pl  # noqa: E402

from specs.config import SLASpec  # noqa: E402
from specs.paths import definitions_dir  # noqa: E402
from dagster_project.lib import load_definitions  # noqa: E402
from loadgen import simengine  # noqa: E402
from loadgen.sweep import run_sweep  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
RATES = [10.0, 20.0, 40.0]


def _spec(step_s: float):
    spec = load_definitions(definitions_dir()).endpoint("tiny_random")
    return spec.model_copy(
        update={
            "sla": SLASpec(ttft_ms=2000, itl_ms=500, max_error_rate=0.05),
            "sweep": spec.sweep.model_copy(
                update={
                    "rates": RATES,
                    "step_duration_s": step_s,
                    "refine_steps": 0,
                    "warmup_requests": 4,
                    "warm_prefix_groups": 0,
                    "max_send_lag_ms": 10_000.0,
                    "min_rate_ratio": 0.5,
                    "repeats": 1,
                }
            ),
        }
    )


def _pool() -> pl.DataFrame:
    bodies = [
        json.dumps({"messages": [{"role": "user", "content": "x" * (40 + 4 * (i % 50))}], "max_tokens": 16 + i % 32})
        for i in range(600)
    ]
    return pl.DataFrame({"request_id": [str(i) for i in range(600)], "body": bodies})


def _lags(result) -> dict:
    return {
        "rates": [s.target_rate for s in result.steps],
        "p99_ms": [s.send_lag_ms.p99 for s in result.steps],
        "max_ms": [s.send_lag_max_ms for s in result.steps],
    }


def cli_path(spec, pool) -> dict:
    with simengine.start(simengine.ServiceModel()) as engine:
        return _lags(run_sweep(engine, pool, spec, repeats_label="cli", check_client=False))


def dagster_path(spec, pool) -> dict:
    holder: dict = {}

    @dg.asset
    def sweep_in_dagster(context) -> None:
        with simengine.start(simengine.ServiceModel()) as engine:
            result = run_sweep(
                engine, pool, spec, repeats_label="dagster", check_client=False, progress=context.log.info
            )
        holder.update(_lags(result))

    with dg.instance_for_test() as instance:
        assert dg.materialize([sweep_in_dagster], instance=instance).success
    return holder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--step-s", type=float, default=6.0)
    args = parser.parse_args()
    spec, pool = _spec(args.step_s), _pool()
    load_before = os.getloadavg()[0]
    trials = []
    for trial in range(args.trials):
        for name, path in (
            (("cli", cli_path), ("dagster", dagster_path))
            if trial % 2 == 0
            else (("dagster", dagster_path), ("cli", cli_path))
        ):
            began = time.monotonic()
            lags = path(spec, pool)
            trials.append({"trial": trial, "path": name, "wall_s": round(time.monotonic() - began, 1), **lags})
            print(
                f"trial {trial} {name:<7}: p99 send lag per rate {lags['p99_ms']} ms, max {lags['max_ms']} ms",
                flush=True,
            )
    summary = {}
    for name in ("cli", "dagster"):
        p99 = [v for t in trials if t["path"] == name for v in t["p99_ms"] if v is not None]
        worst = [v for t in trials if t["path"] == name for v in t["max_ms"] if v is not None]
        summary[name] = {
            "median_p99_ms": round(statistics.median(p99), 2),
            "worst_p99_ms": round(max(p99), 2),
            "worst_max_ms": round(max(worst), 2),
            "steps": len(p99),
        }
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cores": os.cpu_count(),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "rates": RATES,
        "step_s": args.step_s,
        "trials": trials,
        "summary": summary,
        "command": f".venv/bin/python benchmarks/dagster_send_lag.py --trials {args.trials} --step-s {args.step_s:g}",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dagster_send_lag.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = [
        "# p99 send lag: the sweep inside a Dagster materialisation vs the CLI path",
        "",
        f"{record['date']}, {record['cores']} cores, load average {record['load_before']} before, "
        f"{record['load_after']} after; simulated engine, rates {RATES} req/s, {args.step_s:g} s steps, "
        f"{args.trials} trials a path (alternating).",
        "",
        "| path | steps | median p99 send lag (ms) | worst p99 (ms) | worst single lag (ms) |",
        "|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        lines.append(f"| {name} | {s['steps']} | {s['median_p99_ms']} | {s['worst_p99_ms']} | {s['worst_max_ms']} |")
    lines += ["", f"Command: `{record['command']}`"]
    (RESULTS / "dagster_send_lag.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
