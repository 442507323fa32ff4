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


@dataclass(frozen=True)
class InternalSetting:
    """One internal setting as a candidate: what it sets, what it is for, what it risks."""

    name: str  # short id; the technique is ``internal_<name>``
    overlay: str  # the settings overlay that applies it (engines.overlays.REGISTRY)
    settings: dict = field(default_factory=dict)
    addresses: tuple[str, ...] = ()  # bottlenecks it is meant for
    expect: str = ""  # what it should do to the measurements
    falsified_by: str = ""  # what would prove it wrong
    risk: str = ""  # what it may break (a soak is there to catch it)
    ratio: float | None = None  # predicted capacity ratio, when there is a basis for one

    @property
    def technique(self) -> str:
        return f"internal_{self.name}"

    def overlay_arg(self) -> str:
        """The ``--overlay`` value: NAME={settings as compact, sorted JSON}."""
        return f"{self.overlay}={json.dumps(self.settings, sort_keys=True, separators=(',', ':'))}"


@dataclass(frozen=True)
class PatchRecipe:
    """A known bug in an engine's code with its fix as a patch overlay: a recipe of the adapter's library,
    keyed by the engine (the adapter that declares it) and the versions and builds that have the bug."""

    name: str  # short id; the technique is ``patch_<name>``
    overlay: str  # the patch overlay that fixes it (engines.overlays.REGISTRY, purpose "patch")
    versions: str  # PEP 440 specifiers of the engine versions that have the bug, e.g. "==0.32.*"
    builds: Literal["cpu", "gpu", "any"] = "any"  # the builds that have it
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
        if self.builds == "cpu" and gpu_count > 0 or self.builds == "gpu" and gpu_count == 0:
            return False
        raw = (engine_version or "").rpartition("==")[2].strip()
        try:
            return SpecifierSet(self.versions).contains(Version(raw), prereleases=True)
        except (InvalidSpecifier, InvalidVersion):
            return False
