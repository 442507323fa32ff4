"""Engine internals: settings the CLI does not expose, and known fixes of the engine's code, declared
by the adapter as candidates.

An adapter lists them in ``internal_settings`` and ``patch_recipes``. Each is applied through an overlay
(``engines.overlays``) to the engine process it launches, so a candidate is still one argument diff
(``--overlay NAME={json}`` or ``--overlay NAME``) whose overlay content hash is part of the launch
identity. ``addresses`` names the bottlenecks (``research.proposals.BOTTLENECKS``) it is meant for: the
rule-based proposer offers it when the diagnosis names one of them, after the engine-independent
techniques. A patch recipe is offered only where its bug lives: the engine versions (PEP 440
specifiers) and the builds (CPU, GPU) it names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


Build = Literal["cpu", "gpu", "any"]


def _json(fields: dict) -> str:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def _on_build(builds: Build, gpu_count: int) -> bool:
    return builds == "any" or (builds == "gpu") == (gpu_count > 0)


@dataclass(frozen=True)
class InternalSetting:
    """One internal setting as a candidate: what it sets, what it is for, what it risks.

    It travels in one of three ways: a settings overlay's JSON (``overlay``: ``--overlay NAME={json}``,
    for fields the engine has no flag for), an engine flag that takes JSON (``flag``, e.g. vLLM's
    ``--compilation-config {json}``), or plain engine flags (neither: ``settings`` is the argument diff).
    The first two merge into what the configuration already runs, so a candidate changes one thing."""

    name: str  # short id; the technique is ``internal_<name>``
    overlay: str | None  # the settings overlay that applies it (engines.overlays.REGISTRY)
    settings: dict = field(default_factory=dict)
    addresses: tuple[str, ...] = ()  # bottlenecks it is meant for
    expect: str = ""  # what it should do to the measurements
    falsified_by: str = ""  # what would prove it wrong
    risk: str = ""  # what it may break (a soak is there to catch it)
    ratio: float | None = None  # predicted capacity ratio, when there is a basis for one
    flag: str | None = None  # a JSON-valued engine flag that carries ``settings`` (instead of an overlay)
    builds: Build = "any"  # the builds it means something on (CUDA-graph settings: "gpu")
    source: str = ""  # where its fields were verified (file and version), for engines that cannot run here

    @property
    def technique(self) -> str:
        return f"internal_{self.name}"

    def overlay_arg(self) -> str:
        """The ``--overlay`` value: NAME={settings as compact, sorted JSON}."""
        return f"{self.overlay}={_json(self.settings)}"

    def applies_on(self, gpu_count: int) -> bool:
        return _on_build(self.builds, gpu_count)

    def arg_diff(self, args: dict[str, str | None]) -> dict[str, str] | None:
        """The argument diff that applies this setting on top of ``args`` (parsed engine arguments): its
        fields merged into the overlay or JSON flag the configuration already runs. None when it would
        change nothing, or when another overlay holds the configuration's ``--overlay``."""
        from engines.overlays import FLAG

        if self.overlay is None and self.flag is None:  # plain flags
            return dict(self.settings) if any(args.get(k, _ABSENT) != v for k, v in self.settings.items()) else None
        carrier = self.flag or FLAG
        raw = args.get(carrier) or ""
        if self.overlay is not None and raw:
            name, _, raw = raw.partition("=")
            if name != self.overlay:
                return None  # one overlay per candidate diff
        try:
            fields = dict(json.loads(raw)) if raw else {}
        except (ValueError, TypeError):
            fields = {}
        merged = {**fields, **self.settings}
        if merged == fields:
            return None
        return {carrier: _json(merged) if self.flag else f"{self.overlay}={_json(merged)}"}


_ABSENT = object()


@dataclass(frozen=True)
class PatchRecipe:
    """A known bug in an engine's code with its fix as a patch overlay: a recipe of the adapter's library,
    keyed by the engine (the adapter that declares it) and the versions and builds that have the bug."""

    name: str  # short id; the technique is ``patch_<name>``
    overlay: str  # the patch overlay that fixes it (engines.overlays.REGISTRY, purpose "patch")
    versions: str  # PEP 440 specifiers of the engine versions that have the bug, e.g. "==0.32.*"
    builds: Build = "any"  # the builds that have it
    addresses: tuple[str, ...] = ()  # bottlenecks the bug shows as
    upstream: str = ""  # the issue and the fix this backports
    expect: str = ""
    falsified_by: str = ""
    risk: str = ""
    ratio: float | None = None

    @property
    def technique(self) -> str:
        return f"patch_{self.name}"

    def overlay_arg(self) -> str:
        return self.overlay

    def applies_to(self, engine_version: str | None, gpu_count: int) -> bool:
        """Whether the engine that ran (``name==version`` or a bare version) has this bug. An unknown
        version never matches: a patch is offered only where the bug is known to live."""
        if not _on_build(self.builds, gpu_count):
            return False
        raw = (engine_version or "").rpartition("==")[2].strip()
        try:
            return SpecifierSet(self.versions).contains(Version(raw), prereleases=True)
        except (InvalidSpecifier, InvalidVersion):
            return False
