"""Engine internals: settings the CLI does not expose, declared by the adapter as candidates.

An adapter lists them in ``internal_settings``; each is applied through a settings overlay
(``engines.overlays``), so a candidate is still one argument diff (``--overlay NAME={json}``) whose
overlay content hash is part of the launch identity. ``addresses`` names the bottlenecks
(``research.proposals.BOTTLENECKS``) the setting is meant for: the rule-based proposer offers it
when the diagnosis names one of them, after the engine-independent techniques.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


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
