"""Noise between engine launches against noise within one: what the main job's A/A pairs can see.

    .venv/bin/python benchmarks/launch_variance.py run --launches 4 --sweeps 2 --out .autoresearch/launch_variance
    .venv/bin/python benchmarks/launch_variance.py report --out .autoresearch/launch_variance

``--engine-args "..."`` sweeps another configuration of the endpoint (the whole argument list, e.g. the
main job's working baseline with ``--enable-prefix-caching``). Each sweep's engine CPU seconds per wall
second and the host's stolen CPU share (loadgen.watch) are reported beside its estimates: a sweep slower
than its repeat either had less CPU or a slower one.

``--host-speed-probe`` times one core's pass over memory before each step (sweep.host_speed_probe,
loadgen.host_speed); the report then also states each sweep's service rate at one host speed common to
all sweeps (``service_rate_at_host``), with the exponent all the sweeps fit (loadgen.host_elasticity):
what a verdict between them compares.

``--slowdown 0.1`` plants a known effect (engines/patches/planted_slowdown) in every launch, and
``--max-step-s`` lets the steps be stretched longer (the steps past capacity among them; the recorded
``launch_variance_q36`` launches used ``--queued-step-s 36``, removed with ``sweep.queued_step_s``):
benchmarks/campaign_verdicts.py judges such launches against unpatched ones as a campaign would.

A campaign repeats a configuration's sweeps and judges a candidate against its baseline. Which pairs of
sweeps are alike decides what the floor measures: two sweeps on one running engine share its launch
(memory layout, thread placement, whatever the host was doing in those minutes), while a verdict sets
sweeps of two launches, minutes apart, side by side. This script starts the endpoint's declared
configuration ``--launches`` times and sweeps each launch ``--sweeps`` times, exactly as a campaign's
repeats do (the endpoint's own ladder, :func:`loadgen.sweep.run_sweep`), and splits the log-capacity
variance of each estimator (the service rate from queue growth, the fitted SLA crossing) into a
within-launch and a between-launch component (one-way random-effects ANOVA). Every sweep is written as
it finishes (``<out>/l<launch>-s<sweep>.json``); a run resumes.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _estimates(sweep, host=None) -> dict[str, float | None]:
    """One sweep's capacity by each estimator, and what it tested; ``host``: also its service rate at the
    host speed common to every sweep compared (loadgen.host_elasticity.host_adjustment)."""
    from loadgen.queue_rate import service_rate

    valid = [s for s in sweep.steps if s.validity == "valid"]
    served = service_rate(valid)
    at_host = service_rate(valid, host=host) if host else None
    return {
        "service_rate": served.rate if served is not None else None,
        "service_rate_at_host": at_host.rate if at_host is not None else None,
        # the slopes' own standard error of log(service rate): what a verdict takes when it exceeds the spread
        "service_rate_own_se": served.log_se if served is not None and served.rate else None,
        "crossing": sweep.capacity_fit_rps,
        "valid": sweep.validity == "valid",
        "steps": [[s.target_rate, s.within_sla] for s in sweep.steps],
        "wall_s": sweep.wall_s,
        # what CPU the engine got (loadgen.watch): the mean over the sweep's valid steps, None where unmeasured
        "engine_cpu_util": _mean_metric(sweep, "engine_cpu_util"),
        "host_steal_fraction": _mean_metric(sweep, "host_steal_fraction"),
    }


def _mean_metric(sweep, name: str) -> float | None:
    values = [s.engine_metrics[name] for s in sweep.steps if s.validity == "valid" and name in s.engine_metrics]
    return sum(values) / len(values) if values else None


def components(groups: list[list[float]]) -> dict[str, float] | None:
    """One-way random-effects ANOVA on log values: the within-launch sd of one sweep, the between-launch sd
    of a launch's mean effect (0 when the launches agree better than their sweeps), and the sd of the log
    difference of two sweeps on one launch and on two launches (what a same-launch A/A pair measures,
    and what a verdict between two engines meets)."""
    groups = [[math.log(v) for v in g] for g in groups if len(g) >= 2]
    if len(groups) < 2:
        return None
    n = min(len(g) for g in groups)
    groups = [g[:n] for g in groups]
    k = len(groups)
    means = [sum(g) / n for g in groups]
    grand = sum(means) / k
    ss_within = sum((v - m) ** 2 for g, m in zip(groups, means) for v in g)
    ms_within = ss_within / (k * (n - 1))
    ms_between = n * sum((m - grand) ** 2 for m in means) / (k - 1)
    var_between = max(0.0, (ms_between - ms_within) / n)
    return {
        "launches": k,
        "sweeps_per_launch": n,
        "df_within": k * (n - 1),
        "df_between": k - 1,
        "sd_within": math.sqrt(ms_within),
        "sd_between": math.sqrt(var_between),
        "sd_pair_same_launch": math.sqrt(2 * ms_within),
        "sd_pair_two_launches": math.sqrt(2 * (ms_within + var_between)),
        "f_ratio": ms_between / ms_within if ms_within > 0 else math.inf,
    }


def report(out: Path) -> dict:
    from scipy.stats import f as f_dist

    from loadgen.host_elasticity import host_adjustment
    from loadgen.results import SweepResult

    measured = {}
    for path in sorted(out.glob("l*-s*.json")):
        launch, sweep = (int(p[1:]) for p in path.stem.split("-"))
        measured[launch, sweep] = SweepResult.model_validate_json(path.read_text())
    # one host speed for every sweep, with the exponent the sweeps fit (None when any queued step lacks a
    # reading: nothing is adjusted)
    valid = [[st for st in m.steps if st.validity == "valid"] for m in measured.values() if m.validity == "valid"]
    host = host_adjustment(valid, valid)
    by_launch: dict[int, list[dict]] = {}
    for (launch, sweep), m in measured.items():
        by_launch.setdefault(launch, []).append({"sweep": sweep, **_estimates(m, host)})
    result = {"launches": {str(k): v for k, v in sorted(by_launch.items())}, "estimators": {}}
    result |= (
        {"at_host_s": host.at_host_s, "host_exponent": host.exponent, "host_exponent_se": host.exponent_se}
        if host
        else {}
    )
    for est in ("service_rate", "service_rate_at_host", "crossing"):
        groups = [
            [s[est] for s in sorted(v, key=lambda s: s["sweep"]) if s["valid"] and s[est]] for v in by_launch.values()
        ]
        comp = components(groups)
        if comp is not None and math.isfinite(comp["f_ratio"]):
            # P(F >= observed) under "launches add no variance": small = the launches differ
            comp["p_launches_differ"] = float(f_dist.sf(comp["f_ratio"], comp["df_between"], comp["df_within"]))
        result["estimators"][est] = comp
    return result


def _text(result: dict) -> str:
    lines = ["launch  sweep  service rate  at host  crossing  engine CPU  stolen  steps (rate, within SLA)"]
    for launch, sweeps in result["launches"].items():
        for s in sorted(sweeps, key=lambda s: s["sweep"]):
            sr = f"{s['service_rate']:.3f}" if s["service_rate"] else "-"
            at = f"{s['service_rate_at_host']:.3f}" if s.get("service_rate_at_host") else "-"
            cr = f"{s['crossing']:.3f}" if s["crossing"] else "-"
            steps = " ".join(f"{r:g}{'+' if ok else 'x'}" for r, ok in s["steps"])
            cpu = f"{s['engine_cpu_util']:.2f}" if s.get("engine_cpu_util") is not None else "-"
            steal = f"{s['host_steal_fraction']:.1%}" if s.get("host_steal_fraction") is not None else "-"
            lines.append(f"{launch:>6}  {s['sweep']:>5}  {sr:>12}  {at:>7}  {cr:>8}  {cpu:>10}  {steal:>6}  {steps}")
    for est, c in result["estimators"].items():
        if c is None and est == "service_rate_at_host":
            continue  # sweeps without host readings
        if c is None:
            lines.append(f"{est}: too few launches with two valid sweeps")
            continue
        lines.append(
            f"{est}: {c['launches']} launches x {c['sweeps_per_launch']} sweeps; sd of one sweep within a launch "
            f"{c['sd_within']:.1%} ({c['df_within']} df), between launches {c['sd_between']:.1%} "
            f"({c['df_between']} df); paired difference: same launch {c['sd_pair_same_launch']:.1%}, two "
            f"launches {c['sd_pair_two_launches']:.1%}; F = {c['f_ratio']:.2f}"
            + (f", p = {c['p_launches_differ']:.3f}" if "p_launches_differ" in c else "")
        )
    if result.get("host_exponent") is not None:
        lines.append(f"at host: rate ~ host^{result['host_exponent']:+.2f} +-{result['host_exponent_se']:.2f} (fitted)")
    return "\n".join(lines)


def run(args) -> None:
    from autoresearch.workflows import load_pool
    from dagster_project.lib import load_definitions
    from engines import run_engine
    from loadgen.sweep import run_sweep
    from specs.paths import definitions_dir

    spec = load_definitions(definitions_dir()).endpoint(args.endpoint)
    if args.engine_args is not None:  # another configuration of the endpoint: its whole argument list
        spec = spec.model_copy(
            update={"engine": spec.engine.model_copy(update={"args": shlex.split(args.engine_args)})}
        )
    if args.max_step_s:  # every step, the ones the service rate reads among them, held up to this long
        sweep = spec.sweep.model_copy(update={"max_step_s": args.max_step_s})
        spec = spec.model_copy(update={"sweep": sweep})
    if args.host_speed_probe:  # each step times the host's memory first (loadgen.host_speed)
        sweep = spec.sweep.model_copy(update={"host_speed_probe": True, "estimator": "service_rate"})
        spec = spec.model_copy(update={"sweep": sweep})
    if args.slowdown:  # a planted effect of known size: every engine step (1 + s) times as long
        patch = str(ROOT / "engines" / "patches" / "planted_slowdown")
        env = {**spec.engine.env, "PYTHONPATH": patch, "AUTORESEARCH_PLANTED_SLOWDOWN": str(args.slowdown)}
        spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"env": env})})
    pool = load_pool(spec)
    args.out.mkdir(parents=True, exist_ok=True)
    for launch in range(args.launches):
        todo = [s for s in range(args.sweeps) if not (args.out / f"l{launch}-s{s}.json").exists()]
        if not todo:
            continue
        if len(todo) < args.sweeps:  # a launch cut short is started again from its first sweep
            for s in range(args.sweeps):
                (args.out / f"l{launch}-s{s}.json").unlink(missing_ok=True)
        began = time.time()
        with run_engine(spec, workdir=args.out / ".run", purpose="sweep") as engine:
            for s in range(args.sweeps):
                sweep = run_sweep(engine, pool, spec, repeats_label=f"l{launch}s{s}")
                (args.out / f"l{launch}-s{s}.json").write_text(sweep.model_dump_json())
                est = _estimates(sweep)
                print(
                    f"launch {launch} sweep {s}: service rate {est['service_rate']}, crossing {est['crossing']}, "
                    f"{sweep.wall_s:.0f} s",
                    flush=True,
                )
        print(f"launch {launch}: {time.time() - began:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--endpoint", default="support_smollm")
    r.add_argument("--launches", type=int, default=4)
    r.add_argument("--sweeps", type=int, default=2)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--max-step-s", type=float, help="override sweep.max_step_s (how long a step may be stretched)")
    r.add_argument("--engine-args", help="the engine's whole argument list instead of the endpoint's (one string)")
    r.add_argument("--host-speed-probe", action="store_true", help="time the host's memory before each step")
    r.add_argument("--slowdown", type=float, help="plant a slowdown: every engine step (1 + s) times as long")
    p = sub.add_parser("report")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = ap.parse_args()
    if args.cmd == "run":
        run(args)
    result = report(args.out)
    print(_text(result))
    if getattr(args, "json", None):
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
