"""An already-running OpenAI-compatible server (engine.kind ``external``): measure only.

Nothing is started, stopped or restarted; prefix-cache reset and profiling raise
EngineError because the server is not ours to change. ``/metrics`` is scraped if the
server exports vLLM or SGLang names, otherwise snapshots are empty.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from engines.base import EngineAdapter, EngineError, MetricsSnapshot
from engines.metrics import parse_samples, snapshot_from_text
from engines.sglang import SGLANG_FIELDS
from engines.vllm import VLLM_FIELDS


class ExternalAdapter(EngineAdapter):
    kind = "external"
    manages_process = False
    evidence = frozenset({"metrics"})  # scraped when the server exports vLLM or SGLang names
    health_path = "/v1/models"  # every OpenAI-compatible server has it; /health is not universal
    metrics_path = "/metrics"

    @classmethod
    def spec_problems(cls, spec) -> list[tuple[tuple[str, ...], str]]:
        problems = super().spec_problems(spec)
        if not spec.engine.url:
            problems.insert(0, (("engine",), "engine.kind 'external' needs engine.url (the running server's base URL)"))
        return problems

    def __init__(self, spec, port: int, workdir: Path):
        super().__init__(spec, port, workdir)
        self.url = (spec.engine.url or "").rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in {"http", "https"} or not parts.netloc:
            raise EngineError(f"engine.url {spec.engine.url!r} is not an http(s) base URL")
        if self.url.endswith("/v1"):
            self.url = self.url[: -len("/v1")]

    @property
    def base_url(self) -> str:
        return self.url

    def launch_command(self, model_dir: Path) -> list[str]:
        raise EngineError(f"endpoint {self.spec.name!r} is external ({self.url}): it is measured, never launched")

    def served_model_name(self, model_dir: Path) -> str:
        return self.spec.model.served_name or self.spec.model.path

    def parse_metrics(self, text: str, timestamp: float) -> MetricsSnapshot:
        names = {name for name, _, _ in parse_samples(text)}
        if any(n.startswith("vllm:") for n in names):
            return snapshot_from_text(text, timestamp, VLLM_FIELDS, prefix="vllm:")
        if any(n.startswith("sglang:") for n in names):
            return snapshot_from_text(text, timestamp, SGLANG_FIELDS, prefix="sglang:")
        return MetricsSnapshot(timestamp=timestamp)

    def validate_flags(self, args: list[str]) -> list[str]:
        return [f"endpoint {self.spec.name!r} is external: engine arguments cannot be changed"] if args else []
