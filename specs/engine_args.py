"""Engine argument lists as ordered flag -> value maps, for diffs and ``--set`` overrides.

YAML keeps arguments as a list of strings (exactly what is passed to the engine);
this module turns them into ``{"--max-num-seqs": "2", "--enable-prefix-caching": None}``
(``None`` = a bare switch) and back, so proposals can be expressed as exact diffs.
"""

from __future__ import annotations

ArgMap = dict[str, str | None]
REMOVE = "__remove__"  # value in a diff that deletes a flag


def parse_args(args: list[str]) -> ArgMap:
    out: ArgMap = {}
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("-"):
            raise ValueError(f"engine argument {token!r} at position {i} is not a flag (expected --name [value])")
        if "=" in token:
            flag, value = token.split("=", 1)
            out[flag] = value
            i += 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[token] = args[i + 1]
            i += 2
        else:
            out[token] = None
            i += 1
    return out


def render_args(arg_map: ArgMap) -> list[str]:
    out: list[str] = []
    for flag, value in arg_map.items():
        out.append(flag)
        if value is not None:
            out.append(value)
    return out


def apply_diff(args: list[str], diff: dict[str, str | None]) -> list[str]:
    """Apply ``{flag: value | None | REMOVE}`` to an argument list; flags are normalised to ``--name``."""
    current = parse_args(args)
    for flag, value in diff.items():
        flag = flag if flag.startswith("-") else f"--{flag}"
        if value == REMOVE:
            current.pop(flag, None)
        else:
            current[flag] = value
    return render_args(current)


def diff_args(before: list[str], after: list[str]) -> dict[str, str | None]:
    """The diff that turns ``before`` into ``after``."""
    a, b = parse_args(before), parse_args(after)
    diff: dict[str, str | None] = {flag: value for flag, value in b.items() if flag not in a or a[flag] != value}
    diff.update({flag: REMOVE for flag in a if flag not in b})
    return diff


class OverrideError(ValueError):
    """An ``engine.ARG=VALUE`` override that does not parse (the message says the expected form)."""


def override_diff(sets: list[str] | None, unsets: list[str] | None = None) -> dict[str, str | None]:
    """``engine.ARG=VALUE`` (empty VALUE = a bare switch) and ``engine.ARG`` to drop, as a diff for
    :func:`apply_diff`: the CLI's ``--set``/``--unset`` and the experiment asset's run config."""
    diff: dict[str, str | None] = {}
    for item in sets or []:
        if "=" not in item or not item.startswith("engine."):
            raise OverrideError(f"--set {item!r}: expected engine.ARG=VALUE, e.g. --set engine.max-num-seqs=8")
        name, value = item.removeprefix("engine.").split("=", 1)
        diff["--" + name.lstrip("-").replace("_", "-")] = None if value == "" else value
    for item in unsets or []:
        if not item.startswith("engine.") or "=" in item:
            raise OverrideError(f"--unset {item!r}: expected engine.ARG, e.g. --unset engine.enforce-eager")
        diff["--" + item.removeprefix("engine.").lstrip("-").replace("_", "-")] = REMOVE
    return diff


def apply_overrides(spec, sets: list[str] | None, unsets: list[str] | None = None):
    """``spec`` (an endpoint) with ``engine.ARG=VALUE`` / ``engine.ARG`` overrides applied to its engine
    arguments (unchanged when there are none); raises :class:`OverrideError` on a malformed one."""
    diff = override_diff(sets, unsets)
    return spec.with_engine_args(apply_diff(spec.engine.args, diff)) if diff else spec
