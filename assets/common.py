"""Small helpers shared by the stage modules: asset keys, table metadata and embedded plots."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Iterable, Mapping

import dagster as dg


def refuse_unrunnable(endpoint) -> None:
    """First line of every asset that starts the endpoint's engine: on a host without its GPU or its
    engine the run fails at once, with the reason, instead of after an engine start."""
    from launchers import host_problem

    problem = host_problem(endpoint)
    if problem is not None:
        raise dg.Failure(description=problem, metadata={"cannot_run_here": problem}, allow_retries=False)


def mark_unrunnable(defs: dg.Definitions, endpoint) -> dg.Definitions:
    """The endpoint's assets say in their description and metadata why this host cannot run them."""
    from launchers import host_problem

    problem = host_problem(endpoint)
    if problem is None:
        return defs
    note = f"**Cannot run on this host.** {problem}"
    return defs.map_asset_specs(
        func=lambda spec: spec.replace_attributes(
            description=f"{note}\n\n{spec.description or ''}".strip()
        ).merge_attributes(metadata={"cannot_run_here": problem})
    )


def key(endpoint: str, name: str) -> dg.AssetKey:
    """Asset keys are ``[endpoint, stage]`` so a dozen endpoints coexist in one code location."""
    return dg.AssetKey([endpoint, name])


def table(rows: Iterable[Mapping], columns: list[str] | None = None) -> dg.MetadataValue:
    """Rows of flat dicts as Dagster table metadata (records + column schema): the UI renders a
    sortable table. A column's type is what its values are (int, float, bool), else string."""
    rows = list(rows)
    names = columns or (list(rows[0]) if rows else [])
    types = {name: _column_type([row.get(name) for row in rows]) for name in names}
    records = [dg.TableRecord({n: _cell(row.get(n), types[n]) for n in names}) for row in rows]
    return dg.MetadataValue.table(
        records=records, schema=dg.TableSchema(columns=[dg.TableColumn(n, types[n]) for n in names])
    )


def _column_type(values: list) -> str:
    kinds = {type(v) for v in values if v is not None}
    if kinds and kinds <= {bool}:
        return "bool"
    if kinds and kinds <= {int}:
        return "int"
    if kinds and kinds <= {int, float}:
        return "float"
    return "string"


def _cell(value, kind: str):
    """A table cell: the value in its column's type (a string column shows lists and dicts as text)."""
    if value is None:
        return None
    if kind == "float":
        return float(value)
    return value if kind != "string" else (value if isinstance(value, str) else str(value))


def md_image(path: Path, title: str = "plot") -> dg.MetadataValue:
    """Embed a PNG in markdown metadata so the plot shows in the UI without a file server."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{data})")
