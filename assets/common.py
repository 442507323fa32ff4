"""Small helpers shared by the stage modules: asset keys, table metadata and embedded plots."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Iterable, Mapping

import dagster as dg


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
    return dg.MetadataValue.table(records=records,
                                  schema=dg.TableSchema(columns=[dg.TableColumn(n, types[n]) for n in names]))


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
