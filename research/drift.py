"""What counts as drift: fingerprints of an endpoint's model and SLA, and traffic distances.

Sensors compare these against their cursor; kept free of Dagster so they are testable alone.
The sensors read the endpoint's YAML afresh on every tick (sensors/drift.py): a sensor must see an
edited SLA without a code reload.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from specs.config import EndpointSpec


def sla_fingerprint(spec: EndpointSpec) -> str:
    return hashlib.sha256(spec.sla.model_dump_json().encode()).hexdigest()[:16]


def model_fingerprint(spec: EndpointSpec) -> str:
    """Model path, declared revision, and the checkpoint's identity on disk when it is local.

    The checkpoint part hashes config.json and the names, sizes and mtimes of weight files:
    cheap enough for a sensor tick, and a replaced checkpoint changes it.
    """
    parts = {"path": spec.model.path, "revision": spec.model.revision}
    if not spec.model.path.startswith("builtin:"):
        from specs.paths import resolve_path

        folder = resolve_path(spec.model.path)
        if folder.is_dir():
            config = folder / "config.json"
            parts["config"] = hashlib.sha256(config.read_bytes()).hexdigest() if config.exists() else None
            parts["weights"] = sorted(
                (p.name, p.stat().st_size, int(p.stat().st_mtime))
                for p in folder.iterdir()
                if p.suffix in {".safetensors", ".bin", ".gguf", ".pt"}
            )
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class TrafficDrift:
    """Distances between new production traffic and the replay pool, against thresholds."""

    distances: dict[str, float]
    thresholds: dict[str, float]
    source_signature: str
    exceeded: list[str] = field(default_factory=list)

    @property
    def drifted(self) -> bool:
        return bool(self.exceeded)

    def summary(self) -> str:
        return ", ".join(
            f"{k}={v:.3f} (max {self.thresholds.get(k, float('nan')):.3f})" for k, v in sorted(self.distances.items())
        )


def source_signature(path: Path) -> str:
    """Identity of a traffic source file: size, mtime and a hash of its tail (cheap for big logs)."""
    stat = path.stat()
    with open(path, "rb") as handle:
        handle.seek(max(0, stat.st_size - 65536))
        tail = hashlib.sha256(handle.read()).hexdigest()[:16]
    return f"{stat.st_size}-{int(stat.st_mtime)}-{tail}"


def current_traffic_profile(spec: EndpointSpec):
    """Profile of the endpoint's traffic source as it is now, computed exactly as a pool build
    computes its production profile (nothing is persisted)."""
    from specs.models import tokenizer_dir
    from replay.build import profile_from_source
    from replay.tokenize import ChatTokenizer

    return profile_from_source(spec, ChatTokenizer.from_dir(tokenizer_dir(spec.model.path)))


def traffic_drift(spec: EndpointSpec, reference) -> TrafficDrift:
    """Distances between the traffic source now and ``reference`` (the profile the pool was built
    and judged against), with the fidelity check's own metrics and thresholds."""
    from replay.build import traffic_source
    from replay.fidelity import fidelity_report

    report = fidelity_report(reference, current_traffic_profile(spec), spec.fidelity)
    distances = {r.name: r.distance for r in report.rows if r.distance is not None}
    thresholds = {r.name: r.threshold for r in report.rows}
    return TrafficDrift(
        distances=distances,
        thresholds=thresholds,
        source_signature=source_signature(traffic_source(spec.traffic)),
        exceeded=[r.name for r in report.failures],
    )
