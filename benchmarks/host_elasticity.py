"""How much each configuration's service rate follows the host's memory, and what each rule does to a pair.

    .venv/bin/python benchmarks/host_elasticity.py --config reference=DIR --config prefix_caching=DIR \
        --out benchmarks/results/host_elasticity/host_elasticity

Each DIR holds sweeps with the host probe (``launch_variance.py run --host-speed-probe`` or
``host_speed.py run``: ``l<launch>-s<sweep>.json``). Per configuration:

* the exponent of a queued step's log service rate on its log memory-pass time, over every schedule the
  sweeps repeated (one level per schedule, least squares: the measurement, no prior);
* per pair of sweeps of one launch (a floor's two repeats), the log difference of their service
  rates as measured, at one host speed with the exponent fixed at -1 (the rule of 2026-12-06), and with the
  exponent the product fits on that pair (loadgen.host_elasticity: a ridge toward -0.5), with the degrees
  of freedom that fit took from the pair.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _sweeps(folder: Path) -> dict[tuple[int, int], list]:
    from loadgen.results import SweepResult

    out = {}
    for path in sorted(folder.glob("l*-s*.json")):
        launch, sweep = (int(p[1:]) for p in path.stem.split("-"))
        result = SweepResult.model_validate_json(path.read_text())
        if result.validity == "valid":
            out[launch, sweep] = [st for st in result.steps if st.validity == "valid"]
    return out


def least_squares_exponent(sweeps: list[list]) -> dict:
    """The exponent with one level per repeated schedule (the product's points, no prior), its standard error,
    and the residual sd of a step."""
    from loadgen.host_elasticity import schedule_deviations

    points, levels = schedule_deviations(sweeps)
    y = np.array([p[1] for p in points])
    x = np.array([p[2] for p in points])
    df = len(x) - levels - 1
    if df < 1 or not np.any(x):
        return {"steps": len(x), "exponent": None}
    b = float(x @ y / (x @ x))
    resid = y - b * x
    s = float(np.sqrt(resid @ resid / df))
    return {
        "steps": len(x),
        "schedules": levels,
        "exponent": b,
        "se": s / float(np.sqrt(x @ x)),
        "step_sd_at_host": s,
        "step_sd_as_measured": float(np.sqrt(y @ y / (len(x) - levels))),
        "host_sd": float(np.sqrt(x @ x / (len(x) - levels))),
    }


def pair_rules(pair: list[list]) -> dict:
    """One floor's two sweeps: their service rates' log difference under each rule."""
    from loadgen.host_elasticity import host_adjustment
    from loadgen.queue_rate import service_rate

    fitted = host_adjustment(pair, pair)
    out = {"steps": len(pair[0])}
    if fitted is None:
        return out
    fixed = fitted.model_copy(update={"exponent": -1.0})
    for name, host in (("as_measured", None), ("fixed_-1", fixed), ("fitted", fitted)):
        rates = [service_rate(s, host=host) for s in pair]
        out[name] = math.log(rates[1].rate / rates[0].rate) if all(r and r.rate for r in rates) else None
    out |= {"fitted_exponent": fitted.exponent, "fitted_se": fitted.exponent_se, "df_taken": fitted.sweep_df}
    out["host_log_difference"] = _host_difference(pair)
    return out


def _host_difference(matched: list[list]) -> float:
    from loadgen.queue_rate import step_host_s

    means = [np.mean([math.log(step_host_s(st)) for st in s]) for s in matched]
    return float(means[1] - means[0])


def report(configs: dict[str, Path]) -> dict:
    result = {}
    for name, folder in configs.items():
        sweeps = _sweeps(folder)
        pairs = {}
        for launch in sorted({k[0] for k in sweeps}):
            mine = [sweeps[k] for k in sorted(sweeps) if k[0] == launch]
            if len(mine) >= 2:
                pairs[str(launch)] = pair_rules(mine[:2])
        result[name] = {"sweeps": len(sweeps), "fit": least_squares_exponent(list(sweeps.values())), "pairs": pairs}
    return result


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{math.expm1(x):+.1%}"


def text(result: dict) -> str:
    lines = []
    for name, r in result.items():
        f = r["fit"]
        if f.get("exponent") is None:
            lines.append(f"{name}: {r['sweeps']} sweeps, no repeated schedule with host readings")
            continue
        lines.append(
            f"{name}: {r['sweeps']} sweeps, {f['steps']} repeated steps over {f['schedules']} schedules: exponent "
            f"{f['exponent']:+.2f} +- {f['se']:.2f}; a step's sd {f['step_sd_as_measured']:.1%} as measured, "
            f"{f['step_sd_at_host']:.1%} at the fitted exponent; host sd {f['host_sd']:.1%}"
        )
        lines.append("  launch  host moved  as measured  fixed -1  fitted (exponent, df taken)")
        for launch, p in r["pairs"].items():
            if "fitted" not in p:
                continue
            lines.append(
                f"  {launch:>6}  {_pct(p['host_log_difference']):>10}  {_pct(p['as_measured']):>11}  "
                f"{_pct(p['fixed_-1']):>8}  {_pct(p['fitted']):>6} ({p['fitted_exponent']:+.2f}, {p['df_taken']:.2f})"
            )
    return "\n".join(lines) + "\n"


def _config(value: str) -> tuple[str, Path]:
    name, _, folder = value.partition("=")
    if not folder or not Path(folder).is_dir():
        raise argparse.ArgumentTypeError(f"{value!r}: expected NAME=DIR of sweeps (l<launch>-s<sweep>.json)")
    return name, Path(folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=_config, action="append", required=True, help="NAME=DIR of probed sweeps")
    ap.add_argument("--out", type=Path, help="write <out>.json and <out>.txt")
    args = ap.parse_args()
    result = report(dict(args.config))
    print(text(result), end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".txt").write_text(text(result))


if __name__ == "__main__":
    main()
