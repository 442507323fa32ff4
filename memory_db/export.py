"""Markdown pages per endpoint, rebuilt from the database alone.

Only stored data is used (no export time, no ordering left to chance), so exporting the same
database twice gives byte-identical pages: they can be committed, diffed and reviewed.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from memory_db.store import MemoryStore


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[tuple]) -> str:
    if not rows:
        return "_none_\n"
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _fetch(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[tuple]:
    return con.execute(sql, params).fetchall()


def endpoint_markdown(con: duckdb.DuckDBPyConnection, endpoint: str) -> str:
    """The page of one endpoint: summary, confirmed changes, campaigns, experiments, skips, findings, questions."""
    out = [f"# Research memory: endpoint `{endpoint}`\n\n"]
    info = _fetch(
        con,
        "SELECT model, model_revision, engine, engine_version, hardware, gpu_count, description "
        "FROM endpoints WHERE endpoint = ?",
        [endpoint],
    )
    if info:
        model, revision, engine, version, hardware, gpus, description = info[0]
        if description:
            out.append(f"{description}\n\n")
        out.append(
            f"- Model: `{model}` (revision `{revision}`)\n- Engine: {engine} {version}\n"
            f"- Hardware: {hardware}, {gpus} GPU(s)\n"
        )

    if not _fetch(con, "SELECT 1 FROM v_endpoint_summary WHERE endpoint = ?", [endpoint]):
        out.append("_No records for this endpoint yet._\n")
    out.append("\n## Summary\n\n")
    summary = _fetch(
        con,
        "SELECT campaigns, experiments, better, same, worse, invalid, skipped, confirmed, "
        "confirmed_gain_product, findings, open_questions FROM v_endpoint_summary "
        "WHERE endpoint = ?",
        [endpoint],
    )
    out.append(
        _table(
            [
                "campaigns",
                "experiments",
                "better",
                "same",
                "worse",
                "invalid",
                "skipped",
                "confirmed",
                "confirmed gain (x)",
                "findings",
                "open questions",
            ],
            summary,
        )
    )

    out.append("\n## Confirmed changes\n\n")
    out.append(
        _table(
            [
                "confirmed",
                "campaign",
                "technique",
                "change",
                "capacity ratio",
                "verdict MDE",
                "floor threshold (input)",
                "lossless",
                "experiment",
            ],
            _fetch(
                con,
                "SELECT c.confirmed_at, c.campaign_id, e.technique, e.change_signature, "
                "e.capacity_ratio, e.noise_threshold, e.lossless, e.experiment_id "
                "FROM confirmations c JOIN experiments e ON e.experiment_id = c.experiment_id "
                "WHERE c.endpoint = ? ORDER BY c.confirmed_at, c.experiment_id",
                [endpoint],
            ),
        )
    )

    out.append("\n## Campaigns\n\n")
    out.append(
        _table(
            [
                "campaign",
                "run",
                "status",
                "started",
                "finished",
                "baseline capacity",
                "best capacity",
                "total gain (x)",
                "verdicts' median MDE",
                "MDE min",
                "MDE max",
                "experiments",
                "confirmed",
                "skipped",
                "stop reason",
            ],
            _fetch(
                con,
                "SELECT h.campaign, h.campaign_id, h.status, h.started_at, h.finished_at, h.baseline_capacity, "
                "h.best_capacity, h.total_gain_ratio, m.median_mde, m.min_mde, m.max_mde, h.experiments, "
                "h.confirmed, h.skipped, h.stop_reason "
                "FROM v_campaign_history h LEFT JOIN v_campaign_mde m ON m.campaign_id = h.campaign_id "
                "WHERE h.endpoint = ? ORDER BY h.started_at, h.campaign_id",
                [endpoint],
            ),
        )
    )

    out.append("\n## Experiments\n\n")
    out.append(
        _table(
            [
                "created",
                "campaign",
                "bottleneck",
                "technique",
                "change",
                "verdict",
                "capacity ratio",
                "verdict MDE",
                "floor threshold (input)",
                "lossless",
                "confirmed",
                "evidence (Dagster runs)",
            ],
            _fetch(
                con,
                "SELECT created_at, campaign_id, bottleneck, technique, change_signature, verdict, "
                "capacity_ratio, CASE WHEN verdict IN ('better', 'same', 'worse') THEN mde END, noise_threshold, lossless, "
                "confirmed, dagster_run_ids "
                "FROM v_experiments WHERE endpoint = ? ORDER BY created_at, experiment_id",
                [endpoint],
            ),
        )
    )

    out.append("\n## Skipped candidates\n\n")
    out.append(
        _table(
            ["campaign", "technique", "change", "prior verdict", "reason"],
            _fetch(
                con,
                "SELECT campaign_id, technique, change_signature, prior_verdict, reason FROM skips "
                "WHERE endpoint = ? ORDER BY created_at, skip_id",
                [endpoint],
            ),
        )
    )

    out.append("\n## Findings and lessons\n\n")
    findings = _fetch(
        con,
        "SELECT kind, confidence, bottleneck, technique, text FROM findings WHERE endpoint = ? "
        "ORDER BY created_at, finding_id",
        [endpoint],
    )
    if findings:
        for kind, confidence, bottleneck, technique, text in findings:
            about = bottleneck + (f" / {technique}" if technique else "")
            out.append(f"- **{kind}** ({about}, {confidence} confidence): {text}\n")
    else:
        out.append("_none_\n")

    out.append("\n## Open questions\n\n")
    questions = _fetch(
        con,
        "SELECT question, bottleneck, rationale FROM open_questions "
        "WHERE endpoint = ? AND status = 'open' ORDER BY created_at, question_id",
        [endpoint],
    )
    if questions:
        for question, bottleneck, rationale in questions:
            extra = f" ({bottleneck})" if bottleneck else ""
            out.append(f"- {question}{extra}" + (f": {rationale}" if rationale else "") + "\n")
    else:
        out.append("_none_\n")
    return "".join(out)


def export_endpoint_markdown(store: MemoryStore, endpoint: str) -> str:
    """The markdown page of one endpoint, read through the store (pending records ingested first)."""
    with store.connect() as con:
        return endpoint_markdown(con, endpoint)


def endpoints(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [row[0] for row in con.execute("SELECT endpoint FROM v_endpoint_summary ORDER BY endpoint").fetchall()]


def export_markdown(store: MemoryStore, out_dir: str | Path, only: list[str] | None = None) -> list[Path]:
    """Write ``<out_dir>/<endpoint>.md`` for every endpoint (or those in ``only``); return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with store.connect() as con:
        names = only if only is not None else endpoints(con)
        for name in names:
            path = out / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.md"
            path.write_text(endpoint_markdown(con, name), encoding="utf-8")
            written.append(path)
    return written


def export_parquet(store: MemoryStore, out_dir: str | Path, view: str = "v_run_steps") -> list[Path]:
    """Write the per-step view as Parquet, hive-partitioned by endpoint (``<out_dir>/endpoint=<name>/``).

    Analysts read it without the database or this package:
    ``duckdb -c "SELECT * FROM read_parquet('DIR/**/*.parquet', hive_partitioning = true)"`` or
    ``polars.scan_parquet('DIR/**/*.parquet', hive_partitioning=True)``.
    """
    if not re.fullmatch(r"v_[a-z_]+", view):
        raise ValueError(f"not a view of the research memory: {view!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with store.connect() as con:
        frame = con.execute(f"SELECT * FROM {view} ORDER BY endpoint, run_id, step_index").pl()
    written: list[Path] = []
    for (name,), part in frame.partition_by("endpoint", as_dict=True, maintain_order=True).items():
        folder = out / f"endpoint={re.sub(r'[^A-Za-z0-9_.-]', '_', name)}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "steps.parquet"
        part.drop("endpoint").write_parquet(path)  # the folder name carries it (hive partitioning)
        written.append(path)
    return written
