"""Engine internals as techniques: what the adapter declares beyond the CLI (``engines.internals``).

A setting is offered for the bottlenecks it names in ``addresses``, after the playbook's engine-independent
techniques. It is one argument diff, ``--overlay NAME={json}``; when the configuration already runs that
settings overlay (an internal change adopted earlier), the new fields are merged into it, so a candidate
still changes one thing. A patch recipe (a known bug's fix) is offered likewise, ``--overlay NAME``, but
only where the diagnosed engine's version and build have the bug.
"""

from __future__ import annotations

from engines.internals import InternalSetting, PatchRecipe
from engines.overlays import FLAG
from engines.registry import ADAPTERS
from research.proposals import Intervention
from research.rules.context import Context


def settings_of(kind: str) -> tuple[InternalSetting, ...]:
    cls = ADAPTERS.get(kind)
    return tuple(cls.internal_settings) if cls is not None else ()


def recipes_of(kind: str) -> tuple[PatchRecipe, ...]:
    cls = ADAPTERS.get(kind)
    return tuple(cls.patch_recipes) if cls is not None else ()


def setting_for(kind: str, technique: str) -> InternalSetting | PatchRecipe | None:
    """The adapter's setting or patch recipe behind ``technique`` (what it should do, what it risks)."""
    return next((s for s in (*settings_of(kind), *recipes_of(kind)) if s.technique == technique), None)


def internal_interventions(bottleneck: str, ctx: Context) -> list[Intervention]:
    """The adapter's internal settings meant for ``bottleneck`` that would change this configuration on
    this build, those made first of all for it (named first in ``addresses``) first."""
    meant = [s for s in settings_of(ctx.kind) if bottleneck in s.addresses and s.applies_on(ctx.gpu_count)]
    out = []
    for setting in sorted(meant, key=lambda s: s.addresses.index(bottleneck)):
        diff = setting.arg_diff(ctx.args)
        if diff is not None:
            out.append(Intervention(technique=setting.technique, engine_arg_diff=diff))
    return out


def recipe_interventions(bottleneck: str, ctx: Context) -> list[Intervention]:
    """The adapter's patch recipes for ``bottleneck`` whose bug the diagnosed engine's version and build
    have, that this configuration does not run yet (and whose flag no other overlay holds)."""
    version = ctx.diagnosis.engine_version
    return [
        Intervention(technique=r.technique, engine_arg_diff={FLAG: r.overlay_arg()})
        for r in recipes_of(ctx.kind)
        if bottleneck in r.addresses and r.applies_to(version, ctx.gpu_count) and FLAG not in ctx.args
    ]
