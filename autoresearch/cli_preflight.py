"""What a command will read and start, checked before anything runs or is written: the traffic file, the
model folder (tokenizer, weights), the engine's arguments and port, or the external server's answer. A
problem is a :class:`UsageError` at the field's ``file:line``; nothing is started."""

from __future__ import annotations

import os
from pathlib import Path

from specs import paths
from launchers import LaunchRefused
from autoresearch.cli_errors import UsageError, field_location


WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")


def check_file(value: str, field: str, what: str) -> Path:
    """A file the command will read: it exists, is a file and is readable (else a UsageError at its field)."""
    path = paths.resolve_path(value)
    where = field_location(field)
    if not path.exists():
        raise UsageError(
            f"{field} {value!r} -> {path} does not exist",
            where=where,
            hint=f"point {field} at the {what} (a relative path is relative to the repository root)",
        )
    if path.is_dir():
        raise UsageError(
            f"{field} {value!r} -> {path} is a folder, not a file",
            where=where,
            hint=f"point {field} at the {what} itself, not at the folder holding it",
        )
    if not os.access(path, os.R_OK):
        raise UsageError(
            f"{field} {value!r} -> {path} is not readable (permission denied)",
            where=where,
            hint=f"make it readable for this user (chmod a+r {path}) or point {field} at a copy",
        )
    return path


def check_traffic(spec) -> None:
    if spec.traffic.path:
        check_file(spec.traffic.path, "traffic.path", f"{spec.traffic.kind} traffic file")


def check_model(spec, *, weights: bool) -> None:
    """A local model folder (builtins are built on first use): it exists, has tokenizer.json, and weights
    when an engine will load them (an external server has its own)."""
    from specs.models import BUILTINS, is_builtin

    if is_builtin(spec.model.path):
        return
    folder = paths.resolve_path(spec.model.path)
    where = field_location("model.path")
    fix = (
        "set model.path to a local checkpoint folder (config.json, tokenizer.json, *.safetensors) or to one of "
        + ", ".join("builtin:" + b for b in BUILTINS)
    )
    if not folder.is_dir():
        state = "is a file, not a model folder" if folder.exists() else "does not exist"
        raise UsageError(f"model.path {spec.model.path!r} -> {folder} {state}", where=where, hint=fix)
    if not os.access(folder, os.R_OK | os.X_OK):
        raise UsageError(
            f"model folder {folder} is not readable (permission denied)",
            where=where,
            hint="make it readable for this user, or point model.path at a copy",
        )
    if not (folder / "tokenizer.json").is_file():
        raise UsageError(
            f"model folder {folder} has no tokenizer.json (prompts are counted with it)", where=where, hint=fix
        )
    if weights and managed(spec) and not any(any(folder.glob(p)) for p in WEIGHT_PATTERNS):
        raise UsageError(f"model folder {folder} has no weights ({', '.join(WEIGHT_PATTERNS)})", where=where, hint=fix)


def managed(spec) -> bool:
    """Whether the product starts this endpoint's engine (its adapter says; an unknown kind is reported
    elsewhere, as a file:line error)."""
    from engines.registry import ADAPTERS

    cls = ADAPTERS.get(spec.engine.kind)
    return cls is None or cls.manages_process


def check_engine(spec, sets: list[str] | None = None, unsets: list[str] | None = None, *, here: bool = True) -> None:
    """The engine arguments launch (known flags), and, when the engine will run on this host (``here``),
    its fixed port is free or the external server answers. Nothing is started."""
    import difflib

    from engines import adapter_for, attach_external
    from engines.base import EngineError
    from engines.process import port_is_free

    try:
        adapter = adapter_for(spec, 0, Path("."))
    except EngineError as exc:  # e.g. engine.url is not an http(s) URL
        raise UsageError(
            str(exc),
            where=field_location("engine.url" if spec.engine.url else "engine.kind"),
            hint="fix the endpoint's engine block",
        ) from None
    if not adapter.manages_process:  # a server that runs elsewhere: it must answer
        if here:
            try:
                attach_external(spec, health_timeout_s=5.0)
            except EngineError as exc:
                raise UsageError(
                    str(exc).splitlines()[0],
                    where=field_location("engine.url"),
                    hint=f"start the server, or point engine.url at a running OpenAI-compatible server "
                    f"(GET {adapter.base_url}{adapter.health_path} must answer 200)",
                ) from None
        return
    problems = adapter.validate_flags(list(spec.engine.args))
    if problems:
        from_cli = {
            "--" + item.removeprefix("engine.").split("=", 1)[0].lstrip("-").replace("_", "-"): item
            for item in sets or []
        }
        flags = [p.split()[0] for p in problems]
        places = [f"--set {from_cli[f]}" for f in flags if f in from_cli]
        if any(f not in from_cli for f in flags):
            places.append(field_location("engine.args"))
        known = sorted(getattr(adapter, "known_flags", None) or ())
        flag_file = paths.REPO_ROOT / "engines" / "data" / f"{spec.engine.kind}_flags.txt"
        listed = f" ({flag_file.relative_to(paths.REPO_ROOT)} lists them)" if flag_file.exists() else ""
        guesses = [
            f"{m[0]} (not {f})"
            for f, p in zip(flags, problems)
            if "not a known" in p
            for m in [difflib.get_close_matches(f, known, n=1)]
            if m
        ]
        raise UsageError(
            "; ".join(problems),
            where=", ".join(places),
            hint=(f"did you mean {', '.join(guesses)}? " if guesses else "")
            + f"use flags {spec.engine.kind} knows{listed}; nothing was started",
        )
    if here and spec.engine.port and not port_is_free(spec.engine.port):
        raise UsageError(
            f"engine.port {spec.engine.port}: 127.0.0.1:{spec.engine.port} is already in use",
            where=field_location("engine.port"),
            hint="stop what listens there, or leave engine.port out so a free port is picked",
        )


def preflight(spec, sets=None, unsets=None, *, pool: bool = True, engine: str | None = "here") -> None:
    """What the command will read and start, checked before anything runs or is written: the traffic file
    and tokenizer (``pool``), the weights and engine arguments (``engine``: "here" when it runs on this
    host, "later" for an experiment unit that may run elsewhere). Endpoints of a remote launcher are left
    to their launcher's own checks (credentials first)."""
    if spec.launcher.kind != "local":
        return
    if engine == "here":
        from launchers import host_problem

        problem = host_problem(spec)  # a GPU endpoint on a CPU host: before the traffic, weights or engine
        if problem is not None:
            raise LaunchRefused(problem)
    if pool:
        check_traffic(spec)
    if pool or engine:
        check_model(spec, weights=engine == "here")
    if engine:
        check_engine(spec, sets, unsets, here=engine == "here")
