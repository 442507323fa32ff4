"""The harness's error rates on one H200: an A/A verdict and a planted slowdown (issue: verdicts with
known error rates). The H200 cells of ``benchmarks/results/harness_power.json``.

``run --pair aa|planted`` (GPU machine, one call each, docs/gpu.md): two `transformers serve` engines
of the shipped ``chat_azure_h200`` endpoint with CUDA graphs, started side by side on the one GPU
(each with a fixed KV cache, so the two are the same configuration and both fit), each warmed until
its latency has stopped falling (``loadgen.steady``), then judged by the product's paired sequential
verdict (``loadgen.sequential.sequential_verdict``: rounds A B / B A on the same requests and schedules,
capacity = fitted SLA crossing of every step) through the product's own sweep (``loadgen.sweep``).
Only one engine is under load at a time. ``planted``: the candidate B carries
``engines/patches/planted_slowdown`` (every batch step 1/0.85 times as long, a capacity change of about
-15%), so the harness should judge it ``worse`` than the baseline A.
Writes ``$OUT/power_<pair>.json``.

``report`` (here): ``.gpubench/power/power_*.json`` -> the ``h200`` cells of harness_power.json/.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.gpu_campaign import pool, shipped_endpoint  # noqa: E402
from benchmarks.gpu_transformers_serve import WORK  # noqa: E402
from benchmarks.harness_power import ESTIMATOR, OLD  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SLOWDOWN = REPO / "engines" / "patches" / "planted_slowdown"
# CUDA graphs (the campaign's adopted change) with a fixed KV cache and batch budget: 1,024 blocks of
# 256 tokens (~28 GiB each for this model), so two engines are the same configuration and fit on one H200 beside
# their graph pools (by default each takes ~90% of the free memory, the second would get what is left).
ARGS = [
    "--continuous-batching",
    "--cb-use-cuda-graph",
    "--cb-block-size",
    "256",
    "--cb-num-blocks",
    "1024",
    "--cb-max-batch-tokens",
    "8192",
]
PLANTED_STEP = 1 / 0.85 - 1  # each step 1.176x as long: about -15% capacity where decode steps bind


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _spec_for(spec, slowdown: float):
    env = {**spec.engine.env, "CUDA_VISIBLE_DEVICES": "0"}  # both engines on the one GPU, no lease wait
    if slowdown:
        env["PYTHONPATH"] = os.pathsep.join([str(SLOWDOWN), os.environ.get("PYTHONPATH", "")])
        env["AUTORESEARCH_PLANTED_SLOWDOWN"] = f"{slowdown:.6f}"
    sweep = spec.sweep.model_copy(update={"refine_steps": 0, "warmup_requests": 0})  # steady warm-up instead
    return spec.model_copy(update={"engine": spec.engine.model_copy(update={"env": env}), "sweep": sweep})


def run(args) -> None:
    from engines import start_engine
    from loadgen.steady import warm_until_steady
    from loadgen.sweep import run_sweep
    from loadgen.noise_prior import PRIOR_DF, PRIOR_SD
    from loadgen.sequential import sequential_verdict

    import signal

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # unwind: stop engines, write
    began = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = shipped_endpoint(args.engine_python, args.model_size)
    specs = {"A": _spec_for(spec, 0.0), "B": _spec_for(spec, PLANTED_STEP if args.pair == "planted" else 0.0)}
    data = pool()
    gpu = _gpu_name()
    if args.guess is None:  # rates 0.6-1.4x the guess: one far above the card's capacity teaches the fit little
        args.guess = next((g for card, g in CAPACITY_GUESS.items() if card in gpu), 5.0)
        log(f"capacity guess {args.guess:g} req/s for {gpu}")
    record = {
        "pair": args.pair,
        "engine_args": ARGS,
        "planted_step_fraction": PLANTED_STEP if args.pair == "planted" else 0,
        "sla": spec.sla.model_dump(exclude_none=True),
        "capacity_guess": args.guess,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "estimator": ESTIMATOR,
        "gpu": gpu,
    }
    measured, resumed = _resumed(args.resume)
    if args.resume:
        previous = json.loads(Path(args.resume).read_text())
        record["resumes"] = Path(args.resume).name
        record["resumed_wall_s"] = previous["wall_s"] + previous.get("resumed_wall_s", 0)
        record["resumed_verdict_wall_s"] = previous.get("verdict_wall_s", previous["wall_s"]) + previous.get(
            "resumed_verdict_wall_s", 0
        )
        log(f"resuming {record['resumes']}: {len(measured['A'])} round(s) measured there, on other engines")
    if measured["A"]:
        from loadgen.verdict import judge_rounds

        look = judge_rounds(
            measured["A"], measured["B"], max_rounds=args.max_rounds, prior_var=PRIOR_SD**2, prior_df=PRIOR_DF
        )
        if look.verdict != "undecided":
            raise SystemExit(f"{args.resume} is already decided ({look.sentence()}): nothing to resume")
    engines = {}
    try:
        for side in ("A", "B"):
            engines[side] = start_engine(specs[side], args_override=ARGS, workdir=out / f"engine_{side}")
            record[f"startup_s_{side}"] = engines[side].startup_s
            log(f"engine {side} healthy in {engines[side].startup_s:.0f} s")
        if args.pair == "planted":
            tail = engines["B"].log_tail(200)
            record["patch_applied"] = "planted slowdown: every transformers batch step" in tail
            if not record["patch_applied"]:
                raise SystemExit("the planted slowdown did not apply to engine B:\n" + tail[-3000:])
        for side in ("A", "B"):  # one request each first: the cache is sized at the first request, from
            # the memory free then; both must be sized before either grows its graph pools
            warm_until_steady(engines[side], data, specs[side], 1.0, burst_s=2, max_bursts=1)
        for side in ("A", "B"):
            warm = warm_until_steady(
                engines[side], data, specs[side], args.guess * 0.8, burst_s=6, max_bursts=args.warm_bursts, progress=log
            )
            record[f"warmup_{side}"] = warm.model_dump()
            log(f"engine {side}: {warm.describe()}")
        cursor = max(getattr(e, "pool_cursor", 0) for e in engines.values())
        for e in engines.values():  # both walk the same requests from here (common random numbers)
            e.pool_cursor = cursor
        sweeps = record["sweeps"] = list(resumed)  # kept as they come: a call cut by its limit still records them

        def measure(side: str, i: int, rates: list[float]):
            t0 = time.monotonic()
            sweep = run_sweep(
                engines[side], data, specs[side], rates=rates, repeats_label=f"{side}{i}", check_client=False
            )
            sweeps.append(
                {
                    "side": side,
                    "round": i,
                    "wall_s": round(time.monotonic() - t0, 1),
                    "steps": [s.model_dump(exclude={"metrics_samples"}) for s in sweep.steps],
                    "validity": sweep.validity,
                    "invalid_reason": sweep.invalid_reason,
                }
            )
            log(
                f"{side} round {i + 1}: "
                + ", ".join(f"{s.target_rate:g}:{'ok' if s.within_sla else 'x'}" for s in sweep.steps)
                + f" in {time.monotonic() - t0:.0f} s"
            )
            return round_steps(sweep)

        verdict_began = time.monotonic()
        stats, _ = sequential_verdict(
            measure,
            args.guess,
            max_rounds=args.max_rounds,
            min_rounds=2,
            prior_var=PRIOR_SD**2,
            prior_df=PRIOR_DF,
            progress=log,
            time_left=lambda: args.window_s - (time.monotonic() - began),
            measured=measured,
        )
        record["verdict"] = stats.model_dump()
        record["verdict_sentence"] = stats.sentence()
        record["verdict_wall_s"] = round(time.monotonic() - verdict_began, 1)
        log(f"verdict ({args.pair}, candidate B against baseline A): {stats.sentence()}")
    finally:
        for e in engines.values():
            e.stop()
        record["wall_s"] = round(time.monotonic() - began, 1)
        (out / f"power_{args.pair}{args.tag}.json").write_text(json.dumps(record, indent=1, default=str))
        log(f"wrote power_{args.pair}{args.tag}.json")


#: The shipped endpoint's capacity per card, as the trials measured it (docs/gpu.md): about 5.5 req/s on
#: the H200, 3.9 on the H100 80GB.
CAPACITY_GUESS = {"H200": 5.5, "H100": 4.0}


def _gpu_name() -> str:
    """The card the trial ran on: the device tool lends an H100 or an H200 under one name."""
    import subprocess

    try:
        names = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout.split("\n")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return names[0].strip() or "unknown"


def round_steps(sweep):
    """A sweep's steps as one round of the sequential verdict: every step invalid when the sweep was (the
    verdict is then invalid with its reason)."""
    if sweep.validity != "valid":
        return [
            s.model_copy(update={"validity": "invalid", "invalid_reason": sweep.invalid_reason}) for s in sweep.steps
        ]
    return sweep.steps


def _resumed(path: str | None) -> tuple[dict, list]:
    """The rounds a previous call measured on both sides (its valid sweeps), to continue its verdict."""
    from loadgen.results import StepResult

    if not path:
        return {"A": [], "B": []}, []
    sweeps = [s for s in json.loads(Path(path).read_text()).get("sweeps", []) if s["validity"] == "valid"]
    done = sorted({s["round"] for s in sweeps if s["side"] == "A"} & {s["round"] for s in sweeps if s["side"] == "B"})
    kept = [s | {"from": Path(path).name} for s in sweeps if s["round"] in done]
    by = {(s["side"], s["round"]): [StepResult(**st) for st in s["steps"]] for s in kept}
    return {side: [by[(side, i)] for i in done] for side in ("A", "B")}, kept


def report(args) -> None:
    """The h200 cells: the verdict of each pair as the harness gave it (A/A: expected ``same``;
    planted: the slowed candidate against the baseline, expected ``worse``)."""
    from benchmarks.harness_power import write_markdown

    rows = [json.loads(p.read_text()) | {"file": p.name} for p in sorted(Path(args.dir).glob("power_*.json"))]
    by_file = {r["file"]: r for r in rows}

    def calls(r: dict) -> int:
        """Calls in a verdict's chain: a resumed call may itself have continued a resumed one."""
        return 1 + (calls(by_file[r["resumes"]]) if r.get("resumes") in by_file else bool(r.get("resumes")))

    superseded = {r["resumes"] for r in rows if r.get("resumes")}  # a resumed verdict replaces the call it continued
    rows = [r for r in rows if r["file"] not in superseded]
    cells = []

    # one cell per card too: the device tool lends an H100 or an H200 under one kind (the record names it
    # from 2026-12-05 on; "not recorded" before)
    def key(r: dict) -> tuple[str, str, str]:
        return r.get("estimator", OLD), r["pair"], r.get("gpu", "not recorded")

    for estimator, pair, gpu in sorted({key(r) for r in rows}):
        group = [(r, r.get("verdict") or _judge_cut(r)) for r in rows if key(r) == (estimator, pair, gpu)]
        counts = Counter(v["verdict"] for _, v in group)
        mdes = [v["mde"] for _, v in group if v.get("mde") is not None]
        first = group[0][0]
        cells.append(
            {
                "instrument": "h200",
                "gpu": gpu,
                "mode": "real",
                "estimator": estimator,
                "planted_effect": -0.15 if pair == "planted" else 0.0,
                "planted_as": (
                    f"the candidate's batch steps x{1 + first['planted_step_fraction']:.3f} "
                    "(engines/patches/planted_slowdown)"
                    if pair == "planted"
                    else "the same configuration on both sides"
                ),
                "trials": len(group),
                "verdicts": {k: counts.get(k, 0) for k in ("better", "same", "worse", "invalid")},
                "trial_verdicts": [
                    {
                        "file": r.get("file"),
                        "gpu": r.get("gpu", "not recorded"),
                        "verdict": r.get("verdict_sentence") or v.get("sentence"),
                        "rounds": v.get("rounds"),
                        "calls": calls(r),
                        "cut": v.get("cut"),
                        "gpu_minutes": round((r["wall_s"] + r.get("resumed_wall_s", 0)) / 60, 2),
                    }
                    for r, v in group
                ],
                "effect_median": float(np.median([v["effect"] for _, v in group if v.get("effect") is not None])),
                "noise_threshold": max(mdes) if mdes else None,
                "mde_median": float(np.median(mdes)) if mdes else None,
                "rounds_mean": float(np.mean([v.get("rounds") or 0 for _, v in group])),
                "minutes_per_verdict": round(
                    float(
                        np.mean(
                            [
                                r.get("verdict_wall_s", r["wall_s"]) + r.get("resumed_verdict_wall_s", 0)
                                for r, _ in group
                            ]
                        )
                    )
                    / 60,
                    2,
                ),
                # a resumed verdict's GPU time is both calls' (two engine starts and warm-ups)
                "gpu_minutes_per_verdict": round(
                    float(np.mean([r["wall_s"] + r.get("resumed_wall_s", 0) for r, _ in group])) / 60, 2
                ),
                ("false_verdict_rate" if pair == "aa" else "power"): round(
                    (counts.get("better", 0) + counts.get("worse", 0)) / len(group)
                    if pair == "aa"
                    else counts.get("worse", 0) / len(group),
                    4,
                ),
            }
        )
    out = RESULTS / "harness_power.json"
    doc = json.loads(out.read_text()) if out.exists() else {"cells": []}
    doc["cells"] = [c for c in doc["cells"] if c["instrument"] != "h200"] + cells
    doc.setdefault("commands", {})["h200"] = (
        "python benchmarks/gpu_power.py run --pair aa|planted --out $OUT "
        "(GPU machine, one call each; docs/gpu.md), then gpu_power.py report"
    )
    out.write_text(json.dumps(doc, indent=2) + "\n")
    write_markdown(doc)
    print(json.dumps(cells, indent=1))


def _judge_cut(record: dict) -> dict:
    """A call cut by its time limit before the verdict: the rounds both sides completed, judged here as
    the final look (what the time rule would have done had it stopped there)."""
    from loadgen.results import StepResult
    from loadgen.noise_prior import PRIOR_DF, PRIOR_SD
    from loadgen.verdict import judge_rounds

    by_side: dict[str, dict[int, list]] = {"A": {}, "B": {}}
    for sweep in record.get("sweeps", []):
        if sweep["validity"] == "valid":
            by_side[sweep["side"]][sweep["round"]] = [StepResult(**st) for st in sweep["steps"]]
    done = sorted(set(by_side["A"]) & set(by_side["B"]))
    if not done:
        return {"verdict": "invalid", "reason": "cut before one round was measured on both sides"}
    stats = judge_rounds(
        [by_side["A"][i] for i in done],
        [by_side["B"][i] for i in done],
        final=True,
        prior_var=PRIOR_SD**2,
        prior_df=PRIOR_DF,
    )
    if stats.verdict == "undecided":
        stats = stats.model_copy(update={"verdict": "same"})
    return stats.model_dump() | {
        "sentence": stats.sentence(),
        "cut": f"the call's time limit cut it after {len(done)} complete round(s); judged here as the final look",
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--pair", choices=["aa", "planted"], required=True)
    r.add_argument("--out", required=True)
    r.add_argument(
        "--guess", type=float, help="capacity guess, req/s (rates 0.6-1.4x it; default: the card's, CAPACITY_GUESS)"
    )
    r.add_argument("--max-rounds", type=int, default=4)
    r.add_argument("--window-s", type=float, default=540)
    r.add_argument("--warm-bursts", type=int, default=4, help="at most this many warm-up bursts per engine")
    r.add_argument("--resume", help="a previous call's power_*.json: continue its verdict with more rounds")
    r.add_argument("--tag", default="", help="appended to the output file's name (a second trial)")
    r.add_argument("--engine-python", default=sys.executable)
    r.add_argument("--model-size", default="442m", help="'tiny' tries the pipeline on a CPU machine")
    q = sub.add_parser("report")
    q.add_argument("--dir", default=str(WORK / "power"))
    args = ap.parse_args(argv)
    run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    main()
