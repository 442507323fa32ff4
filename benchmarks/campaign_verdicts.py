"""Verdicts in the campaign's own design, from recorded launches of real vLLM: A/A and planted effects.

    .venv/bin/python benchmarks/campaign_verdicts.py --launches 0=.autoresearch/launch_variance \\
        --launches 0.1=.autoresearch/launch_slowed10 --out benchmarks/results/campaign_verdicts

benchmarks/harness_power.py measures the verdict in its own design (rounds A B / B A on rates the verdict
chooses). A campaign judges differently: a floor of K = 2 sweeps of the baseline on one engine launch,
a candidate on another launch on the endpoint's own ladder, one sweep, then a second only while the
first look is undecided (loadgen.compare, futility on). This script replays that on launches recorded
by benchmarks/launch_variance.py (``l<launch>-s<sweep>.json``, two sweeps each): every ordered pair of
launches (baseline i, candidate j, i != j) is judged with loadgen.noise.noise_floor (the default prior,
as on a fresh machine) and loadgen.compare.compare, first on the candidate's first sweep, then on both.
A ``--launches`` group is labelled with its planted slowdown (every engine step 1 + s times as long,
``launch_variance.py --slowdown s``); pairs within a group are A/A, pairs across groups have a known
sign: a slowed candidate should be ``worse``, a slowed baseline ``better``.

The launches are reused across pairs, so the pairs are not independent trials: the counts say how the
rule judges these recordings, not a false-verdict rate with a binomial interval.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.compare import compare  # noqa: E402
from loadgen.noise import noise_floor  # noqa: E402
from loadgen.results import SweepResult  # noqa: E402


def launches(directory: Path) -> dict[str, list[SweepResult]]:
    """The launches of a launch_variance directory with both sweeps valid, in sweep order."""
    out: dict[str, list[SweepResult]] = {}
    for path in sorted(directory.glob("l*-s*.json")):
        out.setdefault(path.stem.split("-")[0], []).append(SweepResult.model_validate_json(path.read_text()))
    return {k: v for k, v in out.items() if len(v) >= 2 and all(s.validity == "valid" for s in v)}


def judge_pair(base: list[SweepResult], cand: list[SweepResult]) -> dict:
    """One candidate judged against one floor as a campaign does: a look on one sweep, a last on two."""
    floor = noise_floor(base[:2])
    first = compare(floor, cand[:1], final=False)
    result = compare(floor, cand[:2], final=True) if first.decided is False else first
    return {
        "verdict": result.verdict,
        "sweeps": 1 if result is first else 2,
        "effect": result.effect,
        "low": result.effect_low,
        "high": result.effect_high,
        "mde": result.mde,
        "floor_mde": floor.threshold,
        "decided_by": result.decided_by,
    }


def run(groups: list[tuple[float, dict[str, list[SweepResult]]]]) -> dict:
    pairs = []
    named = [(effect, f"{effect:g}:{k}", sweeps) for effect, g in groups for k, sweeps in g.items()]
    for b_effect, b_name, base in named:
        for c_effect, c_name, cand in named:
            if b_name == c_name:
                continue
            # capacity scales as 1 / step time: the candidate's true effect against this baseline
            truth = (1 + b_effect) / (1 + c_effect) - 1
            pairs.append({"baseline": b_name, "candidate": c_name, "truth": truth, **judge_pair(base, cand)})
    cells: dict[str, dict] = {}
    for p in pairs:
        key = f"{p['truth']:+.3f}"
        c = cells.setdefault(key, {"truth": p["truth"], "pairs": 0, "verdicts": Counter(), "mde": [], "sweeps": 0})
        c["pairs"] += 1
        c["verdicts"][p["verdict"]] += 1
        c["sweeps"] += p["sweeps"]
        if p["mde"] is not None and math.isfinite(p["mde"]):
            c["mde"].append(p["mde"])
    for c in cells.values():
        c["verdicts"] = dict(c["verdicts"])
        c["median_mde"] = sorted(c["mde"])[len(c["mde"]) // 2] if c["mde"] else None
        c["sweeps_per_verdict"] = c["sweeps"] / c["pairs"]
        del c["mde"], c["sweeps"]
    floors = sorted({p["baseline"]: p["floor_mde"] for p in pairs}.items())
    return {"cells": cells, "floors": floors, "pairs": pairs}


def text(result: dict) -> str:
    lines = ["true effect  pairs  better  same  worse  invalid  median MDE  sweeps/verdict"]
    for _, c in sorted(result["cells"].items(), key=lambda kv: kv[1]["truth"]):
        v = c["verdicts"]
        mde = f"{c['median_mde']:.1%}" if c["median_mde"] is not None else "-"
        lines.append(
            f"{c['truth']:+.1%}  {c['pairs']}  {v.get('better', 0)}  {v.get('same', 0)}  {v.get('worse', 0)}  "
            f"{v.get('invalid', 0)}  {mde}  {c['sweeps_per_verdict']:.2f}"
        )
    lines.append(
        "floors (minimum detectable effect of each launch as a baseline): "
        + ", ".join(f"{name} {mde:.1%}" if mde is not None else f"{name} -" for name, mde in result["floors"])
    )
    return "\n".join(lines)


def _group(value: str) -> tuple[float, Path]:
    effect, _, path = value.partition("=")
    if not path:
        raise argparse.ArgumentTypeError(f"{value!r}: expected SLOWDOWN=DIR (0 for unpatched launches)")
    return float(effect), Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=_group, action="append", required=True, help="SLOWDOWN=launch_variance dir")
    ap.add_argument("--out", type=Path, help="write <out>.json and <out>.txt")
    args = ap.parse_args()
    groups = [(effect, launches(path)) for effect, path in args.launches]
    command = "benchmarks/campaign_verdicts.py " + " ".join(f"--launches {e:g}=<dir>" for e, _ in args.launches)
    results = [run(groups)]
    out = "\n\n".join([f"# {command}"] + [text(r) for r in results])
    print(out)
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps({"command": command, "results": results}, indent=1))
        args.out.with_suffix(".txt").write_text(out + "\n")


if __name__ == "__main__":
    main()
