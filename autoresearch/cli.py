"""``autoresearch``: headless use of the same code the Dagster assets call.

Every subcommand is a thin wrapper: parse arguments, call a plain module, print a table
(or JSON). Errors print what to do and exit non-zero; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from autoresearch import paths
from autoresearch.config import DefinitionError, DefinitionSet
from launchers import LaunchRefused


def load_definitions(root: Path) -> DefinitionSet:
    """The defs folder, read through the Dagster components (imported here, not at the top: the
    experiment unit's entry point, ``experiment run``, reads only its spec.json and runs where Dagster
    is not installed, on a GPU machine or in a Modal container)."""
    from dagster_project.lib import load_definitions as load

    return load(root)


class UsageError(Exception):
    """A user-facing error: printed without a traceback."""


def _definitions(args) -> DefinitionSet:
    return load_definitions(Path(args.definitions) if args.definitions else paths.definitions_dir())


def _endpoint(args, name: str):
    try:
        return _definitions(args).endpoint(name)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None


# --- validate -------------------------------------------------------------------------------

def cmd_validate(args) -> int:
    target = Path(args.path or args.definitions or paths.definitions_dir())
    if not target.exists():
        raise UsageError(f"{target} does not exist")
    definitions = load_definitions(target)
    print(f"{target}: {len(definitions.endpoints)} endpoint(s), {len(definitions.campaigns)} campaign(s), "
          f"{len(definitions.recipes)} recipe(s) - all valid")
    for name, spec in sorted(definitions.endpoints.items()):
        print(f"  endpoint {name:<24} engine={spec.engine.kind:<12} launcher={spec.launcher.kind:<6} "
              f"model={spec.model.path}")
    return 0


def cmd_migrate(args) -> int:
    """Old-layout YAML (top-level endpoint:/campaign:/recipe: keys) -> one defs.yaml per declaration."""
    from dagster_project.lib.migrate import migrate_folder

    old, new = Path(args.old), Path(args.new)
    if not old.is_dir():
        raise UsageError(f"{old} is not a folder")
    for source, written in migrate_folder(old, new):
        print(f"{source} -> {written}")
    load_definitions(new)  # the result must load (exit 1 with file:line errors otherwise)
    print(f"{new}: valid; check it with `dg check defs` and remove {old} when done")
    return 0


# --- engine ---------------------------------------------------------------------------------

def cmd_engine(args) -> int:
    from engines.base import EngineError

    from autoresearch import engine_control as lifecycle

    spec = _apply_sets(_endpoint(args, args.endpoint), args.set, args.unset)
    if args.action == "up":
        try:
            state = lifecycle.up(spec)
        except EngineError as exc:
            raise UsageError(f"{spec.name}: engine did not come up: {exc}") from None
        if args.json:
            print(json.dumps(state, indent=2))
        else:
            print(f"{spec.name}: healthy at {state['base_url']} (pid {state['pid']}, model {state['served_model']})")
            print(f"  log: {state['log_path']}")
    elif args.action == "down":
        stopped = lifecycle.down(spec)
        print(json.dumps({"endpoint": spec.name, "stopped": stopped}) if args.json
              else f"{spec.name}: {'stopped' if stopped else 'was not running'}")
    else:
        status = lifecycle.status(spec)
        print(json.dumps(status, indent=2) if args.json else _format_status(status))
        return 0 if status.get("healthy") else 3
    return 0


def _format_status(status: dict) -> str:
    lines = [f"{status['endpoint']}: {'healthy' if status.get('healthy') else status.get('state', 'down')}"]
    for key in ("base_url", "pid", "served_model", "engine_version", "requests_running", "requests_waiting",
                "kv_cache_usage", "log_path"):
        if status.get(key) is not None:
            lines.append(f"  {key:<18} {status[key]}")
    return "\n".join(lines)


# --- replay ---------------------------------------------------------------------------------

def cmd_replay(args) -> int:
    from autoresearch.workflows import build_replay_pool

    build = build_replay_pool(_endpoint(args, args.endpoint))
    print(build.table())
    return 0 if build.fidelity.passed else 4


# --- sweep ----------------------------------------------------------------------------------

def _apply_sets(spec, sets: list[str] | None, unsets: list[str] | None = None):
    """``--set engine.ARG=VALUE`` (empty VALUE = a bare switch) and ``--unset engine.ARG`` on the endpoint."""
    from autoresearch.engine_args import OverrideError, apply_overrides

    try:
        return apply_overrides(spec, sets, unsets)
    except OverrideError as exc:
        raise UsageError(str(exc)) from None


def cmd_sweep(args) -> int:
    from autoresearch.workflows import sweep_endpoint
    from loadgen.report import render_text

    from loadgen.sweep import render_users

    spec = _apply_sets(_endpoint(args, args.endpoint), args.set, args.unset)
    users = _user_counts(args.users) if args.users else None
    results = sweep_endpoint(spec, progress=not args.json, users=users, rates=users is None)
    for result in results:
        print(result.model_dump_json(indent=2) if args.json
              else render_users(result) if result.mode == "users" else render_text(result))
    return 0 if all(r.validity == "valid" for r in results) else 5


def _user_counts(text: str) -> list[int]:
    """``--users 1,2,4,8``: increasing positive integers."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--users {text!r}: expected comma-separated integers, e.g. --users 1,2,4,8") from None
    if not counts or any(c < 1 for c in counts) or sorted(set(counts)) != counts:
        raise UsageError(f"--users {text!r}: expected increasing positive integers, e.g. --users 1,2,4,8")
    return counts


def cmd_loadgen(args) -> int:
    from loadgen.calibrate import calibrate

    result = calibrate(duration_s=args.duration, senders=args.senders)
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(f"client sustains {result.max_rate:g} req/s on schedule with {args.senders} sender(s) "
              "against the null endpoint (saved; sweeps beyond it are refused)")
    return 0


# --- experiment unit ------------------------------------------------------------------------

def cmd_experiment(args) -> int:
    if args.action == "spec":
        return _experiment_spec(args)
    from autoresearch.experiment_unit import run_unit
    from research.experiment import ExperimentSpec

    spec_path = Path(args.target)
    if not spec_path.is_file():
        raise UsageError(f"{spec_path}: no such spec file (write one with `autoresearch experiment spec ENDPOINT --out DIR`)")
    try:
        ExperimentSpec.read(spec_path)
    except ValueError as exc:  # pydantic's ValidationError, or JSON that is not a spec
        raise UsageError(f"{spec_path}: not an experiment spec: {exc}") from None
    out = Path(args.out) if args.out else spec_path.parent
    result = run_unit(spec_path, out)
    capacities = ", ".join(f"{c:.3g}" for c in result.capacities) or "none"
    print(f"experiment {result.label} on {result.endpoint}: verdict {result.verdict}; capacity per repeat {capacities} "
          f"req/s; result in {out / 'result.json'}")
    if result.verdict == "invalid":
        print(f"experiment {result.label} on {result.endpoint} invalid: {result.invalid_reason}", file=sys.stderr)
        return 0 if args.invalid_ok else 5
    return 0


def _experiment_spec(args) -> int:
    from autoresearch.workflows import write_experiment
    from loadgen.results import NoiseFloor

    if not args.out:
        raise UsageError("experiment spec needs --out DIR (spec.json and pool.parquet are written there)")
    spec = _apply_sets(_endpoint(args, args.target), args.set, args.unset)
    noise = NoiseFloor.model_validate_json(Path(args.noise_floor).read_text()) if args.noise_floor else None
    path = write_experiment(spec, Path(args.out), repeats=args.repeats, label=args.label, noise=noise,
                            cuda_visible_devices=args.cuda_visible_devices)
    print(f"wrote {path} and {path.parent / 'pool.parquet'}; run it with `autoresearch experiment run {path}`")
    return 0


# --- campaign -------------------------------------------------------------------------------

def cmd_campaign(args) -> int:
    from autoresearch.workflows import resolve_campaign, run_campaign

    try:
        campaign, endpoint = resolve_campaign(_definitions(args), args.name)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    stop_after = args.stop_after * 60 if args.stop_after else None
    outcome = run_campaign(campaign, endpoint, proposer=args.proposer, from_declared=args.from_declared,
                           stop_after_s=stop_after)
    print(format_outcome(outcome))
    if not outcome.finished:
        print(f"campaign {outcome.campaign} {outcome.end_reason}", file=sys.stderr)
        return 75  # EX_TEMPFAIL: not done, run again to resume
    if outcome.failure:
        print(f"campaign {outcome.campaign} failed: {outcome.failure}", file=sys.stderr)
        return 4 if outcome.reference_capacity is None else 3
    return 0


def format_outcome(outcome) -> str:
    gain = (f"{'>=' if outcome.total_gain_is_lower_bound else ''}{outcome.total_gain:.2f}x" if outcome.total_gain else "none")
    lines = [
        f"campaign {outcome.campaign} on {outcome.endpoint}: "
        f"{'FAILED' if outcome.failure else 'finished' if outcome.finished else 'paused'}"
        f" ({outcome.end_reason})",
        f"  reference capacity  {outcome.reference_capacity} req/s with {' '.join(outcome.reference_args)}",
        f"  best capacity       {outcome.best_capacity} req/s with {' '.join(outcome.best_args)}",
        f"  total gain          {gain}",
        f"  experiments         {outcome.experiments_run} run ({outcome.experiments_measured} to a verdict), "
        f"{outcome.experiments_skipped} skipped",
    ]
    if outcome.report_path:
        lines.append(f"  review report       {outcome.report_path}")
    if outcome.best_config_path:
        lines.append(f"  best configuration  {outcome.best_config_path}")
    for question in outcome.open_questions:
        lines.append(f"  open question: {question}")
    return "\n".join(lines)


# --- memory ---------------------------------------------------------------------------------

def cmd_memory(args) -> int:
    from memory_db import queries
    from memory_db.store import MemoryStore

    store = MemoryStore(args.db or paths.memory_db_path())
    if args.action == "ingest":
        print(f"ingested {store.ingest()} spooled record(s); {store.pending()} still pending")
        return 0
    if args.action == "export" and args.parquet:
        from memory_db.export import export_parquet

        if args.sql:
            raise UsageError("memory export --parquet DIR writes every endpoint; leave the endpoint name out")
        written = export_parquet(store, args.parquet)
        print(f"wrote {len(written)} endpoint partition(s) of v_run_steps under {args.parquet}")
        for path in written:
            print(f"  {path}")
        return 0
    if not args.sql:
        raise UsageError(f"memory {args.action} needs {'SQL' if args.action == 'query' else 'an endpoint name'}")
    if args.action == "query":
        frame = store.query(args.sql)
        fmt = "json" if args.json else "csv" if args.csv else "table"
        print(queries.format_frame(frame, fmt))
    elif args.action == "export":
        from memory_db.export import export_endpoint_markdown

        text = export_endpoint_markdown(store, args.sql)
        if args.out:
            Path(args.out).write_text(text)
            print(f"wrote {args.out}")
        else:
            print(text)
    return 0


# --- drafter --------------------------------------------------------------------------------

def cmd_drafter(args) -> int:
    """Train a draft model on the endpoint's own traffic and record it (docs/research_loop.md)."""
    from memory_db.store import MemoryStore

    store = MemoryStore(args.db or paths.memory_db_path())
    if args.action == "list":
        rows = store.drafters(args.endpoint)
        if not rows:
            print(f"no drafter recorded for {args.endpoint}")
        for r in rows:
            acc = r.acceptance_offline.get("acceptance_length")
            served = r.acceptance_served.get("acceptance_length")
            print(f"{r.drafter_id}  {r.status:<5}  L{r.layers} k={r.num_speculative_tokens} steps={r.steps} "
                  f"data={r.train_examples} ex/{r.train_tokens} tok  offline accept len "
                  f"{acc if acc is None else f'{acc:.2f}'}  served {served if served is None else f'{served:.2f}'}  "
                  f"verdict {r.verdict or '-'}  {r.path}" + (f"  ({r.stale_reason})" if r.stale_reason else ""))
        return 0
    if args.action == "advise":
        return _drafter_advise(args)
    from autoresearch.workflows import load_pool
    from research.drafter import DrafterError, describe, draft_model_diff, train_for_endpoint

    spec = _endpoint(args, args.endpoint)
    workdir = Path(args.out) if args.out else paths.home() / "drafters" / spec.name
    try:
        rec = train_for_endpoint(spec, load_pool(spec), workdir, examples=args.examples, heldout=args.heldout,
                                 max_tokens=args.max_tokens, layers=args.layers, steps=args.steps, lr=args.lr,
                                 k=args.k, baseline=not args.no_control)
    except DrafterError as exc:
        raise UsageError(str(exc)) from None
    store.record_drafter(rec)
    off = rec.acceptance_offline
    print(json.dumps(rec.model_dump(mode="json"), indent=1) if args.json else
          f"drafter {rec.drafter_id}: {rec.train_examples} examples ({rec.train_tokens} reply tokens), {rec.steps} steps "
          f"in {rec.train_s:.0f} s\n  offline acceptance length {off['acceptance_length']:.2f} "
          f"(per position {', '.join(f'{p:.2f}' for p in off['accepted_per_position'])}) on {rec.heldout_examples} "
          f"held-out replies\n  candidate: "
          f"{describe(draft_model_diff(spec.engine.kind, Path(rec.path), rec.num_speculative_tokens))}\n"
          f"  judge it: materialize {spec.name}/drafter_verdict, or let a campaign propose it")
    return 0


def _drafter_advise(args) -> int:
    """The proposer's drafter rule on a saved diagnosis: train one, or why not (exit 0 either way)."""
    from autoresearch.models import ensure_model
    from research.drafter import draft_cost_ratio
    from research.proposals import Diagnosis
    from research.rules import drafter_training

    if not args.diagnosis:
        raise UsageError("drafter advise needs --diagnosis FILE (a Diagnosis as JSON, e.g. the diagnosis asset's "
                         "$AUTORESEARCH_HOME/assets/<endpoint>/diagnosis/value.json)")
    spec = _endpoint(args, args.endpoint)
    try:
        diagnosis = Diagnosis.model_validate_json(Path(args.diagnosis).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{args.diagnosis}: not a readable diagnosis: {str(exc).splitlines()[0]}") from None
    cost = draft_cost_ratio(ensure_model(spec.model.path), draft_layers=args.layers)
    why: list[str] = []
    s = drafter_training(diagnosis, k=args.k, draft_cost_ratio=cost, gpu_count=spec.hardware.gpu_count, why_not=why)
    if s is None:
        print(f"no drafter proposed for {spec.name}: {why[0] if why else 'no reason given'}")
        return 0
    print(s.explanation)
    for line in s.evidence:
        print(f"  - {line}")
    print(f"break-even acceptance length {s.break_even_acceptance_length:.2f} (k={s.k}); next: {s.command}")
    return 0


# --- pools ----------------------------------------------------------------------------------

def cmd_pools(args) -> int:
    """The GPU cap in Dagster: pool limits derived from the YAML, written to the instance (apply) or
    compared with it (show). Dagster keeps limits on the instance, so they are applied, not declared."""
    import os

    from dagster_project.pools import apply_limits, pool_limits

    limits = pool_limits(_definitions(args))
    if not os.environ.get("DAGSTER_HOME"):
        raise UsageError("DAGSTER_HOME is not set: point it at the Dagster instance folder the UI uses")
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        if args.action == "apply":
            rows = apply_limits(instance, limits)
        else:
            keys = set(storage.get_concurrency_keys()) if storage.supports_global_concurrency_limits else set()
            rows = [(pool, storage.get_concurrency_info(pool).slot_count if pool in keys else None, limit)
                    for pool, limit in limits.items()]
    print(f"{'pool':<32} {'instance':>9} {'from YAML':>9}")
    for pool, before, limit in rows:
        now = limit if args.action == "apply" else before
        print(f"{pool:<32} {('-' if now is None else now):>9} {limit:>9}")
    if args.action == "show" and any(before != limit for _, before, limit in rows):
        print("limits differ from the YAML: run `autoresearch pools apply`", file=sys.stderr)
        return 1
    return 0


# --- entry point ----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autoresearch", description=__doc__.splitlines()[0])
    parser.add_argument("--definitions", help="defs folder of defs.yaml files (default: dagster_project/defs or "
                        "$AUTORESEARCH_DEFINITIONS)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="validate YAML definitions (exit 1 with file:line errors)")
    p.add_argument("path", nargs="?")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("migrate", help="turn old-layout YAML (definitions/*.yaml) into defs.yaml files")
    p.add_argument("old", help="folder of old-layout YAML files")
    p.add_argument("new", help="defs folder to write (e.g. dagster_project/defs)")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("engine", help="bring an endpoint's engine up or down, or show its status")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("endpoint")
    p.add_argument("--set", action="append", metavar="engine.ARG=VALUE", help="up: override an engine argument")
    p.add_argument("--unset", action="append", metavar="engine.ARG", help="up: drop an engine argument")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_engine)

    p = sub.add_parser("replay", help="build an endpoint's replay pool and print its fidelity table")
    p.add_argument("action", choices=["build"])
    p.add_argument("endpoint")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("sweep", help="capacity sweep of an endpoint: load curve and capacity within the SLA")
    p.add_argument("endpoint")
    p.add_argument("--set", action="append", metavar="engine.ARG=VALUE",
                   help="override an engine argument (empty VALUE: a bare switch)")
    p.add_argument("--unset", action="append", metavar="engine.ARG", help="drop an engine argument")
    p.add_argument("--users", metavar="N,N,...",
                   help="concurrency mode instead of the rate sweep: hold these numbers of closed-loop users "
                        "(e.g. 1,2,4,8) and report the highest within the SLA (sweep.users in the YAML adds it "
                        "after the rate sweep)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("loadgen", help="load generator utilities")
    p.add_argument("action", choices=["calibrate"])
    p.add_argument("--duration", type=float, default=4.0, help="seconds per calibration rate")
    p.add_argument("--senders", type=int, default=1, help="sender processes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_loadgen)

    p = sub.add_parser("experiment", help="one experiment unit: write its spec, or run it (start, sweep, judge, stop)")
    p.add_argument("action", choices=["run", "spec"])
    p.add_argument("target", help="run: the spec file (spec.json); spec: the endpoint name")
    p.add_argument("--out", help="run: folder for result.json and engine.log (default: the spec's folder); "
                   "spec: folder for spec.json and pool.parquet")
    p.add_argument("--invalid-ok", action="store_true",
                   help="run: exit 0 on an invalid verdict (the launcher reads the verdict from the result)")
    p.add_argument("--set", action="append", metavar="engine.ARG=VALUE", help="spec: override an engine argument")
    p.add_argument("--unset", action="append", metavar="engine.ARG", help="spec: drop an engine argument")
    p.add_argument("--repeats", type=int, default=1, help="spec: capacity sweeps of the one engine start")
    p.add_argument("--label", default="experiment", help="spec: a name for the unit")
    p.add_argument("--noise-floor", metavar="JSON", help="spec: a noise floor (JSON) to judge against")
    p.add_argument("--cuda-visible-devices", metavar="IDS", help="spec: GPUs the engine may use")
    p.set_defaults(func=cmd_experiment)

    p = sub.add_parser("campaign", help="run a research campaign headless")
    p.add_argument("action", choices=["run"])
    p.add_argument("name", help="campaign name, or an endpoint name (runs its default campaign)")
    p.add_argument("--proposer", choices=["auto", "rules", "llm"], default=None)
    p.add_argument("--from-declared", action="store_true",
                   help="start a new campaign from the YAML engine configuration, not from the last one the "
                        "research memory confirmed")
    p.add_argument("--stop-after", type=float, metavar="MINUTES",
                   help="pause (exit 75) before an experiment that would not end within MINUTES; run again to resume")
    p.set_defaults(func=cmd_campaign)

    p = sub.add_parser("pools", help="Dagster concurrency pools: the GPU cap's limits from the YAML "
                                     "(show: compare with the instance, exit 1 if they differ; apply: set them)")
    p.add_argument("action", choices=["show", "apply"])
    p.set_defaults(func=cmd_pools)

    p = sub.add_parser("drafter", help="train a speculative-decoding draft model on an endpoint's own traffic "
                                       "(on-policy data, training, offline acceptance; recorded in memory), list "
                                       "them, or advise whether one would pay off (the proposer's rule)")
    p.add_argument("action", choices=["train", "list", "advise"])
    p.add_argument("endpoint")
    p.add_argument("--diagnosis", help="advise: a Diagnosis JSON file (the diagnosis asset's value)")
    p.add_argument("--examples", type=int, default=120, help="pool requests to ask the engine (train + held out)")
    p.add_argument("--heldout", type=int, default=20, help="the last N of them, for offline acceptance")
    p.add_argument("--max-tokens", type=int, help="reply length to ask for (default: each request's own)")
    p.add_argument("--layers", type=int, default=4, help="the target's first N layers form the draft")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    p.add_argument("--no-control", action="store_true", help="skip evaluating the untrained truncation")
    p.add_argument("--out", help="work folder (default: $AUTORESEARCH_HOME/drafters/ENDPOINT)")
    p.add_argument("--db", help="DuckDB file (default: $AUTORESEARCH_MEMORY_DB)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_drafter)

    p = sub.add_parser("memory", help="query or export the shared research memory")
    p.add_argument("action", choices=["query", "export", "ingest"])
    p.add_argument("sql", nargs="?", help="SQL for query; endpoint name for export")
    p.add_argument("--db", help="DuckDB file (default: $AUTORESEARCH_MEMORY_DB)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--csv", action="store_true")
    p.add_argument("--out", help="export: write markdown here")
    p.add_argument("--parquet", metavar="DIR", help="export: every sweep step (v_run_steps) as Parquet under DIR, "
                   "partitioned by endpoint (DIR/endpoint=NAME/steps.parquet)")
    p.set_defaults(func=cmd_memory)
    return parser


def _exit_on_sigterm(signum, frame):
    """SIGTERM unwinds like Ctrl-C, so engines started by this command are stopped, not orphaned."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return args.func(args)
    except DefinitionError as exc:
        print(f"invalid definitions ({len(exc.issues)} problem(s)):", file=sys.stderr)
        for issue in exc.issues:
            print(f"  {issue}", file=sys.stderr)
        return 1
    except (UsageError, LaunchRefused) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
