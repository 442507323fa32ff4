"""The research campaign on a real GPU endpoint: `chat_azure_h200_default` on one H200 with
`transformers serve`, split across short calls on the GPU machine, then recorded here.

Stages (docs/gpu.md says how to run them):

``prepare`` (here, once): the tokenizer, the trace slice and the replay pool, built by the same
code as ``gpu_transformers_serve.py prepare`` into ``.gpubench/``.

``run`` (GPU machine, one call of at most 10 minutes each): builds the random Qwen3 (seconds),
restores the campaign's state from ``.gpubench/state.tgz`` when a previous call left one, and runs
``research.campaign.run_campaign`` with ``stop_after_s``: the campaign pauses before an experiment
that would not end within the call and resumes in the next call. ``--hand-tuned`` then measures
the best configuration found by hand as one experiment unit, through the unit's own entry point
(``autoresearch experiment run``, the same harness), judged against the campaign's best, if the call
has time left. Everything comes back as
``$OUT/state.tgz`` plus a log.

``report`` (here): unpacks the last state, records the campaign into this host's research memory
(DuckDB), writes the review report and ``benchmarks/results/gpu_campaign.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.gpu_transformers_serve import MODEL_NAME, POOL_LIMIT, WORK, build_model, prepare  # noqa: E402

CAMPAIGN = "chat_azure_h200_default"
ENDPOINT = "chat_azure_h200"
STATE = WORK / "campaign"
TARBALL = WORK / "state.tgz"
RESULTS = REPO / "benchmarks" / "results"
#: the best configuration found by hand for this engine and model (docs/gpu.md, ENVIRONMENT.md):
#: CUDA graphs doubled throughput, --compile made it slower, 8192 batch tokens was the best budget
#: (the H200 default), the KV cache already takes ~90% of free memory by default.
HAND_TUNED = ["--continuous-batching", "--cb-use-cuda-graph", "--cb-max-batch-tokens", "8192"]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def definitions(models: Path, engine_python: str):
    """The shipped campaign and endpoint, with this machine's interpreter, model folder and the carried
    trace slice (nothing else changes: sweep, SLA and budget are as declared)."""
    os.environ["AUTORESEARCH_MODELS"] = str(models)
    from specs.config import CampaignSpec, EndpointSpec, read_declaration  # no Dagster on the GPU machine

    defs = REPO / "definitions"
    campaign = read_declaration(defs / "campaigns" / CAMPAIGN / "defs.yaml", CampaignSpec)
    spec = read_declaration(defs / "endpoints" / ENDPOINT / "defs.yaml", EndpointSpec)
    engine = spec.engine.model_copy(update={"python": engine_python})
    traffic = spec.traffic.model_copy(update={"path": str(WORK / "azure2023_conv_slice.csv"), "limit": POOL_LIMIT})
    return campaign, spec.model_copy(update={"engine": engine, "traffic": traffic})


def shipped_endpoint(engine_python: str, model_size: str = "442m"):
    """The shipped endpoint on this machine, its random model built first if it is not there yet."""
    models = WORK / "models"
    if not (models / MODEL_NAME / "config.json").exists():
        build_model(models / MODEL_NAME, WORK / "tokenizer", model_size)
    return definitions(models, engine_python)[1]


def pool():
    import polars as pl

    return pl.read_parquet(WORK / "pool" / f"{ENDPOINT}-pool.parquet")


def pack(out: Path) -> Path:
    """The campaign's state folder as one file (what a call can send back), engine logs included."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "state.tgz"
    with tarfile.open(target, "w:gz") as tar:
        tar.add(STATE, arcname="campaign")
    return target


def unpack(tarball: Path) -> None:
    if STATE.exists():
        shutil.rmtree(STATE)
    with tarfile.open(tarball) as tar:
        tar.extractall(WORK, filter="data")


def _compact_internals(internals: dict | None) -> dict | None:
    """The overlay's counts without the per-capture timeline (its length and last capture stay)."""
    if not internals:
        return None
    captures = dict(internals.get("captures") or {})
    at = captures.pop("at_s", []) or []
    captures["last_at_s"] = at[-1] if at else None
    return {**internals, "captures": captures}


def _soak(soak, experiment=None) -> dict | None:
    """The soak's record; for an experiment that was not soaked, why not (only a candidate that could be
    adopted is soaked: not one that failed its correctness check, died, or measured worse or same)."""
    if soak is None:
        if experiment is None:
            return None
        why = (experiment.invalid_reason or f"verdict {experiment.verdict}").splitlines()[0][:160]
        return {"rate": None, "held_s": 0.0, "outcome": f"not soaked: {why}"}
    keys = ("rate", "measured_rate", "held_s", "outcome", "diagnosis", "overload", "backed_off", "reasons")
    return {k: getattr(soak, k) for k in keys}


def _internal_first():
    """The rules' proposals with the fixes of an out-of-memory baseline first, then the engine-internal
    ones (the same proposals, in another order): when a session's GPU time covers only part of a round,
    what it measures is what would keep the endpoint up, then the internals."""
    from research.campaign.steps import default_propose

    propose = default_propose("rules")

    def ordered(endpoint, diagnosis, state, n, skip):
        found = propose(endpoint, diagnosis, state, n, skip)

        def rank(p) -> int:  # a stable sort: the proposer's order holds within each rank
            return 0 if p.bottleneck == "memory_headroom" else 1 if p.technique.startswith("internal_") else 2

        return sorted(found, key=rank)

    return ordered


def run(args) -> None:
    from research.campaign import run_campaign

    started = time.monotonic()
    out = Path(args.out)
    calls_file = STATE / "gpu_calls.json"
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # unwind: stop the engine, pack
    if TARBALL.exists():  # the state the previous call sent back, carried with this one
        unpack(TARBALL)
        log(f"resumed the campaign state from {TARBALL.name}")
    STATE.mkdir(parents=True, exist_ok=True)
    calls = json.loads(calls_file.read_text()) if calls_file.exists() else []
    call = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": os.uname().nodename, "window_s": args.window_s}
    calls.append(call)
    models = WORK / "models"
    if not (models / MODEL_NAME / "config.json").exists():
        call["model"] = build_model(models / MODEL_NAME, WORK / "tokenizer", args.model_size)
        log(f"model built: {call['model']['parameters']:,} parameters in {call['model']['build_s']} s")
    campaign, spec = definitions(models, args.engine_python)
    if args.deadline_minutes is not None:  # the campaign's wall-clock deadline, when the declared one is spent
        campaign = campaign.model_copy(
            update={
                "deadline_minutes": args.deadline_minutes,
                "gpu_hours": max(campaign.gpu_hours, args.deadline_minutes / 60),
            }
        )
        spec = spec.model_copy(
            update={
                "budget": spec.budget.model_copy(
                    update={
                        "wall_clock_minutes": args.deadline_minutes,
                        "gpu_hours": max(spec.budget.gpu_hours or 0.0, args.deadline_minutes / 60),
                    }
                )
            }
        )
        call["deadline_minutes"] = args.deadline_minutes
        call["reopened"] = reopen()
    if args.rejudge:  # an experiment whose verdict a harness fix changed: run again, the old record kept
        call["rejudged"] = rejudge(args.rejudge)
    if args.max_rounds is not None:  # the session's GPU time left, not the shipped campaign's own choice
        campaign = campaign.model_copy(update={"max_rounds": args.max_rounds})
        call["max_rounds"] = args.max_rounds
    call["internal_first"] = bool(args.internal_first)
    try:
        if args.hand_tuned_first:  # the reference comes first when a session's GPU time is nearly spent
            hand_tuned(spec, args.window_s - (time.monotonic() - started), call)
        window = args.window_s - (time.monotonic() - started)
        outcome = run_campaign(
            campaign,
            spec,
            state_dir=STATE,
            memory=None,
            proposer="rules",
            pool=pool(),
            progress=log,
            stop_after_s=window,
            propose_fn=_internal_first() if args.internal_first else None,
        )
        call["outcome"] = {
            "finished": outcome.finished,
            "end_reason": outcome.end_reason,
            "reference_capacity": outcome.reference_capacity,
            "best_capacity": outcome.best_capacity,
        }
        left = args.window_s - (time.monotonic() - started)
        if args.hand_tuned and outcome.finished:
            hand_tuned(spec, left, call)
    finally:
        call["wall_s"] = round(time.monotonic() - started, 1)
        calls_file.write_text(json.dumps(calls, indent=1))
        log(f"packed {pack(out)}")


def reopen() -> str | None:
    """A campaign that ended on its deadline is open again under a later one (the old end reason is
    returned for the call log); one that ended for any other reason stays ended."""
    from research.state import StateStore

    store = StateStore(STATE, CAMPAIGN)
    state = store.load()
    if state is None or not state.finished or not (state.end_reason or "").startswith("deadline"):
        return None
    ended, state.finished, state.end_reason = state.end_reason, False, None
    store.save(state)
    log(f"reopened the campaign under the new deadline (it had ended: {ended})")
    return ended


def rejudge(experiment_ids: list[str]) -> list[dict]:
    """Drop these experiments from the state so that the campaign runs them again; their old records are
    kept in the call log (``gpu_calls.json``) beside the reason, nothing is lost."""
    from research.state import StateStore

    store = StateStore(STATE, CAMPAIGN)
    state = store.load()
    dropped = []
    for eid in experiment_ids:
        old = state.experiments.pop(eid, None) if state is not None else None
        if old is None:
            raise SystemExit(f"error: --rejudge {eid}: no such experiment in the campaign state")
        dropped.append(json.loads(old.model_dump_json(exclude={"sweeps", "candidate", "log_tail"})))
        for rnd in state.rounds:  # its round runs it again
            if rnd.round == old.round:
                rnd.finished, rnd.outcome = False, None
        log(f"rejudging {eid} ({old.title}): its record ({old.verdict}) is kept in gpu_calls.json")
    store.save(state)
    return dropped


def hand_tuned(spec, left_s: float, call: dict) -> None:
    """The hand-tuned reference as one experiment unit, started through the unit's own entry point
    (``autoresearch experiment run SPEC --out DIR``, what a Dagster asset runs through Pipes and a
    Modal container runs), judged against the campaign's best (its working baseline's noise floor)."""
    from autoresearch.experiment_unit import unit_command
    from research.campaign import estimate_seconds
    from research.experiment import ExperimentResult, ExperimentSpec
    from research.state import StateStore

    path = STATE / "hand_tuned.json"
    if path.exists():
        return
    state = StateStore(STATE, CAMPAIGN).load()
    if state is None or state.reference is None or state.working is None:
        call["hand_tuned"] = "not run: the campaign has no measured reference yet"
        return
    need = estimate_seconds(state, spec, 2)
    if need > left_s:
        call["hand_tuned"] = f"not run: needs about {need:.0f} s, {left_s:.0f} s left in this call"
        log(call["hand_tuned"])
        return
    unit = STATE / "hand_tuned.unit"
    spec_file = ExperimentSpec(
        label="hand_tuned", endpoint=spec, engine_args=HAND_TUNED, repeats=2, noise_floor=state.working.noise
    ).write(unit, pool())
    command = unit_command(spec_file, unit)
    log(f"hand-tuned reference as an experiment unit: {' '.join(command)}")
    began = time.monotonic()
    subprocess.run(command, check=False, timeout=max(60.0, left_s))
    result = ExperimentResult.read(unit)
    path.write_text(result.candidate.model_dump_json(indent=1, exclude={"reference"}))
    call["hand_tuned"] = {
        "verdict_vs_best": result.verdict,
        "capacities": result.capacities,
        "unit": {
            "entry_point": command[1:5],
            "host": result.host,
            "wall_s": round(result.wall_s, 1),
            "subprocess_wall_s": round(time.monotonic() - began, 1),
        },
    }


def unit(args) -> None:
    """One experiment unit on this machine through its entry point (``autoresearch experiment run``):
    the endpoint as shipped with ``--set``-style engine arguments, no verdict (no noise floor)."""
    from autoresearch.experiment_unit import unit_command
    from research.experiment import ExperimentSpec

    models = WORK / "models"
    if not (models / MODEL_NAME / "config.json").exists():
        build_model(models / MODEL_NAME, WORK / "tokenizer", args.model_size)
    _, spec = definitions(models, args.engine_python)
    sweep = spec.sweep.model_copy(update=json.loads(args.sweep)) if args.sweep else spec.sweep
    folder = Path(args.out) / args.label
    spec_file = ExperimentSpec(
        label=args.label,
        endpoint=spec.model_copy(update={"sweep": sweep}),
        engine_args=args.engine_args,
        repeats=args.repeats,
    ).write(folder, pool())
    command = unit_command(spec_file, folder)
    log(" ".join(command))
    subprocess.run(command, check=False)


def report(args) -> Path:
    """Record the campaign here and write ``benchmarks/results/gpu_campaign.json`` with its review."""
    from specs import paths
    from memory_db.store import MemoryStore
    from research.campaign import record_campaign, total_gain
    from research.harness import CandidateResult
    from research.internals_evidence import latest as latest_internals
    from research.internals_evidence import summary as summary_of_internals
    from research.review import write_report
    from research.state import StateStore

    if args.state:
        unpack(Path(args.state))
    campaign, spec = definitions(WORK / "models", sys.executable)
    memory = MemoryStore(Path(args.memory) if args.memory else paths.memory_db_path())
    state = StateStore(STATE, CAMPAIGN).load()
    outcome = record_campaign(campaign, spec, state_dir=STATE, memory=memory, pool=pool())
    review_dir = RESULTS / "gpu_campaign_review"
    review = write_report(state, spec, campaign, review_dir)
    hand = STATE / "hand_tuned.json"
    hand_result = CandidateResult.model_validate_json(hand.read_text()) if hand.exists() else None
    calls = json.loads((STATE / "gpu_calls.json").read_text())
    experiments = []
    for e in sorted(state.experiments.values(), key=lambda e: e.started_at):
        corr = e.correctness
        experiments.append(
            {
                "id": e.experiment_id,
                "round": e.round,
                "kind": e.kind,
                "title": e.title,
                "change": e.diff,
                "verdict": e.verdict,
                "confirmed": e.confirmed,
                "capacities": [s.capacity_rps for s in e.sweeps],
                "capacity_ratio": e.comparison.capacity_ratio if e.comparison else None,
                "every_repeat_beat_noise_floor": e.confirmed,
                "correctness": (
                    f"{getattr(corr, 'evidence', 'checked')}: {corr.summary()}"
                    if corr
                    else "not checked" + (f" ({e.invalid_reason.splitlines()[0]})" if e.invalid_reason else "")
                ),
                "adopted": any(b.source_experiment == e.experiment_id for b in state.baselines),
                "invalid_reason": e.invalid_reason,
                "soak": _soak(e.soak, e),
                # content hashes of the overlays the engine ran with (settings, patch, evidence)
                "overlay_sha256": (e.identity or {}).get("overlays") or None,
                "internals": summary_of_internals(latest_internals(e.sweeps)),
                "internals_raw": _compact_internals(latest_internals(e.sweeps)),
            }
        )
    hand_caps = hand_result.capacities if hand_result else []
    gain, gain_is_bound = total_gain(state.reference, state.working)
    summary = {
        "campaign": CAMPAIGN,
        "endpoint": ENDPOINT,
        "campaign_id": state.campaign_id,
        "finished": state.finished,
        "end_reason": state.end_reason,
        "reference_args": state.reference.engine_args if state.reference else None,
        "reference_soak": _soak(state.reference.soak) if state.reference else None,
        "reference_internals": summary_of_internals(
            latest_internals(state.reference.sweeps) if state.reference else None
        ),
        "reference_capacity": state.reference.capacity if state.reference else None,
        "reference_capacities": state.reference.noise.capacities if state.reference else None,
        # a reference that held no rate down to its sweep floor: its capacity is below this (req/s)
        "reference_capacity_below_rps": (
            min(b for b in state.reference.noise.capacity_below if b is not None)
            if state.reference and any(state.reference.noise.capacity_below)
            else None
        ),
        "total_gain": gain,
        "total_gain_is_lower_bound": gain_is_bound,
        "best_args": state.working.engine_args if state.working else None,
        "best_capacity": state.working.capacity if state.working else None,
        "best_capacities": state.working.noise.capacities if state.working else None,
        "hand_tuned_args": HAND_TUNED,
        "hand_tuned_capacity": sum(hand_caps) / len(hand_caps) if hand_caps else None,
        "hand_tuned_capacities": hand_caps,
        # the harness's verdict on the hand-tuned configuration against the campaign's best (its noise floor)
        "hand_tuned_verdict_vs_best": hand_result.verdict if hand_result else None,
        "capacity_unit": "req/s within the declared SLA (TTFT p95 <= 1500 ms, ITL p95 <= 100 ms, errors <= 1%)",
        "gpu_minutes": round(sum(c.get("wall_s", 0.0) for c in calls) / 60, 2),
        "calls": len(calls),
        "call_log": calls,
        "experiments": experiments,
        "open_questions": state.open_questions,
        "best_vs_hand_tuned": (
            state.working.capacity / (sum(hand_caps) / len(hand_caps)) if hand_caps and state.working else None
        ),
        "noise_threshold_of_best": state.working.noise.threshold if state.working else None,
        "review_report": str(review.relative_to(REPO)),
        "rerun": "docs/gpu.md, 'The campaign on the H200'",
    }
    out = RESULTS / "gpu_campaign.json"
    out.write_text(json.dumps(summary, indent=1, default=str))
    log(f"wrote {out} and {review}; memory: {outcome.experiments_run} experiment(s) recorded")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="stage", required=True)
    sub.add_parser("prepare", help="tokenizer, trace slice and replay pool into .gpubench/ (here)")
    r = sub.add_parser("run", help="run or resume the campaign within one call (GPU machine)")
    r.add_argument("--out", required=True)
    r.add_argument("--window-s", type=float, default=540.0, help="this call's time for the campaign")
    r.add_argument("--engine-python", default=sys.executable)
    r.add_argument("--model-size", default="442m")
    r.add_argument("--hand-tuned", action="store_true", help="then measure the hand-tuned reference if time is left")
    r.add_argument("--max-rounds", type=int, help="fewer rounds than the campaign declares (recorded in the call log)")
    r.add_argument(
        "--deadline-minutes", type=float, help="the campaign's wall-clock deadline (recorded in the call log)"
    )
    r.add_argument("--rejudge", nargs="*", default=[], help="experiment ids to run again after a harness fix")
    r.add_argument(
        "--internal-first",
        action="store_true",
        help="run the round's engine-internal proposals first (recorded in the call log)",
    )
    r.add_argument(
        "--hand-tuned-first", action="store_true", help="measure the hand-tuned reference before resuming the campaign"
    )
    u = sub.add_parser("unit", help="one experiment unit through `autoresearch experiment run` (GPU machine)")
    u.add_argument("--out", required=True)
    u.add_argument("--label", default="unit")
    u.add_argument("--repeats", type=int, default=1)
    u.add_argument("--sweep", help="JSON of sweep fields to change (e.g. the engine warm-up)")
    u.add_argument("--engine-python", default=sys.executable)
    u.add_argument("--model-size", default="442m")
    u.add_argument("engine_args", nargs=argparse.REMAINDER, help="the engine's arguments (after --)")
    q = sub.add_parser("report", help="record the campaign into memory and write gpu_campaign.json (here)")
    q.add_argument("--state", help="a state.tgz brought back from the GPU machine")
    q.add_argument("--memory", help="DuckDB file (default: the project's research memory)")
    args = parser.parse_args(argv)
    if args.stage == "prepare":
        prepare()
    elif args.stage == "run":
        run(args)
    elif args.stage == "unit":
        args.engine_args = [a for a in args.engine_args if a != "--"]
        unit(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
