"""Is the service rate's own error honest? Its slopes' intervals against the spread of real repeats.

    .venv/bin/python benchmarks/service_rate_calibration.py \\
        --sweeps lv=.autoresearch/launch_variance --db run9=/path/to/clone/.autoresearch/memory.duckdb ...

A verdict by the service rate (loadgen.verdict.judge_service_rates) takes as its standard error the larger
of two: the slopes' own (their Theil-Sen intervals, carried to log mu) and the between-run one (the
spread of repeated runs, pooled with the A/A prior). Taking the between-run one alone would be right if
the own error only counted what common random numbers hold fixed (the same requests at the same times in
every repeat) and so overstated what repeats really do. This script measures that: every configuration
swept more than once (the repeats of one engine launch: ``--sweeps`` directories written by
benchmarks/launch_variance.py, grouped by launch, and the runs a campaign recorded in a research memory,
``--db``, grouped by campaign and configuration) gives the sum of squares of its sweeps' log service
rates about their mean, against what the sweeps' own errors predict for it (and the same for each queued
step at one rate and length on its own: matched steps). Their ratio, pooled per noise
class (the SLA target whose crossing limits the configuration), is the calibration of the own error:
1 when honest, under 1 when the slopes overstate the repeats' spread, over 1 when they understate it. The
interval treats the own errors as known (chi-square on the pooled degrees of freedom).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import chi2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.noise_prior import limiting_target  # noqa: E402
from loadgen.queue_rate import queued, service_rate  # noqa: E402
from loadgen.results import StepResult, SweepResult  # noqa: E402


def _per_sweep(steps: list[StepResult]) -> tuple[float, float] | None:
    served = service_rate([s for s in steps if s.validity == "valid"])
    if served is None or not served.rate or not math.isfinite(served.log_se):
        return None
    return math.log(served.rate), served.log_se


def groups_from_sweeps(label: str, directory: Path) -> dict[str, list[list[StepResult]]]:
    """launch_variance's ``l<launch>-s<sweep>.json``: the sweeps of one launch form a group."""
    out: dict[str, list[list[StepResult]]] = {}
    for path in sorted(directory.glob("l*-s*.json")):
        sweep = SweepResult.model_validate_json(path.read_text())
        if sweep.validity == "valid":
            out.setdefault(f"{label}:{path.stem.split('-')[0]}", []).append(sweep.steps)
    return out


def groups_from_db(label: str, db: Path) -> dict[str, list[list[StepResult]]]:
    """A research memory's valid runs: those of one campaign and configuration form a group."""
    import duckdb

    out: dict[str, list[list[StepResult]]] = {}
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "select coalesce(campaign_id, ''), config_hash, steps from runs where validity = 'valid' order by started_at"
        ).fetchall()
    for campaign, config, steps in rows:
        if steps:
            parsed = [StepResult.model_validate(s) for s in json.loads(steps)]
            out.setdefault(f"{label}:{campaign[:12]}:{config[:8]}", []).append(parsed)
    return out


def _per_step(groups: dict[str, list[list[StepResult]]]) -> dict[str, list[list[StepResult]]]:
    """Each queued step of a group at one (rate, length) as a group of its own, one step a sweep: the
    same requests in each, as a matched verdict compares them."""
    out: dict[str, list[list[StepResult]]] = {}
    for name, sweeps in groups.items():
        for sweep in sweeps:
            for st in sweep:
                if queued(st):
                    out.setdefault(f"{name}@{st.target_rate:g}/{st.duration_s:g}s", []).append([st])
    return out


def calibrate(groups: dict[str, list[list[StepResult]]], *, per_step: bool = False) -> dict:
    """Per group: its sweeps' log service rates, own errors, sum of squares about their mean and what the
    own errors predict for it; per noise class and over all: the pooled ratio and its 95% interval.
    ``per_step``: each matched step on its own (its configuration's class) instead of each sweep's rate."""
    classes_of = {name: limiting_target(sweeps) or "unknown" for name, sweeps in groups.items()}
    rows = []
    for name, sweeps in (_per_step(groups) if per_step else groups).items():
        measured = [m for m in (_per_sweep(s) for s in sweeps) if m]
        if len(measured) < 2:
            continue
        logs, ses = np.array([m[0] for m in measured]), np.array([m[1] for m in measured])
        n = len(logs)
        ss = float(np.sum((logs - logs.mean()) ** 2))
        # E[SS] = sum(se_i^2) (1 - 1/n) for independent sweeps of one true value with errors se_i
        expected = float(np.sum(ses**2) * (1 - 1 / n))
        rows.append(
            {
                "group": name,
                "class": classes_of[name.split("@")[0]],
                "sweeps": n,
                "rates": np.exp(logs).round(4).tolist(),
                "own_se": ses.round(4).tolist(),
                "sd": float(np.std(logs, ddof=1)),
                "ratio": ss / expected,
                "ss": ss,
                "expected": expected,
            }
        )
    classes: dict[str, dict] = {}
    for row in rows:
        for key in (row["class"], "all"):
            c = classes.setdefault(key, {"ss": 0.0, "expected": 0.0, "df": 0})
            c["ss"] += row["ss"]
            c["expected"] += row["expected"]
            c["df"] += row["sweeps"] - 1
    for c in classes.values():
        ratio = c["ss"] / c["expected"]
        lo, hi = (c["df"] * ratio / chi2.ppf(q, c["df"]) for q in (0.975, 0.025))
        c.update(ratio=ratio, sd_ratio=math.sqrt(ratio), sd_ratio_low=math.sqrt(lo), sd_ratio_high=math.sqrt(hi))
    return {"groups": rows, "classes": classes}


def text(result: dict) -> str:
    lines = ["group  class  sweeps  service rates (req/s)  own se of each  sd of log  ratio"]
    for r in result["groups"]:
        lines.append(
            f"{r['group']}  {r['class']}  {r['sweeps']}  {r['rates']}  {[f'{s:.1%}' for s in r['own_se']]}  "
            f"{r['sd']:.1%}  {r['ratio']:.2f}"
        )
    lines.append("class  df  spread / own error (sd ratio, 95% interval)")
    for k, c in sorted(result["classes"].items()):
        lines.append(f"{k}  {c['df']}  {c['sd_ratio']:.2f} ({c['sd_ratio_low']:.2f} to {c['sd_ratio_high']:.2f})")
    return "\n".join(lines)


def _labelled(value: str) -> tuple[str, Path]:
    label, _, path = value.partition("=")
    if not path:
        raise argparse.ArgumentTypeError(f"{value!r}: expected LABEL=PATH")
    return label, Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=_labelled, action="append", default=[], help="LABEL=launch_variance dir")
    ap.add_argument("--db", type=_labelled, action="append", default=[], help="LABEL=research memory (duckdb)")
    ap.add_argument("--out", type=Path, help="write <out>.json and <out>.txt")
    args = ap.parse_args()
    groups: dict[str, list[list[StepResult]]] = {}
    for label, path in args.sweeps:
        groups.update(groups_from_sweeps(label, path))
    for label, path in args.db:
        groups.update(groups_from_db(label, path))
    result = {"per_sweep": calibrate(groups), "per_step": calibrate(groups, per_step=True)}
    command = "benchmarks/service_rate_calibration.py " + " ".join(
        [f"--sweeps {label}=<dir>" for label, _ in args.sweeps] + [f"--db {label}=<memory>" for label, _ in args.db]
    )
    out = "\n\n".join(
        [f"# {command}", "## each sweep's service rate", text(result["per_sweep"])]
        + ["## each queued step at one rate and length (matched steps)", text(result["per_step"])]
    )
    print(out)
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps({"command": command, **result}, indent=1))
        args.out.with_suffix(".txt").write_text(out + "\n")


if __name__ == "__main__":
    main()
