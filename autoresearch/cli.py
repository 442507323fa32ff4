"""``autoresearch``: headless use of the same code the Dagster assets call.

Every subcommand is a thin wrapper: parse arguments, call a plain module, print a table
(or JSON). Bad input (a file, a field, a flag, a URL) prints one ``error: WHAT (WHERE)`` line and a
``hint:`` line on what to do, and exits 2; tracebacks are for bugs only (``--debug`` shows them).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
from pathlib import Path

from specs import paths
from specs.config import DefinitionError, DefinitionSet
from autoresearch.cli_errors import (
    BUSY_HINT,
    COMMAND_CONTEXT,
    UsageError,
    busy_message,
    describe_error,
    field_location,
    pydantic_summary,
)
from autoresearch.cli_preflight import managed, preflight


def load_definitions(root: Path) -> DefinitionSet:
    """The defs folder, read through the Dagster components (imported here, not at the top: the
    experiment unit's entry point, ``experiment run``, reads only its spec.json and runs where Dagster
    is not installed, on a GPU machine or in a Modal container)."""
    from dagster_project.lib import load_definitions as load

    return load(root)


def _definitions(args) -> DefinitionSet:
    definitions = load_definitions(Path(args.definitions) if args.definitions else paths.definitions_dir())
    COMMAND_CONTEXT["definitions"] = definitions
    return definitions


def _definitions_dir(args) -> Path | None:
    return Path(args.definitions) if args.definitions else None


def _endpoint(args, name: str):
    try:
        spec = _definitions(args).endpoint(name)
    except KeyError as exc:
        raise UsageError(
            exc.args[0],
            hint="declare it in a defs.yaml (`autoresearch validate` lists the declared ones), or pick one of those",
        ) from None
    COMMAND_CONTEXT["endpoint"] = name
    return spec


# --- validate -------------------------------------------------------------------------------


def cmd_validate(args) -> int:
    target = Path(args.path or args.definitions or paths.definitions_dir())
    if not target.exists():
        raise UsageError(
            f"{target} does not exist",
            hint="pass a defs folder (e.g. definitions) or set AUTORESEARCH_DEFINITIONS",
        )
    definitions = load_definitions(target)
    print(
        f"{target}: {len(definitions.endpoints)} endpoint(s), {len(definitions.campaigns)} campaign(s), "
        f"{len(definitions.recipes)} recipe(s) - all valid"
    )
    for name, spec in sorted(definitions.endpoints.items()):
        print(
            f"  endpoint {name:<24} engine={spec.engine.kind:<12} launcher={spec.launcher.kind:<6} "
            f"model={spec.model.path}"
        )
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
        preflight(spec, args.set, args.unset, pool=False)
        if not managed(spec) and spec.launcher.kind == "local":  # answers (checked): nothing to start
            print(f"{spec.name}: external server at {spec.engine.url} answers; it runs elsewhere, nothing to start")
            return 0
        try:
            state = lifecycle.up(spec)
        except EngineError as exc:
            raise UsageError(
                f"{spec.name}: engine did not come up: {exc}",
                where=field_location("engine"),
                hint="the engine log (tail above) says why; fix the endpoint's engine block or the --set overrides",
            ) from None
        if args.json:
            print(json.dumps(state, indent=2))
        else:
            print(f"{spec.name}: healthy at {state['base_url']} (pid {state['pid']}, model {state['served_model']})")
            print(f"  log: {state['log_path']}")
    elif args.action == "down":
        stopped = lifecycle.down(spec)
        print(
            json.dumps({"endpoint": spec.name, "stopped": stopped})
            if args.json
            else f"{spec.name}: {'stopped' if stopped else 'was not running'}"
        )
    else:
        status = lifecycle.status(spec)
        print(json.dumps(status, indent=2) if args.json else _format_status(status))
        return 0 if status.get("healthy") else 3
    return 0


def _format_status(status: dict) -> str:
    lines = [f"{status['endpoint']}: {'healthy' if status.get('healthy') else status.get('state', 'down')}"]
    for key in (
        "base_url",
        "pid",
        "served_model",
        "engine_version",
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "log_path",
    ):
        if status.get(key) is not None:
            lines.append(f"  {key:<18} {status[key]}")
    return "\n".join(lines)


# --- replay ---------------------------------------------------------------------------------


def cmd_replay(args) -> int:
    from autoresearch.workflows import build_replay_pool

    spec = _endpoint(args, args.endpoint)
    preflight(spec, engine=None)
    build = build_replay_pool(spec)
    print(build.table())
    return 0 if build.fidelity.passed else 4


# --- sweep ----------------------------------------------------------------------------------


def _apply_sets(spec, sets: list[str] | None, unsets: list[str] | None = None):
    """``--set engine.ARG=VALUE`` (empty VALUE = a bare switch) and ``--unset engine.ARG`` on the endpoint."""
    from specs.engine_args import OverrideError, apply_overrides

    try:
        return apply_overrides(spec, sets, unsets)
    except OverrideError as exc:
        raise UsageError(str(exc)) from None


def cmd_sweep(args) -> int:
    from autoresearch.workflows import sweep_endpoint
    from loadgen.report import render_text

    from loadgen.users import render_users

    spec = _apply_sets(_endpoint(args, args.endpoint), args.set, args.unset)
    users = _user_counts(args.users) if args.users else None
    preflight(spec, args.set, args.unset)
    results = sweep_endpoint(spec, progress=not args.json, users=users, rates=users is None)
    for result in results:
        print(
            result.model_dump_json(indent=2)
            if args.json
            else render_users(result)
            if result.mode == "users"
            else render_text(result)
        )
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
        print(
            f"client sustains {result.max_rate:g} req/s on schedule with {args.senders} sender(s) "
            "against the null endpoint (saved; sweeps beyond it are refused)"
        )
    return 0


# --- experiment unit ------------------------------------------------------------------------


def cmd_experiment(args) -> int:
    if args.action == "spec":
        return _experiment_spec(args)
    from autoresearch.experiment_unit import run_unit
    from research.experiment import ExperimentSpec

    spec_path = Path(args.target)
    if not spec_path.is_file():
        raise UsageError(
            f"{spec_path}: no such spec file (write one with `autoresearch experiment spec ENDPOINT --out DIR`)"
        )
    try:
        ExperimentSpec.read(spec_path)
    except ValueError as exc:  # pydantic's ValidationError, or JSON that is not a spec
        raise UsageError(f"{spec_path}: not an experiment spec: {exc}") from None
    out = Path(args.out) if args.out else spec_path.parent
    result = run_unit(spec_path, out)
    capacities = ", ".join(f"{c:.3g}" for c in result.capacities) or "none"
    print(
        f"experiment {result.label} on {result.endpoint}: verdict {result.verdict}; capacity per repeat {capacities} "
        f"req/s; result in {out / 'result.json'}"
    )
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
    noise = None
    if args.noise_floor:
        try:
            noise = NoiseFloor.model_validate_json(Path(args.noise_floor).read_text())
        except OSError as exc:
            raise UsageError(
                f"{args.noise_floor}: {exc.strerror or exc}",
                where="--noise-floor",
                hint="pass a readable NoiseFloor JSON file, e.g. the noise_floor asset's value.json",
            ) from None
        except ValueError as exc:  # pydantic's ValidationError (a bad field, or not JSON)
            raise UsageError(
                f"{args.noise_floor}: not a noise floor: {pydantic_summary(exc)}",
                where="--noise-floor",
                hint="pass the JSON of a NoiseFloor, e.g. the noise_floor asset's value.json",
            ) from None
    preflight(spec, args.set, args.unset, engine="later")
    path = write_experiment(
        spec,
        Path(args.out),
        repeats=args.repeats,
        label=args.label,
        noise=noise,
        cuda_visible_devices=args.cuda_visible_devices,
    )
    print(f"wrote {path} and {path.parent / 'pool.parquet'}; run it with `autoresearch experiment run {path}`")
    return 0


# --- campaign -------------------------------------------------------------------------------


def cmd_campaign(args) -> int:
    from autoresearch.workflows import check_campaign_launch, resolve_campaign
    from dagster_project.headless import CampaignAlreadyRunning, run_campaign_job

    if args.action == "list":
        return _campaign_list(args)
    if not args.name:
        raise UsageError("campaign run needs a campaign or endpoint name", hint="`autoresearch validate` lists them")

    try:
        campaign, endpoint = resolve_campaign(_definitions(args), args.name)
    except KeyError as exc:
        raise UsageError(
            exc.args[0], hint="name a declared campaign or endpoint (`autoresearch validate` lists them)"
        ) from None
    COMMAND_CONTEXT["endpoint"] = endpoint.name
    check_campaign_launch(endpoint)  # a remote launcher's own checks (credentials first), before any Dagster run
    preflight(endpoint)  # before the pool, the memory or any engine: the campaign runs its engines here
    stop_after = args.stop_after * 60 if args.stop_after else None
    try:  # a run of the endpoint's campaign job on the instance the UI serves (dagster_project.headless)
        outcome = run_campaign_job(
            campaign,
            endpoint,
            proposer=args.proposer,
            from_declared=args.from_declared,
            stop_after_s=stop_after,
            definitions_dir=_definitions_dir(args),
        )
    except CampaignAlreadyRunning as exc:
        raise UsageError(str(exc), hint="`autoresearch campaign list` shows campaigns; the UI shows the run") from None
    print(format_outcome(outcome))
    return campaign_exit(outcome)


def campaign_exit(outcome) -> int:
    """The exit code of a campaign's outcome, with its one-line error: 74 when a research-memory or review
    write (or a read its floor needs) failed (its state is kept: run again to resume), 75 when paused, 4 without a
    valid baseline, 3 when no experiment reached a verdict, else 0."""
    if outcome.unrecorded:
        print(
            f"error: campaign {outcome.campaign} stopped: {outcome.unrecorded}; its state is kept in "
            f"{outcome.state_path}: fix that, then run `autoresearch campaign run {outcome.campaign}` again to "
            "resume (what was not recorded is recorded first)",
            file=sys.stderr,
        )
        return 74  # EX_IOERR: nothing measured is lost, but it is not recorded yet
    if not outcome.finished:
        print(f"campaign {outcome.campaign} {outcome.end_reason}", file=sys.stderr)
        return 75  # EX_TEMPFAIL: not done, run again to resume
    if outcome.failure:
        print(f"campaign {outcome.campaign} failed: {outcome.failure}", file=sys.stderr)
        return 4 if outcome.reference_capacity is None else 3
    return 0


def _campaign_list(args) -> int:
    """Every campaign the research memory knows, however it was started (CLI, UI, sensor), newest first."""
    store = _memory_store(args)
    where, params = ("where endpoint = ? or campaign = ?", [args.name, args.name]) if args.name else ("", [])
    rows = store.query(
        f"select campaign_id, endpoint, status, stop_reason, started_at, "
        f"coalesce(judged_gain, total_gain_ratio) as gain, dagster_run_ids from campaigns {where} "
        f"order by started_at desc",
        params,
    ).to_dicts()
    if not rows:
        print("no campaign recorded" + (f" for {args.name}" if args.name else ""))
        return 0
    print(f"{'campaign id':<44} {'endpoint':<20} {'status':<9} {'gain':>6} {'runs':>4}  started / why it stopped")
    for r in rows:
        gain = f"x{r['gain']:.2f}" if r["gain"] else "-"  # judged where it can be, else by rung
        when = r["started_at"].strftime("%Y-%m-%d %H:%M") if r["started_at"] else "?"
        print(
            f"{r['campaign_id']:<44} {r['endpoint']:<20} {r['status']:<9} {gain:>6} {len(r['dagster_run_ids'] or []):>4}"
            f"  {when}" + (f" / {r['stop_reason']}" if r["stop_reason"] else "")
        )
    return 0


def _rate(capacity: float | None) -> str:
    return "unmeasured" if capacity is None else f"{capacity:.3g} req/s"


def format_outcome(outcome) -> str:
    from research.verdict_mde import console_line

    gain = (
        f"{'>=' if outcome.total_gain_is_lower_bound else ''}{outcome.total_gain:.2f}x"
        if outcome.total_gain
        else "none"
    )
    lines = [
        f"campaign {outcome.campaign} on {outcome.endpoint}: "
        f"{'FAILED' if outcome.failure else 'finished' if outcome.finished else 'paused'}"
        f" ({outcome.end_reason})",
        f"  reference capacity  {_rate(outcome.reference_capacity)} with {' '.join(outcome.reference_args)}",
        f"  best capacity       {_rate(outcome.best_capacity)} with {' '.join(outcome.best_args)}",
        "  total gain          "
        + (f"{outcome.judged_gain.describe()}; capacity ratio {gain}" if outcome.judged_gain else gain),
        *(
            [f"  detectable effect   {console_line(outcome.verdict_mde)} (the verdicts' MDEs)"]
            if outcome.verdict_mde
            else []
        ),
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


def _memory_store(args):
    """The research memory, opened (schema checked) here so a file that is not one, or one another process
    holds, is an error naming the file; SQL errors come later, from the query."""
    import duckdb

    from memory_db.locking import MemoryBusyError
    from memory_db.store import MemoryStore

    path = Path(args.db) if args.db else paths.memory_db_path()
    where = (
        "--db"
        if args.db
        else (
            "AUTORESEARCH_MEMORY_DB"
            if os.environ.get("AUTORESEARCH_MEMORY_DB")
            else "the memory under AUTORESEARCH_HOME"
        )
    )
    if path.is_dir():
        raise UsageError(
            f"research memory {path} is a folder, not a DuckDB file",
            where=where,
            hint="point --db (or AUTORESEARCH_MEMORY_DB) at a .duckdb file; it is created when missing",
        )
    import logging

    quiet = logging.getLogger("memory_db.store")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "busy, schema checked later": the query below says it as an error if it stays so
    try:
        return MemoryStore(path, timeout_s=args.wait)
    except MemoryBusyError as exc:
        raise UsageError(busy_message(exc), where=where, hint=BUSY_HINT) from None
    except duckdb.Error as exc:
        from memory_db.store import last_good_path

        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        backup = last_good_path(path)
        hint = (
            "it is not a DuckDB database of this DuckDB version: move it aside (a new memory is "
            "created) or point --db (or AUTORESEARCH_MEMORY_DB) at the research memory"
        )
        if backup.is_file():
            import datetime

            when = datetime.datetime.fromtimestamp(backup.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")
            hint = (
                f"its last good copy is {backup} (written {when}, after the last successful write): move the "
                f"damaged file aside and copy that one to {path.name}"
            )
        raise UsageError(
            f"research memory {path} is not a DuckDB database"
            if "not a valid DuckDB" in first
            else f"research memory {path} cannot be opened: {first}",
            where=where,
            hint=hint,
        ) from None
    finally:
        quiet.setLevel(level)


def cmd_memory(args) -> int:
    from memory_db import queries

    store = _memory_store(args)
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
        import duckdb

        try:
            frame = store.query(args.sql)
        except duckdb.Error as exc:
            raise UsageError(
                f"SQL: {str(exc).splitlines()[0]}",
                where=f"research memory {store.path}",
                hint='the tables and views are listed by `autoresearch memory query "SHOW TABLES"` '
                "(docs/memory.md describes them)",
            ) from None
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
    store = _memory_store(args)
    if args.action == "list":
        rows = store.drafters(args.endpoint)
        if not rows:
            print(f"no drafter recorded for {args.endpoint}")
        for r in rows:
            acc = r.acceptance_offline.get("acceptance_length")
            served = r.acceptance_served.get("acceptance_length")
            print(
                f"{r.drafter_id}  {r.status:<5}  L{r.layers} k={r.num_speculative_tokens} steps={r.steps} "
                f"data={r.train_examples} ex/{r.train_tokens} tok  offline accept len "
                f"{acc if acc is None else f'{acc:.2f}'}  served {served if served is None else f'{served:.2f}'}  "
                f"verdict {r.verdict or '-'}  {r.path}" + (f"  ({r.stale_reason})" if r.stale_reason else "")
            )
        return 0
    if args.action == "advise":
        return _drafter_advise(args)
    from autoresearch.workflows import load_pool
    from research.drafter import DrafterError, describe, draft_model_diff, train_for_endpoint

    spec = _endpoint(args, args.endpoint)
    preflight(spec)
    workdir = Path(args.out) if args.out else paths.home() / "drafters" / spec.name
    try:
        rec = train_for_endpoint(
            spec,
            load_pool(spec),
            workdir,
            examples=args.examples,
            heldout=args.heldout,
            max_tokens=args.max_tokens,
            layers=args.layers,
            steps=args.steps,
            lr=args.lr,
            k=args.k,
            baseline=not args.no_control,
        )
    except DrafterError as exc:
        raise UsageError(str(exc)) from None
    store.record_drafter(rec)
    off = rec.acceptance_offline
    print(
        json.dumps(rec.model_dump(mode="json"), indent=1)
        if args.json
        else f"drafter {rec.drafter_id}: {rec.train_examples} examples ({rec.train_tokens} reply tokens), {rec.steps} steps "
        f"in {rec.train_s:.0f} s\n  offline acceptance length {off['acceptance_length']:.2f} "
        f"(per position {', '.join(f'{p:.2f}' for p in off['accepted_per_position'])}) on {rec.heldout_examples} "
        f"held-out replies\n  candidate: "
        f"{describe(draft_model_diff(spec.engine.kind, Path(rec.path), rec.num_speculative_tokens))}\n"
        f"  judge it: materialize {spec.name}/drafter_verdict, or let a campaign propose it"
    )
    return 0


def _drafter_advise(args) -> int:
    """The proposer's drafter rule on a saved diagnosis: train one, or why not (exit 0 either way)."""
    from specs.models import ensure_model
    from research.drafter import draft_cost_ratio
    from research.proposals import Diagnosis
    from research.rules import drafter_training

    if not args.diagnosis:
        raise UsageError(
            "drafter advise needs --diagnosis FILE (a Diagnosis as JSON, e.g. the diagnosis asset's "
            "$AUTORESEARCH_HOME/assets/<endpoint>/diagnosis/value.json)"
        )
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

    from assets.pools import apply_limits, pool_limits

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
            rows = [
                (pool, storage.get_concurrency_info(pool).slot_count if pool in keys else None, limit)
                for pool, limit in limits.items()
            ]
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
    parser.add_argument(
        "--definitions",
        help="defs folder of defs.yaml files (default: definitions or $AUTORESEARCH_DEFINITIONS)",
    )
    parser.add_argument("--debug", action="store_true", help="on an error, print the Python traceback too")
    # --debug is accepted after the subcommand as well (SUPPRESS: it does not reset the global one)
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser = functools.partial(sub.add_parser, parents=[debug])

    p = sub.add_parser("validate", help="validate YAML definitions (exit 1 with file:line errors)")
    p.add_argument("path", nargs="?")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("migrate", help="turn old-layout YAML (definitions/*.yaml) into defs.yaml files")
    p.add_argument("old", help="folder of old-layout YAML files")
    p.add_argument("new", help="defs folder to write (e.g. definitions)")
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
    p.add_argument(
        "--set",
        action="append",
        metavar="engine.ARG=VALUE",
        help="override an engine argument (empty VALUE: a bare switch)",
    )
    p.add_argument("--unset", action="append", metavar="engine.ARG", help="drop an engine argument")
    p.add_argument(
        "--users",
        metavar="N,N,...",
        help="concurrency mode instead of the rate sweep: hold these numbers of closed-loop users "
        "(e.g. 1,2,4,8) and report the highest within the SLA (sweep.users in the YAML adds it "
        "after the rate sweep)",
    )
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
    p.add_argument(
        "--out",
        help="run: folder for result.json and engine.log (default: the spec's folder); "
        "spec: folder for spec.json and pool.parquet",
    )
    p.add_argument(
        "--invalid-ok",
        action="store_true",
        help="run: exit 0 on an invalid verdict (the launcher reads the verdict from the result)",
    )
    p.add_argument("--set", action="append", metavar="engine.ARG=VALUE", help="spec: override an engine argument")
    p.add_argument("--unset", action="append", metavar="engine.ARG", help="spec: drop an engine argument")
    p.add_argument("--repeats", type=int, default=1, help="spec: capacity sweeps of the one engine start")
    p.add_argument("--label", default="experiment", help="spec: a name for the unit")
    p.add_argument("--noise-floor", metavar="JSON", help="spec: a noise floor (JSON) to judge against")
    p.add_argument("--cuda-visible-devices", metavar="IDS", help="spec: GPUs the engine may use")
    p.set_defaults(func=cmd_experiment)

    p = sub.add_parser(
        "campaign",
        help="run a research campaign (a run on the Dagster instance the UI serves), "
        "or list the campaigns the research memory knows",
    )
    p.add_argument("action", choices=["run", "list"])
    p.add_argument(
        "name",
        nargs="?",
        help="campaign name, or an endpoint name (runs its default campaign); list: only this endpoint's or campaign's",
    )
    p.add_argument(
        "--db", help="list: the research memory (default: AUTORESEARCH_MEMORY_DB or the one under AUTORESEARCH_HOME)"
    )
    p.add_argument("--wait", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument("--proposer", choices=["auto", "rules", "llm"], default=None)
    p.add_argument(
        "--from-declared",
        action="store_true",
        help="start a new campaign from the YAML engine configuration, not from the last one the "
        "research memory confirmed",
    )
    p.add_argument(
        "--stop-after",
        type=float,
        metavar="MINUTES",
        help="pause (exit 75) before an experiment that would not end within MINUTES; run again to resume",
    )
    p.set_defaults(func=cmd_campaign)

    p = sub.add_parser(
        "pools",
        help="Dagster concurrency pools: the GPU cap's limits from the YAML "
        "(show: compare with the instance, exit 1 if they differ; apply: set them)",
    )
    p.add_argument("action", choices=["show", "apply"])
    p.set_defaults(func=cmd_pools)

    p = sub.add_parser(
        "drafter",
        help="train a speculative-decoding draft model on an endpoint's own traffic "
        "(on-policy data, training, offline acceptance; recorded in memory), list "
        "them, or advise whether one would pay off (the proposer's rule)",
    )
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
    p.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for a research memory another process holds (default 30)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_drafter)

    p = sub.add_parser("memory", help="query or export the shared research memory")
    p.add_argument("action", choices=["query", "export", "ingest"])
    p.add_argument("sql", nargs="?", help="SQL for query; endpoint name for export")
    p.add_argument("--db", help="DuckDB file (default: $AUTORESEARCH_MEMORY_DB)")
    p.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for a research memory another process holds (default 30)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--csv", action="store_true")
    p.add_argument("--out", help="export: write markdown here")
    p.add_argument(
        "--parquet",
        metavar="DIR",
        help="export: every sweep step (v_run_steps) as Parquet under DIR, "
        "partitioned by endpoint (DIR/endpoint=NAME/steps.parquet)",
    )
    p.set_defaults(func=cmd_memory)

    from autoresearch.cli_compare import add_parser as add_compare  # an A/B of two configurations (its own module)

    add_compare(sub)
    return parser


def _exit_on_sigterm(signum, frame):
    """SIGTERM unwinds like Ctrl-C, so engines started by this command are stopped, not orphaned."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    COMMAND_CONTEXT.clear()
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except DefinitionError as exc:  # exit 1, as `dg check defs`: one file:line line per problem
        _traceback(args)
        for issue in exc.issues:
            print(f"error: {issue}", file=sys.stderr)
        if len(exc.issues) == 1 and exc.issues[0].message.startswith("not a folder"):
            print(
                "hint: point --definitions (or AUTORESEARCH_DEFINITIONS) at a folder of defs.yaml files, e.g. "
                "definitions",
                file=sys.stderr,
            )
        else:
            print(
                f"hint: fix the definitions above ({len(exc.issues)} problem(s)); `autoresearch validate` checks "
                "them again",
                file=sys.stderr,
            )
        return 1
    except Exception as exc:  # noqa: BLE001 - the one place errors become messages
        _traceback(args)
        message, where, hint, code = describe_error(exc)
        lines = message.strip().splitlines() or [type(exc).__name__]
        print(f"error: {lines[0]}" + (f" ({where})" if where else ""), file=sys.stderr)
        for line in lines[1:]:  # detail a message carries (an engine's log tail)
            print(f"  {line}", file=sys.stderr)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return code


def _traceback(args) -> None:
    if getattr(args, "debug", False):
        import traceback

        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
