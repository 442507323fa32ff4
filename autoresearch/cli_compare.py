"""``autoresearch compare``: an A/B of two engine configurations on an endpoint's replay pool.

    autoresearch compare ENDPOINT --set engine.ARG=VALUE [--unset engine.ARG] [--against declared|confirmed|FILE]

The baseline is ``--against``: the endpoint as declared (the default), the configuration the research
memory confirmed last for it (``confirmed``), or a JSON file with ``engine_args`` (a campaign's
``<campaign>.best.json``). The candidate is the baseline with the ``--set``/``--unset`` overrides
(the syntax of ``sweep`` and ``engine up``); with none, the pair is an A/A.

Nothing here measures or judges: the comparison is one experiment of a campaign, run by the campaign's
own code (research.campaign): the baseline's sweeps, reference outputs and noise floor
(``CampaignLoop.baseline``), then the candidate through ``Bench.measure`` (research.harness.run_candidate:
its engine start, correctness check, sweeps, the paired sequential verdict, its soak) and booked by
``Bench.fill``/``Bench.finish``, which write the experiment's record to the research memory exactly as a
campaign's experiment is written. The measurement settings (repeats, extra repeats, floor target) are
those of the endpoint's campaign (its first declared one, else the defaults). The verdict is the campaign's
but for its futility stop: a campaign stops a look with no gain in sight as ``same``, since it adopts gains
only; a user's A/B judges a loss as firmly as a gain, so a look stops only once its interval decides.
"""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from pathlib import Path

from autoresearch.cli_errors import COMMAND_CONTEXT, UsageError

AGAINST_HINT = (
    "--against takes declared (the YAML), confirmed (the research memory's last confirmed one) or a FILE.json"
)
EXIT_INVALID = 5  # a comparison that reached no verdict (as `experiment run`)
EXIT_NOT_RECORDED = 6  # judged, but its record is not in the research memory


def add_parser(sub) -> None:
    """The ``compare`` subcommand (cli.build_parser calls this)."""
    p = sub.add_parser(
        "compare",
        help="judge one engine configuration against another on the endpoint's replay pool, with a "
        "campaign's paired sequential verdict; recorded in the research memory",
        description="Candidate = the baseline (--against) with the --set/--unset overrides; no override is an "
        "A/A. Prints the verdict, the effect with its interval, the MDE and both sides' capacities. "
        "Exit 0 on a verdict (better, same or worse), 2 on bad input, 5 when the comparison is invalid, 6 when "
        "its record could not be written to the research memory.",
    )
    p.add_argument("endpoint")
    p.add_argument(
        "--set",
        action="append",
        metavar="engine.ARG=VALUE",
        help="the candidate's change: set an engine argument (empty VALUE: a bare switch), e.g. "
        "--set engine.max-num-seqs=8, --set engine.enable-prefix-caching=",
    )
    p.add_argument("--unset", action="append", metavar="engine.ARG", help="the candidate's change: drop an argument")
    p.add_argument(
        "--against",
        default="declared",
        metavar="declared|confirmed|FILE",
        help="the baseline: the endpoint as declared (default), the configuration the research memory "
        "confirmed last (confirmed), or a JSON file with engine_args (a campaign's <campaign>.best.json)",
    )
    p.add_argument(
        "--db", help="the research memory (default: AUTORESEARCH_MEMORY_DB or the one under AUTORESEARCH_HOME)"
    )
    p.add_argument(
        "--wait", type=float, default=30.0, metavar="SECONDS", help="wait for a memory another process holds"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON (progress still goes to stderr)")
    p.set_defaults(func=cmd_compare)


# --- the two configurations ---------------------------------------------------------------------------


def baseline_args(spec, against: str, memory=None) -> list[str]:
    """The engine arguments ``--against`` names (``memory``: a MemoryStore, read for ``confirmed``)."""
    if against == "declared":
        return list(spec.engine.args)
    if against == "confirmed":
        args = memory.latest_confirmed_engine_args(spec.name) if memory is not None else None
        if not args:
            raise UsageError(
                f"--against confirmed: the research memory has no confirmed configuration for {spec.name}",
                where="--against",
                hint="run a campaign on it first, or compare against the declared one (--against declared)",
            )
        return list(args)
    path = Path(against)
    if not path.is_file():
        raise UsageError(f"--against {against!r}: no such file, and not declared or confirmed", hint=AGAINST_HINT)
    try:
        args = json.loads(path.read_text()).get("engine_args")
    except (OSError, ValueError, AttributeError) as exc:
        raise UsageError(f"--against {against}: not a readable JSON object ({exc})", hint=AGAINST_HINT) from None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise UsageError(
            f"--against {against}: has no engine_args list of strings",
            hint='write {"engine_args": ["--max-num-seqs", "8", ...]}, as a campaign\'s <campaign>.best.json does',
        )
    return args


def parse_overrides(sets: list[str] | None, unsets: list[str] | None) -> dict[str, str | None]:
    """The ``--set``/``--unset`` overrides as a diff (specs.engine_args.override_diff, the one parser of
    them); one that does not parse is a UsageError naming it."""
    from specs.engine_args import OverrideError, override_diff

    try:
        return override_diff(sets, unsets)
    except OverrideError as exc:
        raise UsageError(str(exc), hint="write --set engine.ARG=VALUE and --unset engine.ARG") from None


def candidate_args(base: list[str], sets: list[str] | None, unsets: list[str] | None) -> list[str]:
    """``base`` with the ``--set``/``--unset`` overrides; an override that does not parse, or an
    ``--unset`` of an argument the baseline does not have, is a UsageError naming it."""
    from specs.engine_args import REMOVE, apply_diff, parse_args

    diff = parse_overrides(sets, unsets)
    try:
        have = parse_args(base)
    except ValueError as exc:
        raise UsageError(f"the baseline's engine arguments do not parse: {exc}", where="--against") from None
    for flag, value in diff.items():
        if value == REMOVE and flag not in have:
            raise UsageError(
                f"--unset engine.{flag.lstrip('-')}: the baseline has no {flag} to drop",
                where="--unset",
                hint=f"the baseline's arguments are: {' '.join(base)}",
            )
    return apply_diff(base, diff)


def check_change(spec, base: list[str], cand: list[str]) -> bool:
    """The candidate's change passes the campaign's own launch checks (values, switches set both ways,
    parallelism within the GPUs); returns whether it is lossy (then its outputs get the distribution checks)."""
    from specs.engine_args import diff_args
    from research.interventions import validate_intervention
    from research.proposals import Intervention

    diff = diff_args(base, cand)
    if not diff:
        return False
    check = validate_intervention(
        Intervention(technique="compare", engine_arg_diff=diff),
        base,
        spec.engine.kind,
        gpu_count=spec.hardware.gpu_count,
    )
    problems = [r for r in check.reasons if "changes nothing" not in r]
    if problems:
        raise UsageError(
            "; ".join(problems),
            where="--set/--unset",
            hint=f"use values {spec.engine.kind} accepts; nothing was started",
        )
    return check.lossy


# --- the command ----------------------------------------------------------------------------------------


def cmd_compare(args) -> int:
    from autoresearch.cli import _endpoint, _memory_store
    from autoresearch.cli_preflight import check_engine, preflight
    from autoresearch.workflows import check_campaign_launch

    spec = _endpoint(args, args.endpoint)
    parse_overrides(args.set, args.unset)  # a malformed override, before any file is opened
    memory = _memory_store(args)
    base = baseline_args(spec, args.against, memory)
    base_spec = spec.with_engine_args(base)
    cand = candidate_args(base, args.set, args.unset)
    cand_spec = base_spec.with_engine_args(cand)
    check_campaign_launch(spec)
    check_engine(cand_spec, args.set, args.unset, here=False)  # flags the adapter rejects: before any host check
    lossy = check_change(spec, base, cand)
    preflight(base_spec, engine="here")  # the baseline's own flags (an --against file's), the host, the port
    preflight(cand_spec, args.set, args.unset, pool=False)
    campaign = COMMAND_CONTEXT["definitions"].campaign_of(spec.name)
    result = run_comparison(campaign, args.against, base_spec, cand, lossy, memory)
    print(json.dumps(result, indent=1) if args.json else render(result))
    if result["verdict"] == "invalid":
        print(f"error: the comparison is invalid: {result['reason']}", file=sys.stderr)
        return EXIT_INVALID
    if not result["recorded"]:
        print(
            f"error: the verdict was not recorded in the research memory {memory.path} (see the warning above)",
            file=sys.stderr,
        )
        return EXIT_NOT_RECORDED
    return 0


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_comparison(declared, against: str, base_spec, cand: list[str], lossy: bool, memory) -> dict:
    """The baseline (``base_spec``'s engine arguments) measured as a campaign measures its own (sweeps,
    reference outputs, noise floor), then ``cand`` as one experiment of that campaign, with the settings of
    the endpoint's campaign ``declared``; state and engine logs under ``$AUTORESEARCH_HOME/compare/``."""
    from specs import paths
    from specs.engine_args import diff_args
    from autoresearch.workflows import load_pool
    from loadgen.compare import compare
    from research.campaign import CampaignLoop
    from research.state import ExperimentState, ProposalRecord, RoundRecord, experiment_id

    spec = base_spec
    name = f"compare_{spec.name}"[:63]
    campaign = declared.model_copy(
        update={"name": name, "max_rounds": 1, "proposer": "rules", "profile_seconds": 0.0, "production_check_s": 0.0}
    )
    state_dir = paths.home() / "compare" / f"{spec.name}-{time.strftime('%Y%m%dT%H%M%S')}"
    loop = CampaignLoop(
        campaign,
        base_spec,
        state_dir,
        memory=memory,
        proposer="rules",
        pool=load_pool(base_spec),
        progress=_progress,
        propose_fn=lambda *a: [],
        # a user's A/B wants a loss judged as firmly as a gain: no futility stop (a campaign's rule)
        compare_fn=partial(compare, futility=False),
    )
    state, base = loop.state, list(base_spec.engine.args)
    diff = diff_args(base, cand)
    change = " ".join(f"{f}={v}" if v is not None else f for f, v in diff.items()) or "none (an A/A pair)"
    out = {
        "endpoint": spec.name,
        "against": against,
        "baseline_args": base,
        "candidate_args": cand,
        "change": diff,
        "campaign_id": state.campaign_id,
        "state_dir": str(state_dir),
        "memory": str(memory.path),
        "recorded": False,
    }
    _progress(f"compare {spec.name}: candidate {change} against the {against} configuration")
    reason = loop.baseline() or loop.budget.check(loop.budget.estimate(loop.ctx.repeats))
    if reason is not None:  # no verdict: the campaign's record says why (its stop reason)
        state.finished, state.end_reason = True, reason
        loop.ctx.save()
        loop.recorder.campaign("failed")
        return {**out, "verdict": "invalid", "reason": reason}
    proposal = ProposalRecord(
        proposal_id="compare",
        title=f"compare: {change}",
        technique="user_compare",
        bottleneck="unspecified",
        engine_arg_diff=diff,
        lossy=lossy,
        explanation=f"a user's A/B (autoresearch compare) against the {against} configuration",
        source="user",
    )
    rnd = RoundRecord(round=1, baseline_args=base, proposals=[proposal])
    state.rounds.append(rnd)
    record = ExperimentState(
        experiment_id=experiment_id("candidate", base, cand, loop.ctx.repeats),
        round=1,
        proposal_ids=[proposal.proposal_id],
        title=proposal.title,
        baseline_args=base,
        engine_args=cand,
        diff=diff,
        lossy=lossy,
        verdict="skipped",
        started_at=time.time(),
    )
    working = state.working
    _progress(f"experiment {record.experiment_id}: {proposal.title}")
    loop.bench.fill(record, loop.bench.measure(cand, loop.ctx.repeats, noise=working.noise, lossy=lossy))
    loop.bench.finish(rnd, record, proposal)
    rnd.finished, state.finished, state.end_reason = True, True, "comparison judged"
    loop.ctx.save()
    loop.recorder.open_questions()
    loop.recorder.campaign("finished")
    recorded = any(
        e.experiment_id == loop.recorder.memory_id(record) for e in memory.experiments(spec.name, state.campaign_id)
    )
    return {**out, **summary(record, working), "experiment_id": loop.recorder.memory_id(record), "recorded": recorded}


def summary(record, working) -> dict:
    """What the comparison says: verdict, effect with its interval, MDE, and both sides' capacities (the
    verdict's own: its estimator's capacity within the SLA, the one docs/measurement.md defines; and what
    each side's soak held where one ran)."""
    c = record.comparison
    return {
        "verdict": record.verdict,
        "confirmed": record.confirmed,
        "reason": record.invalid_reason,
        "effect": c.effect if c else None,
        "effect_low": c.effect_low if c else None,
        "effect_high": c.effect_high if c else None,
        "confidence": c.confidence if c else None,
        "mde": c.mde if c else None,
        "decided_by": c.decided_by if c else None,
        "evidence": c.evidence if c else None,
        "baseline_capacity": c.baseline_capacity if c else working.capacity,
        "candidate_capacity": (c.candidate_mean if c else record.capacity_mean),
        "baseline_capacities": c.baseline_capacities if c else working.noise.capacities,
        "candidate_capacities": c.candidate_capacities if c else [s.capacity_rps for s in record.sweeps],
        "baseline_soak_rps": working.soak.sustained_rate if working.soak else None,
        "candidate_soak_rps": record.soak.sustained_rate if record.soak else None,
        "repeats": {"baseline": len(working.sweeps), "candidate": len(record.sweeps)},
        "correctness": record.correctness.reason if record.correctness else None,
    }


def _rate(value) -> str:
    return "unmeasured" if value is None else f"{value:.3g} req/s"


def render(r: dict) -> str:
    """The comparison for a person: one fact a line."""
    change = " ".join(f"{f}={v}" if v is not None else f for f, v in r["change"].items()) or "none (A/A)"
    lines = [f"compare {r['endpoint']}: {r['verdict'].upper()}" + (" (confirmed)" if r.get("confirmed") else "")]
    lines.append(f"  baseline            {r['against']}: {' '.join(r['baseline_args'])}")
    lines.append(f"  change              {change}")
    if r.get("effect") is not None:
        interval = (
            f" ({r['confidence'] * 100:g}% interval {r['effect_low']:+.1%} to {r['effect_high']:+.1%})"
            if r.get("effect_low") is not None
            else ""
        )
        lines.append(
            f"  effect              {r['effect']:+.1%}{interval}"
            + (f", by {r['decided_by']}" if r.get("decided_by") else "")
        )
    if r.get("mde") is not None:
        lines.append(f"  MDE                 {r['mde']:.1%} (the smallest effect this verdict could detect)")
    if "baseline_capacity" in r:
        n, by = r.get("repeats", {}), r.get("decided_by") or "the sweeps"
        lines.append(
            f"  capacity            baseline {_rate(r['baseline_capacity'])}, candidate {_rate(r['candidate_capacity'])} "
            f"(by {by}, within the SLA; {n.get('baseline')} and {n.get('candidate')} sweep(s))"
        )
        if r.get("baseline_soak_rps") is not None or r.get("candidate_soak_rps") is not None:
            lines.append(
                f"  sustained (soak)    baseline {_rate(r.get('baseline_soak_rps'))}, "
                f"candidate {_rate(r.get('candidate_soak_rps'))}"
            )
    if r.get("correctness"):
        lines.append(f"  correctness         {r['correctness']}")
    if r.get("reason"):
        lines.append(f"  reason              {r['reason'].splitlines()[0]}")
    if r.get("evidence"):
        lines.append(f"  evidence            {r['evidence']}")
    if r.get("experiment_id"):
        lines.append(
            f"  recorded            {r['experiment_id']} in {r['memory']}" + ("" if r["recorded"] else " (FAILED)")
        )
    lines.append(f"  engine logs, state  {r['state_dir']}")
    return "\n".join(lines)
