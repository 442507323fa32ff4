"""Validation of interventions before anything runs.

A proposal's argument diff is applied to the current arguments and checked three ways:
every flag must be one the engine knows (``EngineAdapter.validate_flags`` / ``known_flags``),
every value must make sense for its flag (positive integers, fractions, JSON objects, choices),
and the result must be launchable as a whole (no flag set both ways, tensor parallelism within
the GPUs there are). An invalid intervention is rejected with the reasons; nothing is started.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from specs.engine_args import REMOVE, apply_diff, parse_args
from research.proposals import Intervention

#: the engine's own checks of flag values: ``EngineAdapter.value_checks`` (engines.value_checks)


#: flags that are not performance settings: a proposal must never touch them (security, identity,
#: paths, logging, the served model itself).
NOT_TUNABLE = re.compile(
    r"^--(api-key|ssl-.*|host|port|uds|root-path|served-model-name|model|tokenizer.*|revision"
    r"|code-revision|chat-template.*|download-dir|allowed-.*|allow-credentials|middleware"
    r"|trust-remote-code|config|config-format|profiler-config|hf-token|hf-overrides"
    r"|.*log.*|lora-.*|enable-lora|response-role|tool-.*|enable-auto-tool-choice"
    r"|reasoning-parser.*|otlp-.*|collect-detailed-traces)$"
)

#: pairs that turn the same feature on and off.
_OPPOSITES = re.compile(r"^--no-(.+)$")


def adapter_class(engine_kind: str):
    """The engines package's adapter class for ``engine_kind`` (None when there is none)."""
    from engines.registry import ADAPTERS

    return ADAPTERS.get(engine_kind)


def known_flags_for(engine_kind: str) -> frozenset[str]:
    """Flags the engine accepts, from its adapter (empty = unknown: names are not checked)."""
    cls = adapter_class(engine_kind)
    return frozenset(cls.known_flags) if cls is not None else frozenset()


def tunable_flags_for(engine_kind: str) -> list[str]:
    """Known flags a proposal may change (what the LLM schema offers), sorted."""
    return sorted(f for f in known_flags_for(engine_kind) if not NOT_TUNABLE.match(f))


@dataclass
class ValidationResult:
    ok: bool
    reasons: list[str] = field(default_factory=list)
    args_after: list[str] = field(default_factory=list)
    lossy: bool = False
    diff: dict[str, str | None] = field(default_factory=dict)  # the normalised diff that was checked


def _normalise(flag: str) -> str:
    flag = flag.strip()
    return flag if flag.startswith("-") else f"--{flag}"


def normalise_diff(diff: dict[str, str | None], base_args: list[str]) -> dict[str, str | None]:
    """``--flag`` spelling, and turning a feature on also drops its ``--no-`` twin (and back)."""
    out = {_normalise(k): v for k, v in diff.items()}
    try:
        base = parse_args(base_args)
    except ValueError:
        return out
    for flag, value in list(out.items()):
        if value == REMOVE:
            continue
        match = _OPPOSITES.match(flag)
        twin = f"--{match.group(1)}" if match else f"--no-{flag[2:]}"
        if twin in base and twin not in out:
            out[twin] = REMOVE
    return out


def validate_intervention(
    intervention: Intervention,
    base_args: list[str],
    engine_kind: str,
    known_flags: Iterable[str] | None = None,
    adapter=None,
    gpu_count: int | None = None,
) -> ValidationResult:
    """Check an intervention against the engine's arguments; return reasons when it must not run.

    ``adapter`` (an ``engines.base.EngineAdapter``) is asked first when given; ``known_flags``
    overrides the flag list; ``gpu_count`` (0 = CPU host) bounds the parallelism flags.
    """
    reasons: list[str] = []
    diff = normalise_diff(intervention.engine_arg_diff, base_args)
    if not diff and not (intervention.engine_patch and intervention.engine_patch.strip()):
        reasons.append("the intervention changes nothing (empty argument diff and no patch)")
    for flag in diff:
        if not re.fullmatch(r"--[a-z0-9][a-z0-9-]*(\.[a-z0-9_-]+)*", flag):
            reasons.append(f"{flag!r} is not a well-formed engine flag")
    if intervention.engine_patch is not None and intervention.engine_patch.strip():
        patch = intervention.engine_patch
        if not (("--- " in patch and "+++ " in patch and "@@" in patch) or patch.startswith("diff --git")):
            reasons.append("engine_patch is not a unified diff (needs ---/+++ headers and @@ hunks)")
    if reasons:
        return ValidationResult(False, reasons)

    flags = frozenset(known_flags) if known_flags is not None else known_flags_for(engine_kind)
    cls = adapter_class(engine_kind)
    checks = cls.value_checks if cls is not None else {}
    for flag, value in diff.items():
        if NOT_TUNABLE.match(flag):
            reasons.append(f"{flag} is not a performance setting; proposals may not change it")
            continue
        if value == REMOVE:
            continue
        if flag in checks:
            problem = checks[flag](value)
            if problem:
                reasons.append(f"{flag} {problem}")
        elif value is not None and value.startswith("--"):
            reasons.append(f"{flag} value {value!r} looks like another flag")

    try:
        after = apply_diff(base_args, diff)
        parsed = parse_args(after)
    except ValueError as exc:
        return ValidationResult(False, reasons + [f"the arguments do not parse after the change: {exc}"])
    if adapter is not None:
        flag_problems = adapter.validate_flags(after)
    else:
        from engines.vllm import RESERVED_FLAGS, validate_against

        flag_problems = validate_against(after, flags, engine_kind, RESERVED_FLAGS)
    reasons.extend(r for r in flag_problems if r not in reasons)
    for flag in parsed:
        match = _OPPOSITES.match(flag)
        if match and f"--{match.group(1)}" in parsed:
            reasons.append(f"{flag} and --{match.group(1)} are both set after the change")
    cls = adapter_class(engine_kind)
    if cls is not None:
        reasons.extend(cls.launch_problems(parsed, gpu_count))
    lossy_flags = cls.vocabulary.lossy_flags if cls is not None else frozenset()
    lossy = intervention.lossy or any(f in lossy_flags and v != REMOVE for f, v in diff.items())
    return ValidationResult(not reasons, reasons, after, lossy, diff)
