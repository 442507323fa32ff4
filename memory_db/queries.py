"""Queries the research loop asks of the memory. Each takes an open (read-only) DuckDB connection.

"Same conditions" means equal model, model revision, hardware, GPU count, engine, engine version
and workload signature (the seven columns of :class:`memory_db.records.Conditions`), whatever the
endpoint; a prior result from the same endpoint is preferred when several match.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import duckdb
import polars as pl
from pydantic import BaseModel

from memory_db.formatting import render as format_frame  # noqa: F401 - the CLI formats query output with it
from memory_db.records import (
    DECIDED_VERDICTS,
    AAEvidenceRecord,
    Conditions,
    ExperimentRecord,
    FindingRecord,
    OpenQuestion,
    SkipRecord,
    change_signature,
)

_CONDITION_SQL = " AND ".join(f"{name} = ?" for name in Conditions.model_fields)


class PriorResult(BaseModel):
    """The latest decided experiment with the same change under the same conditions."""

    experiment_id: str
    endpoint: str
    campaign_id: str
    technique: str
    change_signature: str
    verdict: str
    capacity_ratio: float | None
    noise_threshold: float | None
    confirmed: bool
    created_at: datetime
    same_endpoint: bool
    matching_experiments: int  # all decided experiments that match, this one included
    verdict_counts: dict[str, int]
    should_skip: bool  # True for every decided verdict (see prior_decision)
    reason: str


class ConfirmedImprovement(BaseModel):
    """A change adopted into an endpoint's working baseline."""

    experiment_id: str
    campaign_id: str
    technique: str
    bottleneck: str
    change: dict[str, str | None]
    change_signature: str
    capacity_ratio: float | None
    noise_threshold: float | None
    lossless: bool
    engine_args: list[str]  # the full working configuration after adopting it
    new_config_hash: str | None
    confirmed_at: datetime


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cursor = con.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, values)) for values in cursor.fetchall()]


def _ratio_text(ratio: float | None, noise: float | None) -> str:
    if ratio is None:
        return "no capacity ratio"
    text = f"capacity ratio {ratio:.3f}"
    return text + (f", noise threshold ±{noise:.1%}" if noise is not None else "")


#: A noise floor wider than this cannot rule out a gain worth having: its 'same' decides nothing. 10%, the
#: harness's target: most published serving wins are 5-20%, and a 'same' whose floor could not see a 10% gain
#: (the main job's second campaign skipped chunked prefill on a +-14% 'same', 2026-12-05) leaves them open.
MAX_RESOLVING_THRESHOLD = 0.10


def conclusive(verdict: str, capacity_ratio: float | None, noise_threshold: float | None) -> bool:
    """Whether a decided verdict settles the question. 'better' and 'worse' do; 'same' only when the
    noise floor could have resolved a worthwhile gain (threshold <= 10 %) and the candidate's mean
    stayed inside it. A 'same' at +50 % under a +-61 % threshold is an open question, not a dead end."""
    if verdict != "same":
        return True
    if noise_threshold is None or noise_threshold > MAX_RESOLVING_THRESHOLD:
        return False
    return capacity_ratio is None or capacity_ratio - 1 <= noise_threshold


def prior_decision(
    con: duckdb.DuckDBPyConnection,
    endpoint: str,
    change: str | dict[str, str | None],
    conditions: Conditions,
    *,
    same_endpoint_only: bool = False,
) -> PriorResult | None:
    """Has this exact change already been decided (better/same/worse) under the same conditions?

    Returns the most relevant prior (same endpoint first, then newest) or None. Every decided
    verdict means "already decided": a neutral or negative one would repeat, a confirmed better one
    is already in the working baseline, an unconfirmed better one lost its confirmation (ablation or
    correctness) under these very conditions. ``should_skip`` is therefore True; a loop that wants to
    re-test unconfirmed gains checks ``verdict == "better" and not confirmed``. An 'invalid' run
    decided nothing and is never returned, so the candidate runs again; neither is an inconclusive
    'same' (see :func:`conclusive`).
    """
    signature = change if isinstance(change, str) else change_signature(change)
    where = f"change_signature = ? AND {_CONDITION_SQL} AND verdict IN ({', '.join('?' for _ in DECIDED_VERDICTS)})"
    params: list[Any] = [signature, *conditions.model_dump().values(), *DECIDED_VERDICTS]
    if same_endpoint_only:
        where += " AND endpoint = ?"
        params.append(endpoint)
    rows = _rows(
        con,
        f"SELECT experiment_id, endpoint, campaign_id, technique, verdict, capacity_ratio, "
        f"noise_threshold, confirmed, created_at FROM v_experiments WHERE {where} "
        f"ORDER BY endpoint = ? DESC, created_at DESC, experiment_id",
        [*params, endpoint],
    )
    rows = [row for row in rows if conclusive(row["verdict"], row["capacity_ratio"], row["noise_threshold"])]
    if not rows:
        return None
    top = rows[0]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    skip = top["verdict"] in DECIDED_VERDICTS
    where_text = "on this endpoint" if top["endpoint"] == endpoint else f"on endpoint {top['endpoint']}"
    outcome = {
        "same": "made no difference beyond the noise floor",
        "worse": "made it worse",
        "better": "made it better",
    }[top["verdict"]]
    reason = (
        f"the same change {signature} {outcome} ({_ratio_text(top['capacity_ratio'], top['noise_threshold'])}) "
        f"{where_text} in campaign {top['campaign_id']}, experiment {top['experiment_id']}, under the same "
        f"model, hardware, GPU count, engine version and workload"
    )
    if top["verdict"] == "better":
        reason += (
            "; it was adopted into the working baseline"
            if top["confirmed"]
            else "; it was not adopted (lost in ablation or correctness review)"
        )
    if len(rows) > 1:
        reason += f" (matching decided experiments: {', '.join(f'{v} {n}' for v, n in sorted(counts.items()))})"
    return PriorResult(
        experiment_id=top["experiment_id"],
        endpoint=top["endpoint"],
        campaign_id=top["campaign_id"],
        technique=top["technique"],
        change_signature=signature,
        verdict=top["verdict"],
        capacity_ratio=top["capacity_ratio"],
        noise_threshold=top["noise_threshold"],
        confirmed=bool(top["confirmed"]),
        created_at=top["created_at"],
        same_endpoint=top["endpoint"] == endpoint,
        matching_experiments=len(rows),
        verdict_counts=counts,
        should_skip=skip,
        reason=reason,
    )


def confirmed_improvements(con: duckdb.DuckDBPyConnection, endpoint: str) -> list[ConfirmedImprovement]:
    """Changes adopted on this endpoint, oldest first (where a new campaign starts from)."""
    rows = _rows(
        con,
        "SELECT e.experiment_id, c.campaign_id, e.technique, e.bottleneck, e.change, e.change_signature, "
        "e.capacity_ratio, e.noise_threshold, e.lossless, c.engine_args, c.new_config_hash, "
        "c.confirmed_at FROM confirmations c JOIN experiments e ON e.experiment_id = c.experiment_id "
        "WHERE c.endpoint = ? ORDER BY c.confirmed_at, c.experiment_id",
        [endpoint],
    )
    return [
        ConfirmedImprovement(
            **{**row, "change": json.loads(row["change"]), "engine_args": list(row["engine_args"] or [])}
        )
        for row in rows
    ]


def latest_confirmed_engine_args(con: duckdb.DuckDBPyConnection, endpoint: str) -> list[str] | None:
    """The working configuration after the newest confirmation (None when nothing was confirmed)."""
    row = con.execute(
        "SELECT engine_args FROM confirmations WHERE endpoint = ? "
        "ORDER BY confirmed_at DESC, experiment_id DESC LIMIT 1",
        [endpoint],
    ).fetchone()
    return None if row is None else list(row[0] or [])


def open_questions(con: duckdb.DuckDBPyConnection, endpoint: str, status: str = "open") -> list[OpenQuestion]:
    rows = _rows(
        con,
        "SELECT * FROM open_questions WHERE endpoint = ? AND status = ? ORDER BY created_at, question_id",
        [endpoint, status],
    )
    return [OpenQuestion.from_row(row) for row in rows]


def findings_for_bottleneck(
    con: duckdb.DuckDBPyConnection, bottleneck: str, exclude_endpoint: str | None = None
) -> list[FindingRecord]:
    """Findings and lessons about a bottleneck (from other endpoints when ``exclude_endpoint`` is set)."""
    rows = _rows(
        con,
        "SELECT * FROM findings WHERE bottleneck = ? AND endpoint IS DISTINCT FROM ? "
        "ORDER BY CASE confidence WHEN 'high' THEN 0 WHEN 'medium' THEN 1 ELSE 2 END, "
        "created_at DESC, finding_id",
        [bottleneck, exclude_endpoint],
    )
    return [FindingRecord.from_row(row) for row in rows]


def technique_outcomes(
    con: duckdb.DuckDBPyConnection, bottleneck: str, exclude_endpoint: str | None = None
) -> pl.DataFrame:
    """How each technique fared against this bottleneck on each endpoint (v_findings_by_bottleneck)."""
    return con.execute(
        "SELECT * FROM v_findings_by_bottleneck WHERE bottleneck = ? AND endpoint IS DISTINCT FROM ?",
        [bottleneck, exclude_endpoint],
    ).pl()


def experiments(
    con: duckdb.DuckDBPyConnection, endpoint: str | None = None, campaign_id: str | None = None
) -> list[ExperimentRecord]:
    rows = _rows(
        con,
        "SELECT * FROM experiments WHERE (? IS NULL OR endpoint = ?) AND (? IS NULL OR campaign_id = ?) "
        "ORDER BY created_at, experiment_id",
        [endpoint, endpoint, campaign_id, campaign_id],
    )
    return [ExperimentRecord.from_row(row) for row in rows]


def skips(con: duckdb.DuckDBPyConnection, campaign_id: str) -> list[SkipRecord]:
    rows = _rows(con, "SELECT * FROM skips WHERE campaign_id = ? ORDER BY created_at, skip_id", [campaign_id])
    return [SkipRecord.from_row(row) for row in rows]


def aa_evidence(
    con: duckdb.DuckDBPyConnection, endpoint: str, protocol: str, exclude_campaign: str | None = None
) -> list[AAEvidenceRecord]:
    """The endpoint's recorded A/A evidence under ``protocol`` (oldest first), but that of
    ``exclude_campaign`` (a campaign pools its own floors from its state)."""
    rows = _rows(
        con,
        "SELECT * FROM aa_evidence WHERE endpoint = ? AND protocol = ? AND campaign_id IS DISTINCT FROM ? "
        "ORDER BY created_at, evidence_id",
        [endpoint, protocol, exclude_campaign],
    )
    return [AAEvidenceRecord.from_row(row) for row in rows]


def pareto_points(con: duckdb.DuckDBPyConnection, endpoint: str) -> list[dict[str, Any]]:
    """Every configuration of the endpoint at capacity, with ``on_front`` (v_pareto_points), best throughput first."""
    return _rows(
        con,
        "SELECT * FROM v_pareto_points WHERE endpoint = ? "
        "ORDER BY output_tokens_per_s_per_gpu DESC NULLS LAST, config_hash",
        [endpoint],
    )


def pareto_curves(con: duckdb.DuckDBPyConnection, endpoint: str) -> list[dict[str, Any]]:
    """Every valid step of every run of the endpoint: how each configuration trades per-user speed for
    throughput as the rate rises (drawn behind the capacity points)."""
    return _rows(
        con,
        "SELECT config_hash, run_id, target_rate, output_tokens_per_s_per_gpu, user_tokens_per_s_p50, "
        "within_sla FROM v_run_steps WHERE endpoint = ? AND run_validity = 'valid' "
        "AND step_validity = 'valid' AND kind NOT IN ('production_replay', 'recipe') "
        "ORDER BY config_hash, run_id, target_rate",
        [endpoint],
    )
