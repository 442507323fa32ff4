"""The experiment unit's entry point: plain CLI, or a Dagster Pipes process when Dagster launched it.

``research.experiment`` does the work and knows nothing about its launcher. When this process was
started by Dagster Pipes (a local subprocess today, a remote GPU box tomorrow), progress and the
engine's log lines stream back as Pipes logs and the result is reported as the asset's
materialization, with the load curve and the verdict's inputs as metadata. Otherwise it is a
plain command that prints progress.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from research.experiment import ExperimentResult, ExperimentSpec, run_experiment

# uvicorn access lines ("POST /v1/completions HTTP/1.1" 200): one per request, nothing to read in them.
_ACCESS_LINE = re.compile(r'"(GET|POST|PUT|DELETE) [^"]* HTTP/[\d.]+" \d{3}')
LOG_TAIL_LINES = 60


def unit_command(spec_file, out_dir) -> list[str]:
    """The unit's entry point as a launcher runs it (an invalid verdict is data, not a failed step)."""
    return [
        sys.executable,
        "-m",
        "autoresearch",
        "experiment",
        "run",
        str(spec_file),
        "--out",
        str(out_dir),
        "--invalid-ok",
    ]


def keep_engine_line(line: str) -> bool:
    return not _ACCESS_LINE.search(line)


def _typed(value, kind: str) -> dict:
    return {"raw_value": value, "type": kind if value is not None else "null"}


def _table(rows: list[dict]) -> dict:
    """Dagster table metadata (records + column schema) from a list of flat dicts."""
    if not rows:
        return _typed(None, "null")
    names = list(rows[0])
    kinds = {bool: "bool", int: "int", float: "float"}

    def column_type(name: str) -> str:
        seen = {kinds.get(type(r.get(name)), "string") for r in rows if r.get(name) is not None}
        if len(seen) == 1:
            return seen.pop()
        return "float" if seen == {"int", "float"} else "string"  # mixed numbers, or nothing to go by

    types = {n: column_type(n) for n in names}
    records = [
        {n: (r.get(n) if types[n] != "string" or r.get(n) is None else str(r.get(n))) for n in names} for r in rows
    ]
    return _typed({"records": records, "schema": [{"name": n, "type": types[n]} for n in names]}, "table")


def unit_metadata(result: ExperimentResult, out_dir: Path) -> dict:
    """The materialization metadata of one unit (Pipes raw form: ``{name: {raw_value, type}}``)."""
    from loadgen.report import step_table, step_table_markdown

    c = result.candidate
    capacities = c.capacities
    comparison = c.comparison
    repeats = [
        {
            "repeat": i + 1,
            "capacity_rps": s.capacity_rps,
            "capacity_method": s.capacity_method,
            "knee_rps": s.knee_rate,
            "steps": len(s.steps),
            "validity": s.validity,
            "invalid_reason": s.invalid_reason,
            "wall_s": round(c.sweep_wall_s[i], 1) if i < len(c.sweep_wall_s) else None,
        }
        for i, s in enumerate(c.sweeps)
    ]
    keep = (
        "rate",
        "achieved",
        "throughput",
        "ttft_p50_ms",
        "ttft_p95_ms",
        "itl_p95_ms",
        "e2e_p95_ms",
        "error_rate",
        "send_lag_p99_ms",
        "within_sla",
        "validity",
        "note",
    )
    steps = [{"repeat": i + 1, **{k: row[k] for k in keep}} for i, s in enumerate(c.sweeps) for row in step_table(s)]
    log_tail = _log_tail(out_dir, result) or c.log_tail or ""
    inputs = {
        "verdict": c.verdict,
        "confirmed": c.confirmed,
        "invalid_reason": c.invalid_reason,
        "capacities": capacities,
        "baseline_capacities": comparison.baseline_capacities if comparison else None,
        "baseline_capacity": comparison.baseline_capacity if comparison else None,
        "threshold": comparison.threshold if comparison else None,
        "correctness": (c.correctness.reason if c.correctness else None),
    }
    return {
        "verdict": _typed(c.verdict, "text"),
        "confirmed": _typed(c.confirmed, "bool"),
        "invalid_reason": _typed(c.invalid_reason, "text"),
        "capacity_rps": _typed(sum(capacities) / len(capacities) if capacities else None, "float"),
        "capacities_rps": _typed(capacities, "json"),
        "capacity_per_repeat": _table(repeats),
        "verdict_inputs": _typed(inputs, "json"),
        "evidence": _typed(comparison.evidence if comparison else None, "text"),
        "steps": _table(steps),
        "load_curve": _typed(
            "\n\n".join(f"**repeat {i + 1}**\n\n{step_table_markdown(s)}" for i, s in enumerate(c.sweeps))
            or "_(no sweep ran)_",
            "md",
        ),
        "engine_args": _typed(" ".join(c.engine_args), "text"),
        "startup_s": _typed(c.startup_s, "float"),
        "wall_s": _typed(result.wall_s, "float"),
        "host": _typed(result.host, "text"),
        "cuda_visible_devices": _typed(result.cuda_visible_devices, "text"),
        "engine_log_tail": _typed(f"```\n{log_tail}\n```" if log_tail else "_(no engine log)_", "md"),
        "result_path": _typed(str(Path(out_dir).resolve() / "result.json"), "path"),
    }


def _log_tail(out_dir: Path, result: ExperimentResult) -> str | None:
    if not result.engine_log:
        return None
    path = Path(out_dir) / result.engine_log
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if keep_engine_line(line)]
    except OSError:
        return None
    return "\n".join(lines[-LOG_TAIL_LINES:])


def in_pipes() -> bool:
    """Launched by Dagster Pipes (its context in the environment, as every Pipes client passes it)?"""
    from dagster_pipes import PipesEnvVarParamsLoader

    return PipesEnvVarParamsLoader().is_dagster_pipes_process()


def run_unit(spec_path: Path, out_dir: Path) -> ExperimentResult:
    """Run the unit in ``spec_path``; under Dagster Pipes, stream logs and report the materialization."""
    spec = ExperimentSpec.read(spec_path)
    if not in_pipes():
        return run_experiment(
            spec, out_dir, progress=lambda line: print(line, file=sys.stderr, flush=True), purpose="unit"
        )

    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:

        def progress(line: str) -> None:
            print(line, file=sys.stderr, flush=True)
            pipes.log.info(line)

        result = run_experiment(
            spec,
            out_dir,
            progress=progress,
            keep_log_line=keep_engine_line,
            engine_log_sink=lambda line: pipes.log.info(f"[engine] {line}"),
            purpose="unit",  # the harness runs the engine in engines.run_engine: a crash is an invalid verdict
        )
        pipes.report_asset_materialization(metadata=unit_metadata(result, out_dir))
    return result
