"""Small helpers shared by the stage modules: asset keys, metadata tables and embedded plots."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Iterable, Mapping

import dagster as dg

def key(endpoint: str, name: str) -> dg.AssetKey:
    """Asset keys are ``[endpoint, stage]`` so a dozen endpoints coexist in one code location."""
    return dg.AssetKey([endpoint, name])


def md_table(rows: Iterable[Mapping], columns: list[str] | None = None) -> dg.MetadataValue:
    """A list of dicts as a markdown table (renders well in the asset's metadata panel)."""
    rows = list(rows)
    if not rows:
        return dg.MetadataValue.md("_(no rows)_")
    columns = columns or list(rows[0].keys())
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    return dg.MetadataValue.md("\n".join(lines))


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_image(path: Path, title: str = "plot") -> dg.MetadataValue:
    """Embed a PNG in markdown metadata so the plot shows in the UI without a file server."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{data})")
