"""Render query results for people (table) and programs (JSON, CSV)."""

from __future__ import annotations

import json
from datetime import date, datetime
from typing import Any, Literal

import polars as pl

OutputFormat = Literal["table", "json", "csv"]


def format_table(df: pl.DataFrame) -> str:
    """Every row and column, full cell text (analysts asked for it, so show it)."""
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        fmt_str_lengths=200,
        fmt_table_cell_list_len=20,
        tbl_width_chars=400,
        tbl_hide_dataframe_shape=False,
    ):
        return str(df)


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, pl.Series):
        return [_plain(v) for v in value.to_list()]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def format_json(df: pl.DataFrame) -> str:
    """A JSON array of row objects (timestamps as ISO 8601)."""
    return json.dumps([_plain(row) for row in df.to_dicts()], indent=2)


def format_csv(df: pl.DataFrame) -> str:
    """CSV with a header; list columns are written as JSON arrays (CSV has no nested values)."""
    nested = [name for name, dtype in df.schema.items() if isinstance(dtype, (pl.List, pl.Array, pl.Struct))]
    if nested:
        df = df.with_columns(
            pl.col(name).map_elements(lambda v: json.dumps(_plain(v)), return_dtype=pl.Utf8) for name in nested
        )
    return df.write_csv()


def render(df: pl.DataFrame, fmt: OutputFormat = "table") -> str:
    if fmt == "table":
        return format_table(df)
    if fmt == "json":
        return format_json(df)
    if fmt == "csv":
        return format_csv(df)
    raise ValueError(f"unknown output format {fmt!r}; use table, json or csv")
