"""Prometheus text -> flat samples -> :class:`MetricsSnapshot`.

Parsing uses prometheus_client's own text parser (the format has escaping and histogram
rules not worth re-implementing). Each engine adapter gives a map from snapshot field to
the sample name it exports; samples with several label sets (one per model or rank) are
summed, histogram buckets never feed a field.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from engines.base import EngineError, MetricsSnapshot


def sample_key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample as (name, labels, value)."""
    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except (ValueError, TypeError) as exc:
        raise EngineError(f"could not parse Prometheus metrics text: {exc}") from exc


def snapshot_from_text(
    text: str, timestamp: float, fields: dict[str, str | tuple[str, ...]], prefix: str
) -> MetricsSnapshot:
    """Build a snapshot: ``fields`` maps a MetricsSnapshot attribute to one sample name (or
    alternatives tried in order); ``raw`` keeps every sample whose name starts with ``prefix``."""
    samples = parse_samples(text)
    totals: dict[str, float] = {}
    raw: dict[str, float] = {}
    for name, labels, value in samples:
        if not name.startswith(prefix):
            continue
        raw[sample_key(name, labels)] = value
        totals[name] = totals.get(name, 0.0) + value
    values: dict[str, float | None] = {}
    for field, names in fields.items():
        for name in (names,) if isinstance(names, str) else names:
            if name in totals:
                values[field] = totals[name]
                break
    return MetricsSnapshot(timestamp=timestamp, raw=raw, **values)
