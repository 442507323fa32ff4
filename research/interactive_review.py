"""Review report of the interactive research graph (assets/research.py): the confirmed candidate
against the baseline it beat. Campaign reports are research.review.write_report."""

from __future__ import annotations

import shlex
from pathlib import Path

from specs import paths
from specs.config import EndpointSpec
from loadgen.results import NoiseFloor, SweepResult
from research.loop import CandidateRun, CandidateVerdict
from research.review import _diff_table, economics_lines, load_curves_png


def interactive_report(
    endpoint: EndpointSpec,
    best: CandidateVerdict | None,
    run: CandidateRun | None,
    baseline_runs: list[SweepResult],
    noise_floor: NoiseFloor,
) -> tuple[str, Path | None]:
    """Markdown for a person to approve, and the before/after load-curve plot (None when nothing won)."""
    if best is None or run is None or run.result is None:
        return (
            f"# {endpoint.name}: nothing to review\n\nNo candidate beat the noise floor in all its repeats "
            "with a lossless change; the working baseline is unchanged.\n",
            None,
        )
    before, after = list(baseline_runs), list(run.result.sweeps)
    plot = load_curves_png(before, after, endpoint, paths.runs_dir() / "plots" / f"{endpoint.name}-review.png")
    correctness = run.result.correctness
    sets = " ".join(
        f"--set engine.{flag.lstrip('-')}={'' if value is None else value}"
        for flag, value in run.proposal.intervention.engine_arg_diff.items()
    )
    lines = [
        f"# {endpoint.name}: review of {best.proposal_id}",
        "",
        f"**Verdict**: {best.verdict} (confirmed in every repeat), capacity x{best.capacity_ratio:.2f}; "
        f"**{'LOSSY: needs a human decision on quality' if best.lossy else 'lossless'}**. Nothing is deployed.",
        "",
        "## Configuration diff",
        *_diff_table(best.baseline_args, best.engine_args),
        "",
        "## Evidence",
        f"- baseline capacities: {noise_floor.capacities} (noise threshold {noise_floor.threshold:.3f}, "
        f"relative spread {noise_floor.capacity_rel_spread:.3f})",
        f"- candidate capacities (repeats): {best.capacities}",
        f"- comparison: {best.evidence}",
        f"- correctness: {correctness.reason if correctness else 'not checked'}",
        f"- hypothesis: {run.proposal.explanation}",
        f"- prediction: {run.proposal.prediction}",
        f"- falsification: {run.proposal.falsification}",
        "",
        *economics_lines([("baseline", before), ("candidate", after)], endpoint),
        "## Reproduce",
        "```bash",
        f"autoresearch sweep {endpoint.name}   # the baseline",
        f"autoresearch sweep {endpoint.name} {sets}   # the candidate",
        "```",
        "Candidate engine arguments: `" + " ".join(shlex.quote(a) for a in best.engine_args) + "`",
    ]
    return "\n".join(lines) + "\n", plot
