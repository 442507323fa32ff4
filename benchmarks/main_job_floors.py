"""The main job's noise floors, recomputed by today's code from the campaigns' recorded sweeps.

    .venv/bin/python benchmarks/main_job_floors.py --run run9=DIR/support_smollm_default.state.json ... \\
        --out benchmarks/results/main_job_floors

Each run's state file (``.autoresearch/campaigns/<campaign>/<campaign>.state.json``) keeps every floor's
sweeps with their requests. Each floor is built again by the campaign's own floor function
(research.campaign.steps.endpoint_noise) on the state as it was then: the default prior pooled with the A/A
evidence of the experiments that had ended and the floors adopted before it (no research memory: a fresh
machine's holds nothing else). The output says, per floor, the MDE the run's review showed and today's. The issue's
target is an MDE at most 10% in the review of a fresh machine's main job.

Below the runs, what a floor judged by the service rate can reach (``reach``): the MDE that loadgen.verdict.floor_mde
gives a floor of K sweeps whose slopes had no error of their own (a best case), for a between-run sd of a paired difference and the degrees of freedom
its variance rests on (a fresh machine's floor: the default prior's 4 and the floor's own 1-2; a known sd: inf).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dagster_project.lib import load_definitions  # noqa: E402
from loadgen.noise_prior import sweeps_evidence  # noqa: E402
from research.campaign.steps import endpoint_noise  # noqa: E402
from specs.paths import definitions_dir  # noqa: E402
from research.state import CampaignState  # noqa: E402

TARGET = 0.10
#: (sd of a paired difference, where it was measured) for the projection
SDS = (
    (0.03, "the default prior"),
    (0.043, "prefix caching, between launches at one host speed (launch_variance_prefix_caching_host_speed)"),
    (0.0684, "prefix caching's floors in runs 19-24, pooled over 5.4 df (the calibration below)"),
)
DFS = (5.0, 10.0, 20.0, float("inf"))


def reach(sd: float, df: float, sweeps: int, candidate_rounds: int) -> float | None:
    """The MDE of a floor of ``sweeps`` sweeps with no error of its own beyond the runs' spread (a best case),
    whose paired sd is ``sd`` on ``df`` degrees of freedom (inf: known), both tests at alpha / 2."""
    from types import SimpleNamespace

    from loadgen.verdict import ALPHA, LOOKS, floor_mde

    known = SimpleNamespace(rate=1.0, log_se=0.0)
    return floor_mde(
        known, sweeps, sd**2, min(df, 1e6), looks=LOOKS, alpha=ALPHA / 2, candidate_rounds=candidate_rounds
    )


def floors(state: CampaignState, candidate_rounds: int) -> list[dict]:
    """Per adopted floor, in order: the recorded MDE and today's (that of a candidate of at most
    ``candidate_rounds`` sweeps), with what the prior held: without the endpoint's declared calibration (as
    these runs had it) and with it (its between-launch entries, measured on benchmarks/launch_variance.py's
    launches, not on these runs)."""
    declared = load_definitions(definitions_dir()).endpoint(state.endpoint)
    bare = declared.model_copy(update={"noise_calibration": []})
    out = []
    for i, base in enumerate(state.baselines):
        then = state.model_copy(
            update={
                "baselines": state.baselines[:i],
                "experiments": {
                    k: e
                    for k, e in state.experiments.items()
                    if e.finished_at and e.finished_at <= base.adopted_at + 1.0
                },
            }
        )
        # the campaign's own floor function, with no research memory: a fresh machine's holds nothing else
        now = endpoint_noise(then, bare, None, print, candidate_rounds)(base.sweeps)
        calibrated = endpoint_noise(then, declared, None, print, candidate_rounds)(base.sweeps)
        out.append(
            {
                "floor": base.source_experiment or "reference",
                "sweeps": len(base.sweeps),
                "limiting": now.limiting,
                "recorded_mde": base.noise.mde,
                "mde": now.mde,
                "mde_crossing_alone": now.mde_crossing_alone,
                "service_df": now.service_between_df,
                "crossing_df": now.between_df,
                "prior": now.prior_source,
                "mde_calibrated": calibrated.mde,
                "evidence": [ev.model_dump() for ev in sweeps_evidence(base.sweeps)],
            }
        )
    return out


def calibration(runs: dict) -> list[dict]:
    """The runs' floors' own A/A evidence pooled by estimator and noise class (sd of a paired difference over
    its df). Two sweeps of one launch each: within-launch evidence, which the endpoint's ``noise_calibration``
    may not declare (a verdict compares launches; specs.config.NoiseCalibration)."""
    pooled: dict[tuple, list[float]] = {}
    for run in runs.values():
        for f in run["floors"]:
            for ev in f["evidence"]:
                acc = pooled.setdefault((ev["estimator"], ev["limiting"]), [0.0, 0.0, 0])
                acc[0], acc[1], acc[2] = acc[0] + ev["sum_sq"], acc[1] + ev["df"], acc[2] + 1
    return [
        {"estimator": e, "limiting": lim, "sd": math.sqrt(ss / df), "df": df, "floors": n}
        for (e, lim), (ss, df, n) in sorted(pooled.items(), key=str)
        if df
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="append", required=True, help="label=path of a campaign's state.json")
    ap.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    ap.add_argument(
        "--candidate-rounds",
        type=int,
        default=2,
        help="a candidate's most sweeps (the embedded default's repeats + extra_repeats)",
    )
    args = ap.parse_args()
    runs = {}
    for item in args.run:
        label, _, path = item.partition("=")
        state = CampaignState.model_validate_json(Path(path).read_text())
        runs[label] = {"campaign_id": state.campaign_id, "floors": floors(state, args.candidate_rounds)}
        print(label, json.dumps(runs[label]["floors"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pooled = calibration(runs)
    args.out.with_suffix(".json").write_text(
        json.dumps({"target": TARGET, "runs": runs, "calibration": pooled}, indent=2) + "\n"
    )
    rows = [
        f"| {label} | {f['floor']} | {f['limiting']} | {f['sweeps']} | "
        f"{f['recorded_mde']:.1%} | **{f['mde']:.1%}** | {_pct(f['mde_crossing_alone'])} | {f['service_df']:.3g} | "
        f"{f['prior']} | {_pct(f['mde_calibrated'])} |"
        for label, run in runs.items()
        for f in run["floors"]
    ]
    over = [f for run in runs.values() for f in run["floors"] if f["mde"] is None or f["mde"] > TARGET]
    total = sum(len(run["floors"]) for run in runs.values())
    args.out.with_suffix(".md").write_text(
        "# The main job's floors, recomputed by today's code\n\n"
        f"Command: `python benchmarks/main_job_floors.py {' '.join('--run ' + r.split('=')[0] + '=STATE' for r in args.run)} "
        f"--out {args.out}`\n\n"
        "| run | floor | limited by | sweeps | MDE in its review | MDE today | crossing alone | service-rate df | prior "
        "| with the calibration |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nOver {TARGET:.0%} today: {len(over)} of {total}.\n\n"
        "MDE today: the floor rebuilt without the endpoint's declared calibration, as runs before it had it; with "
        "the calibration: as the endpoint declares it now (its between-launch entries, measured on benchmarks/launch_variance.py's launches, not on these runs). Crossing alone: the MDE of a change judged by the SLA crossing alone, as one is where "
        "ITL, not a queue, sets the SLA limit the service rate would speak for (loadgen.judge).\n\n"
        + _calibration_table(pooled)
        + "\n"
        + _reach_table(args.candidate_rounds)
    )


def _calibration_table(pooled: list[dict]) -> str:
    rows = [f"| {c['estimator']} | {c['limiting']} | {c['floors']} | {c['df']:.3g} | {c['sd']:.2%} |" for c in pooled]
    return (
        "## The floors' A/A evidence pooled by estimator and noise class (within launches)\n\n"
        "| estimator | limited by | floors | df | sd of a paired difference |\n|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )


def _reach_table(candidate_rounds: int) -> str:
    head = " | ".join(f"{k} sweeps, {'known sd' if df == float('inf') else f'{df:g} df'}" for k in (2, 3) for df in DFS)
    rows = [
        f"| {sd:.1%} ({where}) | "
        + " | ".join(_pct(reach(sd, df, k, candidate_rounds)) for k in (2, 3) for df in DFS)
        + " |"
        for sd, where in SDS
    ]
    return (
        f"## What a floor judged by the service rate can reach (a candidate of at most {candidate_rounds} sweeps)\n\n"
        f"| paired sd | {head} |\n|---|{'---|' * (2 * len(DFS))}\n" + "\n".join(rows) + "\n"
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


if __name__ == "__main__":
    main()
