"""The main job's noise floors, recomputed by today's code from the campaigns' recorded sweeps.

    .venv/bin/python benchmarks/main_job_floors.py --run run9=DIR/support_smollm_default.state.json ... \\
        --out benchmarks/results/main_job_floors

Each run's state file (``.autoresearch/campaigns/<campaign>/<campaign>.state.json``) keeps every floor's
sweeps with their requests. Each floor is built again by the campaign's own floor function
(research.campaign.steps.endpoint_noise) on the state as it was then: the default prior pooled with the A/A
evidence of the experiments that had ended and the floors adopted before it (no research memory: a fresh
machine's holds nothing else). The output says, per floor, the MDE the run's review showed and today's. The issue's
target is an MDE at most 10% in the review of a fresh machine's main job.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dagster_project.lib import load_definitions  # noqa: E402
from research.campaign.steps import endpoint_noise  # noqa: E402
from specs.paths import definitions_dir  # noqa: E402
from research.state import CampaignState  # noqa: E402

TARGET = 0.10


def floors(state: CampaignState, candidate_rounds: int) -> list[dict]:
    """Per adopted floor, in order: the recorded MDE and today's (that of a candidate of at most
    ``candidate_rounds`` sweeps), with what the prior held."""
    endpoint = load_definitions(definitions_dir()).endpoint(state.endpoint)
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
        now = endpoint_noise(then, endpoint, None, print, candidate_rounds)(base.sweeps)
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
            }
        )
    return out


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
    args.out.with_suffix(".json").write_text(json.dumps({"target": TARGET, "runs": runs}, indent=2) + "\n")
    rows = [
        f"| {label} | {f['floor']} | {f['limiting']} | {f['sweeps']} | "
        f"{f['recorded_mde']:.1%} | **{f['mde']:.1%}** | {_pct(f['mde_crossing_alone'])} | {f['service_df']:.3g} | "
        f"{f['prior']} |"
        for label, run in runs.items()
        for f in run["floors"]
    ]
    over = [f for run in runs.values() for f in run["floors"] if f["mde"] is None or f["mde"] > TARGET]
    total = sum(len(run["floors"]) for run in runs.values())
    args.out.with_suffix(".md").write_text(
        "# The main job's floors, recomputed by today's code\n\n"
        f"Command: `python benchmarks/main_job_floors.py {' '.join('--run ' + r.split('=')[0] + '=STATE' for r in args.run)} "
        f"--out {args.out}`\n\n"
        "| run | floor | limited by | sweeps | MDE in its review | MDE today | crossing alone | service-rate df | prior |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nOver {TARGET:.0%} today: {len(over)} of {total}.\n\n"
        "Crossing alone: the MDE of a change judged by the SLA crossing alone, as one is where ITL, not a queue, "
        "sets the SLA limit the service rate would speak for (loadgen.judge).\n"
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


if __name__ == "__main__":
    main()
