"""Runtime overlays: code an engine process runs at start, put on its path, never into the installed engine.

An overlay is a folder under ``engines/patches`` holding a ``sitecustomize.py``: a fix (the vLLM
issue-55005 kernel), settings the CLI does not expose (``transformers serve``'s
``ContinuousBatchingConfig``), or an instrument of the harness (a planted slowdown or leak). A
configuration asks for one in its engine arguments, so that a candidate is still one argument diff
and the launch-config hash follows it:

    --overlay transformers_cb_config={"kv_padding_interval_size": 4096}
    --overlay vllm_issue_55005
    --overlay authored-3f2a9c0d1e4b5a6c      # a patch a proposal authored (engines.authored)

``start_engine`` takes the overlay arguments out of the command line (the adapter never sees them),
puts the loader (``engines/patches/_loader``) on the engine's PYTHONPATH with the overlays' folders in
``AUTORESEARCH_OVERLAYS``, and hands each overlay its settings in its own environment variable. The
content hash of every overlay used is part of the engine's identity, so a changed patch is a changed
configuration. An overlay that is unknown, or not made for the engine kind, is refused before anything
starts; one that fails inside the engine stops it with the reason (the verdict is ``invalid``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

PATCHES = Path(__file__).resolve().parent / "patches"
LOADER = PATCHES / "_loader"
FLAG = "--overlay"


class OverlayError(ValueError):
    """An overlay argument that cannot be honoured (unknown, wrong engine, bad settings)."""


@dataclass(frozen=True)
class Overlay:
    """One overlay folder and what it is for."""

    name: str
    engines: frozenset[str]  # adapter kinds it is made for
    purpose: str  # "settings" | "patch" | "instrument" | "evidence"
    description: str
    settings_env: str | None = None  # the variable its JSON settings travel in (None: it takes none)
    root: Path = PATCHES

    @property
    def folder(self) -> Path:
        return self.root / self.name

    def sha256(self) -> str:
        """Content hash of every file of the overlay (names and bytes), short."""
        digest = hashlib.sha256()
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(path.relative_to(self.folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()[:16]


REGISTRY: dict[str, Overlay] = {
    o.name: o
    for o in (
        Overlay(
            "transformers_cb_config",
            frozenset({"transformers"}),
            "settings",
            "ContinuousBatchingConfig fields `transformers serve` has no flag for (padding intervals, scheduler, "
            "compile level, requests per batch, memory fraction)",
            settings_env="AUTORESEARCH_CB_CONFIG",
        ),
        Overlay(
            "transformers_cb_probe",
            frozenset({"transformers"}),
            "evidence",
            "the continuous-batching loop's internals: step-time breakdown, padded shapes, CUDA-graph captures "
            "and their stalls, device memory (the adapter puts it on every engine it launches)",
        ),
        Overlay(
            "vllm_issue_55005",
            frozenset({"vllm"}),
            "patch",
            "vLLM 0.32 CPU: the rejection sampler's expand kernel read uninitialised temperatures (issue 55005)",
        ),
        Overlay(
            "planted_slowdown",
            frozenset({"vllm", "transformers"}),
            "instrument",
            "every engine step takes (1 + fraction) times as long: a known slowdown for the harness's power benchmark",
            settings_env="AUTORESEARCH_PLANTED_SLOWDOWN",
        ),
        Overlay(
            "planted_leak",
            frozenset({"vllm"}),
            "instrument",
            "the engine leaks memory under sustained load until it dies: a known fault for the soak's tests",
            settings_env="AUTORESEARCH_PLANTED_LEAK_MB_PER_S",
        ),
    )
}


@dataclass(frozen=True)
class Requested:
    """An overlay asked for by one ``--overlay`` argument."""

    overlay: Overlay
    settings: str | None  # the raw settings (JSON for settings overlays, a number for instruments)


def split(args: list[str]) -> tuple[list[str], list[Requested]]:
    """(the engine's own arguments, the overlays asked for). ``--overlay NAME[=SETTINGS]`` or
    ``--overlay=NAME[=SETTINGS]``; raises OverlayError naming what is wrong."""
    own: list[str] = []
    asked: list[Requested] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == FLAG or token.startswith(FLAG + "="):
            if token == FLAG:
                if i + 1 >= len(args):
                    raise OverlayError(
                        f"{FLAG} needs a value: NAME or NAME=SETTINGS (one of {', '.join(sorted(REGISTRY))})"
                    )
                value, i = args[i + 1], i + 2
            else:
                value, i = token[len(FLAG) + 1 :], i + 1
            asked.append(_requested(value))
            continue
        own.append(token)
        i += 1
    names = [r.overlay.name for r in asked]
    if len(set(names)) != len(names):
        raise OverlayError(f"{FLAG} names an overlay twice: {', '.join(names)}")
    return own, asked


def find(name: str) -> Overlay | None:
    """A shipped overlay, or a patch a proposal authored (engines.authored, under the project's home)."""
    from engines import authored

    return REGISTRY.get(name) or authored.find(name)


def _requested(value: str) -> Requested:
    name, _, settings = value.partition("=")
    overlay = find(name)
    if overlay is None:
        raise OverlayError(
            f"{FLAG} {name!r} is not a known overlay; known: {', '.join(sorted(REGISTRY))}"
            + (
                " (an authored patch is built by the campaign that runs its proposal)"
                if name.startswith("authored-")
                else ""
            )
        )
    if settings and overlay.settings_env is None:
        raise OverlayError(f"{FLAG} {name} takes no settings, got {settings!r}")
    if settings and overlay.purpose == "settings":
        try:
            parsed = json.loads(settings)
        except ValueError as exc:
            raise OverlayError(f"{FLAG} {name}: settings must be a JSON object, got {settings!r} ({exc})") from None
        if not isinstance(parsed, dict):
            raise OverlayError(f"{FLAG} {name}: settings must be a JSON object of field: value, got {settings!r}")
    return Requested(overlay, settings or None)


def problems(args: list[str], engine_kind: str) -> list[str]:
    """Why the overlay arguments in ``args`` cannot be honoured for this engine kind (empty: they can)."""
    try:
        _, asked = split(args)
    except OverlayError as exc:
        return [str(exc)]
    return [
        f"{FLAG} {r.overlay.name} is made for {', '.join(sorted(r.overlay.engines))}, not {engine_kind}"
        for r in asked
        if engine_kind not in r.overlay.engines
    ]


def launch_env(asked: list[Requested], engine_env: dict[str, str]) -> dict[str, str]:
    """The environment that applies ``asked`` in the engine process only: the loader first on its
    PYTHONPATH (before what the endpoint's engine.env puts there), the overlays' folders, their settings."""
    if not asked:
        return {}
    path = os.pathsep.join(p for p in (str(LOADER), engine_env.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "AUTORESEARCH_OVERLAYS": os.pathsep.join(str(r.overlay.folder) for r in asked)}
    for r in asked:
        if r.overlay.settings_env and r.settings is not None:
            env[r.overlay.settings_env] = r.settings
    return env


def hashes(asked: list[Requested]) -> tuple[tuple[str, str], ...]:
    """(name, content hash) of each overlay used: part of the engine's identity."""
    return tuple((r.overlay.name, r.overlay.sha256()) for r in asked)
