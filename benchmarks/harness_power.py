"""The harness's operating characteristics: false verdicts on A/A trials, power on planted effects.

    .venv/bin/python benchmarks/harness_power.py                       # simulated engine, virtual time
    .venv/bin/python benchmarks/harness_power.py --http --trials 10    # simulated engine over HTTP

Ground truth is the simulated engine (loadgen/simengine.py): a continuous-batching service model
whose capacity within the SLA is measured once at length (long virtual steps), so a planted effect
is a capacity change of known size (its speed is solved until the measured-at-length capacity
moves by exactly the planted fraction). Each trial is one verdict of the product's paired,
sequential rule (loadgen/verdict.py) on the product's estimator (loadgen/capacity.py), with the
noise floor's A/A rounds (measured first, as a campaign does) as its between-run prior.

Virtual time runs the same scheduler as the HTTP server without sockets (thousands of steps a
minute); ``--http`` sends every step through the real open-loop client to the server in its own
process. Both write cells to benchmarks/results/harness_power.json (merged by instrument/mode) and
a readable harness_power.md beside it.
"""

from __future__ import annotations

import argparse
from functools import partial
import json
import math
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs.config import SLASpec  # noqa: E402
from loadgen import arrivals, simengine  # noqa: E402
from loadgen.capacity import SOFT_BANDWIDTH, estimate  # noqa: E402
from loadgen.runner import LagBounds, run_open_loop  # noqa: E402
from loadgen.stats import summarize  # noqa: E402
from loadgen.noise_prior import PRIOR_DF, PRIOR_SD  # noqa: E402
from loadgen.sequential import RECENTRED, sequential_verdict  # noqa: E402
from loadgen.verdict import (  # noqa: E402
    VerdictStats,
    between_variance,
    round_differences,
    judge_rounds,
    judge_service_rates,
    service_rate_differences,
)

SLA = SLASpec(ttft_ms=300, itl_ms=50, max_error_rate=0.01)
POOL = 4000
RNG = np.random.default_rng(20261201)
PROMPTS = (RNG.lognormal(math.log(300), 0.6, POOL)).astype(int) + 8  # tokens
OUTPUTS = RNG.integers(16, 65, POOL)
BASE = simengine.ServiceModel(run_jitter_cv=0.01)
RESULTS = ROOT / "benchmarks" / "results"
# what the capacity fit counted: trials under another estimator are kept as cells of their own
ESTIMATOR = f"smoothed counts (bandwidth {SOFT_BANDWIDTH})"
OLD = "plain counts"
QUEUE = "service rate from queue growth"
#: --estimator: (label, the verdict's judgement, later rounds' rates as factors of what was found)
ESTIMATORS = {
    "crossing": (ESTIMATOR, judge_rounds, RECENTRED),
    # every step must queue; rounds recentre, so no step is common to all of them: one statistic at every
    # look (matched steps are the campaign's fixed ladder's: benchmarks/campaign_verdicts.py)
    "service_rate": (QUEUE, judge_service_rates, (1.2, 1.4, 1.6, 1.8)),
}


def virtual_step(model: simengine.ServiceModel, rate: float, duration_s: float, seed: int, run_seed: int):
    return simengine.virtual_step(model, rate, duration_s, PROMPTS, OUTPUTS, SLA, seed=seed, run_seed=run_seed)


def body(i: int) -> dict:
    # about four characters a token, as the server counts them
    return {"messages": [{"role": "user", "content": "x" * (4 * int(PROMPTS[i]))}], "max_tokens": int(OUTPUTS[i])}


def http_step(engine, rate: float, duration_s: float, seed: int):
    schedule = arrivals.poisson(rate, duration_s, seed=seed)
    start = int(np.random.default_rng(seed).integers(0, POOL))
    bodies = [body((start + i) % POOL) for i in range(len(schedule))]
    outcome = run_open_loop(
        engine.base_url,
        engine.served_model,
        bodies,
        schedule,
        duration_s=duration_s,
        isolate=True,
        lag_bounds=LagBounds(p99_ms=20.0, min_rate_ratio=0.95),
        timeout_s=30,
    )
    time.sleep(0.5)  # drain: the next step starts on an idle engine
    return summarize(outcome, SLA, target_rate=rate)


def true_capacity(model: simengine.ServiceModel, guess: float) -> float:
    """The capacity within the SLA measured at length: long virtual steps around the guess."""
    steps = [virtual_step(model, guess * f, 400.0, 10_000 + k, 77 + k) for k, f in enumerate(np.linspace(0.8, 1.2, 9))]
    return estimate(steps, boot=0).capacity


def planted(effect: float, base_capacity: float) -> simengine.ServiceModel:
    """The model whose capacity measured at length is (1 + effect) x the base's (secant on speed)."""
    if effect == 0:
        return BASE
    lo_speed, lo_ratio = 1.0, 1.0
    speed = 1 + effect
    for _ in range(6):
        ratio = true_capacity(BASE.planted(speed - 1), base_capacity * (1 + effect)) / base_capacity
        if abs(ratio - (1 + effect)) < 0.002:
            break
        slope = (ratio - lo_ratio) / (speed - lo_speed)
        lo_speed, lo_ratio = speed, ratio
        speed = speed + (1 + effect - ratio) / slope
    return BASE.planted(speed - 1)


def sweep_side(
    model: simengine.ServiceModel, side: str, i: int, rates: list[float], seed: int, step_s: float, http: bool
):
    """One side's sweep of round ``i``: a fresh engine start, the round's schedules (the same for both
    sides: common random numbers), virtual time or the HTTP server."""
    start_seed = seed * 1000 + i * 2 + (side == "B")
    schedule_seeds = [seed * 7919 + int(r * 1000) + i * 31 for r in rates]
    if http:
        with simengine.start(model, seed=start_seed) as engine:
            return [http_step(engine, r, step_s, sched) for r, sched in zip(rates, schedule_seeds)]
    started = model.started(start_seed)
    return [
        virtual_step(started, r, step_s, sched, start_seed * 13 + k)
        for k, (r, sched) in enumerate(zip(rates, schedule_seeds))
    ]


def trial(
    candidate: simengine.ServiceModel,
    seed: int,
    guess: float,
    step_s: float,
    prior,
    http: bool,
    max_rounds: int = 4,
    estimator: str = "crossing",
    futility: bool = False,
):
    """One verdict: baseline BASE vs ``candidate``, a fresh engine start per side and round; ``futility``:
    the look before the last stops as ``same`` with no gain in sight (loadgen.verdict.FUTILITY_SHARE), as a campaign's."""
    measured_s = [0.0]

    def measure(side: str, i: int, rates: list[float]):
        measured_s[0] += len(rates) * (step_s + 0.5)
        return sweep_side(BASE if side == "A" else candidate, side, i, rates, seed, step_s, http)

    _, judge, grid = ESTIMATORS[estimator]
    judge = partial(judge, futility=futility)
    stats, _ = sequential_verdict(
        measure,
        guess,
        seed=seed,
        prior_var=prior[0],
        prior_df=prior[1],
        max_rounds=max_rounds,
        judge=judge,
        recentred=grid,
    )
    return stats, measured_s[0]


def noise_floor(guess: float, step_s: float, rounds: int, http: bool, seed: int = 999, estimator: str = "crossing"):
    """A/A rounds of the baseline against itself: the between-run variance of a paired difference."""
    rates = [guess * f for f in ((0.8, 0.9, 1.0, 1.1, 1.2) if estimator == "crossing" else ESTIMATORS[estimator][2])]
    a = [sweep_side(BASE, "A", i, rates, seed, step_s, http) for i in range(rounds)]
    b = [sweep_side(BASE, "B", i, rates, seed, step_s, http) for i in range(rounds)]
    diffs = round_differences(a, b) if estimator == "crossing" else service_rate_differences(a, b)
    var, df = between_variance(diffs)
    return var or 0.0, df


# --- real vLLM on the CPU: a planted slowdown (engines/patches/planted_slowdown) -------------------


def vllm_cpu_main(args) -> None:
    """Trials on real vLLM serving SmolLM2 (prefix caching on): A/A, and a planted slowdown of the
    baseline (every engine step (1 + s) times as long), so the unpatched candidate is the faster side.
    Each trial's verdict is appended to benchmarks/results/harness_power_vllm_cpu.jsonl as it finishes
    (this takes hours on 2 cores: the run resumes where it stopped); cells are rebuilt from that file."""
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
    # the rounds' rates are the verdict's own (sequential_verdict): no refinement, no steps added for an estimator
    sweep = spec.sweep.model_copy(update={"refine_steps": 0, "estimator": "crossing"})
    spec = spec.model_copy(update={"sweep": sweep})
    if args.step_s:  # longer steps: more requests near the crossing, and queues that reach their steady state
        spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"step_duration_s": args.step_s})})
    args.step_s = spec.sweep.step_duration_s
    if args.itl_ms:  # the endpoint's 250 ms is over for 3-6% of gaps at every rate: see docs/measurement.md
        spec = spec.model_copy(update={"sla": spec.sla.model_copy(update={"itl_ms": args.itl_ms})})
    pool = load_pool(spec)
    patch = str(ROOT / "engines" / "patches" / "planted_slowdown")
    log = RESULTS / "harness_power_vllm_cpu.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    if args.report_only:  # the cells of the trials recorded so far (a run stopped between trials)
        return write_vllm_cells(done, args)

    def slowed(fraction: float):
        env = {**spec.engine.env, "PYTHONPATH": patch, "AUTORESEARCH_PLANTED_SLOWDOWN": str(fraction)}
        return spec.model_copy(update={"engine": spec.engine.model_copy(update={"env": env})})

    def measure_with(a_spec, b_spec, keep: Path | None = None):
        def measure(side: str, i: int, rates: list[float]):
            workdir = RESULTS.parent / ".runs" / "power"
            records = keep / f"r{i}-{side}" if keep else None
            with run_engine(a_spec if side == "A" else b_spec, workdir=workdir, purpose="sweep") as engine:
                sweep = run_sweep(
                    engine,
                    pool,
                    spec,
                    rates=rates,
                    repeats_label=f"{side}{i}",
                    records_dir=records,
                    stop_when_broken=args.estimator == "crossing",  # the service rate reads the overloaded steps
                )
            if keep:  # the round, request by request, to judge again with another estimator
                (keep / f"r{i}-{side}.json").write_text(sweep.model_dump_json())
            if sweep.validity != "valid":
                return [
                    st.model_copy(update={"validity": "invalid", "invalid_reason": sweep.invalid_reason})
                    for st in sweep.steps
                ] or []
            return sweep.steps

        return measure

    effects = [float(e) for e in args.effects.split(",")]
    stop = RESULTS.parent / ".runs" / "power.stop"  # touch it to stop after the trial in hand
    for k in range(args.trials):  # the cells take turns, so a run stopped early leaves each with trials
        for effect in effects:
            key = (ESTIMATORS[args.estimator][0], args.itl_ms or None, args.step_s, args.grid, effect)
            have = [d for d in done if _cell(d) == key]
            if len(have) > k:
                continue
            if stop.exists():
                print(f"stopped: {stop} exists", flush=True)
                return write_vllm_cells(done, args)
            index = max((d["trial"] for d in have), default=-1) + 1  # a fresh number: kept rounds are never overwritten
            done.append(
                vllm_trial(effect, index, slowed(effect) if effect > 0 else spec, spec, measure_with, args, log)
            )
            write_vllm_cells(done, args)
    write_vllm_cells(done, args)


def vllm_trial(effect: float, k: int, base, spec, measure_with, args, log: Path) -> dict:
    """One vLLM CPU verdict: the (slowed) baseline against the unpatched engine, appended to ``log``."""
    from engines import EngineRunInvalid

    t0 = time.time()
    keep = args.keep / f"e{effect:g}-t{k}" if args.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    try:  # the product's own prior for a new endpoint (loadgen.noise_prior.PRIOR_SD/PRIOR_DF), updated by the rounds
        stats, _ = sequential_verdict(
            measure_with(base, spec, keep),
            args.capacity_guess,
            seed=k + 1,
            max_rounds=args.max_rounds,
            prior_var=PRIOR_SD**2,
            prior_df=PRIOR_DF,
            recentred=args.grid,
            judge=ESTIMATORS[args.estimator][1],
        )
    except EngineRunInvalid as exc:  # a launch that failed or an engine that died: an invalid trial
        stats = VerdictStats(verdict="invalid", reason=exc.reason)
    row = {
        "planted_effect": effect,
        "trial": k,
        "verdict": stats.verdict,
        "effect": stats.effect,
        "low": stats.low,
        "high": stats.high,
        "mde": stats.mde,
        "rounds": stats.rounds,
        "reason": stats.reason,
        "minutes": round((time.time() - t0) / 60, 2),
        "se_bootstrap": stats.se_bootstrap,
        "se_between": stats.se_between,
        "capacity_guess": args.capacity_guess,
        "estimator": ESTIMATORS[args.estimator][0],
        "itl_ms": args.itl_ms or None,  # None: the endpoint's SLA as declared
        "step_s": args.step_s,
        "grid": list(args.grid),
    }
    with log.open("a") as handle:
        handle.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)
    return row


def _cell(row: dict) -> tuple[str, float | None, float, float, tuple[float, ...], float]:
    """Which cell a vLLM CPU trial belongs to: its estimator, the ITL limit it ran under, its step duration
    and the grid of its later rounds (rows before those were options: the endpoint's 12 s, RECENTRED),
    its planted effect."""
    grid = tuple(row.get("grid", RECENTRED))
    return row.get("estimator", OLD), row.get("itl_ms"), row.get("step_s", 12.0), grid, row["planted_effect"]


def _old(key: tuple) -> tuple:
    """``key`` with the step duration and grid every trial had before they were options."""
    return (*key[:2], 12.0, RECENTRED, key[-1])


def write_vllm_cells(rows: list[dict], args) -> None:
    cells = []
    for key in sorted({_cell(r) for r in rows}, key=str):
        estimator, itl_ms, step_s, grid, effect = key
        group = [r for r in rows if _cell(r) == key]
        counts = Counter(r["verdict"] for r in group)
        mdes = [r["mde"] for r in group if r["mde"] is not None]
        cells.append(
            {
                "instrument": "vllm_cpu",
                "mode": "real",
                "planted_effect": effect,
                "planted_as": f"baseline step time x{1 + effect:g} (engines/patches/planted_slowdown)",
                "estimator": estimator
                + (f", ITL limit {itl_ms:g} ms" if itl_ms else "")
                + (
                    f", {step_s:g} s steps, later rounds at {'/'.join(f'{f:g}' for f in grid)}x"
                    if key != _old(key)
                    else ""
                ),
                "step_s": step_s,
                "grid": list(grid),
                "trials": len(group),
                "verdicts": {v: counts.get(v, 0) for v in ("better", "same", "worse", "invalid")},
                ("false_verdict_rate" if effect == 0 else "power"): round(
                    (counts.get("better", 0) + counts.get("worse", 0)) / len(group)
                    if effect == 0
                    else counts.get("better", 0) / len(group),
                    4,
                ),
                "noise_threshold": round(float(np.median(mdes)), 4) if mdes else None,
                "mde_median": round(float(np.median(mdes)), 4) if mdes else None,
                "effect_median": round(float(np.median([r["effect"] for r in group if r["effect"] is not None])), 4)
                if any(r["effect"] is not None for r in group)
                else None,
                "interval_width_median": round(
                    float(np.median([r["high"] - r["low"] for r in group if r["low"] is not None])), 4
                )
                if any(r["low"] is not None and r["high"] is not None for r in group)
                else None,
                "trials_target": args.trials,
                "complete": len(group) >= args.trials,  # fewer: a run stopped between trials, resumable
                "max_rounds": args.max_rounds,
                "rounds_mean": round(float(np.mean([r["rounds"] for r in group])), 2),
                "minutes_per_verdict": round(float(np.mean([r["minutes"] for r in group])), 2),
            }
        )
    out = RESULTS / "harness_power.json"
    doc = json.loads(out.read_text()) if out.exists() else {"cells": []}
    doc["cells"] = [c for c in doc["cells"] if c["instrument"] != "vllm_cpu"] + cells
    doc.setdefault("commands", {})["vllm_cpu"] = (
        f"python benchmarks/harness_power.py --instrument vllm_cpu --trials {args.trials} --effects {args.effects} "
        f"--max-rounds {args.max_rounds} --capacity-guess {args.capacity_guess:g}"
        + (f" --itl-ms {args.itl_ms:g}" if args.itl_ms else "")
        + (f" --step-s {args.step_s:g}" if args.step_s != 12.0 else "")
        + (f" --estimator {args.estimator}" if args.estimator != "crossing" else "")
        + (f" --grid {','.join(f'{f:g}' for f in args.grid)}" if args.grid != ESTIMATORS[args.estimator][2] else "")
        + " --keep DIR  (cells take turns; "
        "resumes from harness_power_vllm_cpu.jsonl; --report-only rebuilds the cells)"
    )
    out.write_text(json.dumps(doc, indent=2) + "\n")
    write_markdown(doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--effects", default="0,0.05,0.10,0.20")
    ap.add_argument("--step-s", type=float, help="seconds per step (simulated: 6; vllm_cpu: the endpoint's)")
    ap.add_argument(
        "--grid",
        type=lambda text: tuple(float(f) for f in text.split(",")),
        help="vllm_cpu: rates of the later rounds, as factors of the capacity measured so far (default: the "
        "estimator's, loadgen.sequential.RECENTRED for the crossing)",
    )
    ap.add_argument(
        "--estimator",
        choices=sorted(ESTIMATORS),
        default="crossing",
        help="crossing: the fitted SLA crossing; service_rate: the engine's service rate from queue growth",
    )
    ap.add_argument("--floor-rounds", type=int, default=8)
    ap.add_argument("--http", action="store_true")
    ap.add_argument("--jobs", type=int, default=1, help="simulated: trials run in this many processes")
    ap.add_argument("--max-rounds", type=int, default=6)
    ap.add_argument(
        "--futility",
        action="store_true",
        help="simulated: the look before the last stops as same with no gain in sight",
    )
    ap.add_argument("--instrument", choices=["simulated", "vllm_cpu"], default="simulated")
    ap.add_argument("--report-only", action="store_true", help="vllm_cpu: rebuild the cells from the trials recorded")
    ap.add_argument("--capacity-guess", type=float, default=2.8, help="vllm_cpu: the baseline's capacity, req/s")
    ap.add_argument("--keep", type=Path, help="vllm_cpu: keep each trial's rounds here, request by request")
    ap.add_argument("--itl-ms", type=float, help="vllm_cpu: the SLA's ITL limit instead of the endpoint's")
    args = ap.parse_args()
    args.grid = args.grid or ESTIMATORS[args.estimator][2]
    if args.instrument == "vllm_cpu":
        return vllm_cpu_main(args)
    args.step_s = args.step_s or 6.0
    began = time.time()
    base_capacity = true_capacity(BASE, 24.0)
    print(f"simulated engine: capacity at length {base_capacity:.3f} req/s within {SLA.model_dump(exclude_none=True)}")
    label, _, _ = ESTIMATORS[args.estimator]
    label += f", at most {args.max_rounds} rounds" if args.max_rounds != 6 else ""  # 6: the recorded cells'
    label += ", futility stops" if args.futility else ""
    # the service rate is found from steps that queue: its rates sit around what the engine serves at length
    served = virtual_step(BASE, 90.0, 60.0, 1, 1).throughput_rps
    guess = base_capacity if args.estimator == "crossing" else served * 1.5
    prior = noise_floor(
        base_capacity if args.estimator == "crossing" else served,
        args.step_s,
        args.floor_rounds,
        args.http,
        estimator=args.estimator,
    )
    print(
        f"noise floor: {args.floor_rounds} A/A rounds, between-round sd of a paired difference "
        f"{math.sqrt(prior[0]):.2%} ({prior[1]} df)"
    )
    mode = "http" if args.http else "virtual"
    cells = []
    for effect in [float(e) for e in args.effects.split(",")]:
        model = planted(effect, base_capacity)
        truth = true_capacity(model, base_capacity * (1 + effect)) / base_capacity - 1
        t0 = time.time()
        with ProcessPoolExecutor(args.jobs) as pool:  # trials are independent: one per core
            results = list(
                pool.map(
                    trial,
                    *zip(
                        *[
                            (
                                model,
                                1 + s,
                                guess,
                                args.step_s,
                                prior,
                                args.http,
                                args.max_rounds,
                                args.estimator,
                                args.futility,
                            )
                            for s in range(args.trials)
                        ]
                    ),
                )
            )
        stats = [r[0] for r in results]
        counts = Counter(s.verdict for s in stats)
        cell = {
            "instrument": "simulated",
            "mode": mode,
            "planted_effect": effect,
            "measured_effect_at_length": round(truth, 4),
            "estimator": label,
            "trials": args.trials,
            "verdicts": {v: counts.get(v, 0) for v in ("better", "same", "worse", "invalid")},
            "false_verdict_rate" if effect == 0 else "power": round(
                (counts.get("better", 0) + counts.get("worse", 0)) / args.trials
                if effect == 0
                else counts.get("better", 0) / args.trials,
                4,
            ),
            "noise_threshold": round(float(np.median([s.mde for s in stats if s.mde is not None])), 4),
            "mde_median": round(float(np.median([s.mde for s in stats if s.mde is not None])), 4),
            "effect_median": round(float(np.median([s.effect for s in stats if s.effect is not None])), 4)
            if any(s.effect is not None for s in stats)
            else None,
            "interval_width_median": round(
                float(np.median([s.high - s.low for s in stats if s.high is not None and s.low is not None])), 4
            ),
            "rounds_mean": round(float(np.mean([s.rounds for s in stats])), 2),
            "minutes_per_verdict": round(float(np.mean([r[1] for r in results])) / 60, 2),
            "compute_s_per_verdict": round((time.time() - t0) * args.jobs / args.trials, 3),
        }
        cells.append(cell)
        print(json.dumps(cell))
    # the cells (6 rounds) stay in harness_power.json; other designs (the campaign's 2 rounds,
    # futility stops) are recorded beside it, so no reader mistakes their power for the targets' design
    out = RESULTS / (
        "harness_power.json" if args.max_rounds == 6 and not args.futility else "harness_power_designs.json"
    )
    doc = json.loads(out.read_text()) if out.exists() else {"cells": []}
    doc["cells"] = [
        c
        for c in doc["cells"]
        if not (c["instrument"] == "simulated" and c.get("mode") == mode and c.get("estimator") == label)
    ] + cells
    key = f"simulated/{mode}" + ("" if args.estimator == "crossing" else f"/{args.estimator}")
    key += (f"/max{args.max_rounds}" if args.max_rounds != 6 else "") + ("/futility" if args.futility else "")
    doc.setdefault("commands", {})[key] = "python benchmarks/harness_power.py " + " ".join(sys.argv[1:])
    doc.setdefault("design", {}).update(
        {
            "alpha": 0.05,
            "max_rounds": args.max_rounds,
            "equivalence": 0.02,
            "step_s": args.step_s,
            "rule": "paired rounds A B / B A, capacity = fitted SLA crossing of every step, interval = "
            "max(paired block bootstrap, between-round spread pooled with the noise floor's A/A rounds), "
            "alpha spent alpha/4 over the early looks and 3 alpha/4 at the last (Bonferroni), t quantile on the pooled degrees of freedom",
        }
    )
    doc.setdefault("noise_floor", {})[key] = {
        "rounds": args.floor_rounds,
        "between_sd": round(math.sqrt(prior[0]), 4),
        "df": prior[1],
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    write_markdown(doc, out.with_suffix(".md"))
    print(f"wrote {out.relative_to(ROOT)} in {time.time() - began:.0f} s")


def write_markdown(doc: dict, path: Path = RESULTS / "harness_power.md") -> None:
    if "design" not in doc:
        doc["design"] = {"rule": "see loadgen/verdict.py", "alpha": 0.05, "max_rounds": 6}
    lines = (
        ["# Harness power: false verdicts and power of the paired sequential verdict", "", "Commands:", ""]
        + [f"    {c}" for c in doc.get("commands", {}).values()]
        + [
            "",
            f"Design: {doc['design']['rule']}; alpha {doc['design']['alpha']}, at most "
            f"{doc['design']['max_rounds']} rounds.",
            "",
            "| instrument | mode | planted | trials | better | same | worse | invalid | false rate / power | "
            "median MDE | median effect | rounds | minutes/verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    )
    for c in doc["cells"]:
        v = c["verdicts"]
        rate = c.get("false_verdict_rate", c.get("power"))
        lines.append(
            f"| {c['instrument']}{' (' + c['gpu'] + ')' if c.get('gpu') else ''} | "
            f"{c.get('mode', '')}{', ' + c['estimator'] if c.get('estimator') else ''} | "
            f"{c['planted_effect']:+.0%} | {c['trials']}"
            + ("" if c.get("complete", True) else f" of {c['trials_target']} (partial, resumable)")
            + " | "
            f"{v['better']} | {v['same']} | {v['worse']} | {v['invalid']} | {rate:.0%} | "
            f"{c['mde_median']:.1%} | {c['effect_median'] if c['effect_median'] is None else format(c['effect_median'], '+.1%')} | "
            f"{c['rounds_mean']} | {c['minutes_per_verdict']} |"
        )
    lines += [
        "",
        "false rate: A/A trials judged better or worse (target <= 5%); power: planted gains judged "
        "better (targets >= 80% at +5%, >= 90% at +10%). minutes/verdict: engine time the verdict's "
        "steps take in real time (virtual mode simulates it).",
    ]
    for c in doc["cells"]:
        if c.get("trial_verdicts"):
            lines += [
                "",
                f"{c['instrument']}, planted {c['planted_effect']:+.0%} ({c['planted_as']})"
                + (f", card: {c['gpu']}" if c.get("gpu") else "")
                + (f", {c['estimator']}" if c.get("estimator") else "")
                + ": "
                f"{c.get('gpu_minutes_per_verdict')} GPU minutes per verdict (engine starts and warm-ups included)",
                "",
            ]
            lines += [
                f"- `{t['file']}`: {t['verdict']}"
                + (f" (resumed: {t['calls']} calls)" if t.get("calls", 1) > 1 else "")
                for t in c["trial_verdicts"]
            ]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
