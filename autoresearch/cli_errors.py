"""How an error reaches the user: one ``error: WHAT (WHERE)`` line and a ``hint:`` line.

The running command records the definitions and endpoint it works on (``COMMAND_CONTEXT``), so that an
error about a field names its ``file:line`` (:func:`field_location`); :func:`describe_error` maps any
exception that reached ``main`` to (message, where, hint, exit code): 2 for bad input the user can fix,
1 for a bug (``--debug`` shows its traceback).
"""

from __future__ import annotations

from pathlib import Path

from specs import paths
from launchers import LaunchRefused


class UsageError(Exception):
    """A user-facing error: printed as ``error: MESSAGE (WHERE)`` plus ``hint: HINT``, without a traceback."""

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.where, self.hint = where, hint


# The definitions and endpoint the running command works on: where an error's field is written.
COMMAND_CONTEXT: dict = {}


def field_location(field: str, name: str | None = None) -> str:
    """``FILE:LINE attributes.FIELD`` of an endpoint's field (the nearest written ancestor's line when the
    field is not written), or just the field when the declaration's file is not known."""
    definitions, name = COMMAND_CONTEXT.get("definitions"), name or COMMAND_CONTEXT.get("endpoint")
    source = definitions.sources.get(name) if definitions is not None and name else None
    if not source:
        return field
    try:
        from dagster_project.lib.folder import _line

        line = _line(Path(source), ["attributes", *field.split(".")])
    except Exception:  # noqa: BLE001 - a location is a nicety; the message stands without it
        line = None
    return f"{source}:{line} attributes.{field}" if line else f"{source} attributes.{field}"


def busy_message(exc: Exception) -> str:
    """memory_db's MemoryBusyError in one line: which file, and who holds it when DuckDB says."""
    import re

    text = str(exc)
    held = re.search(
        r"Could not set lock on file \"(?P<file>[^\"]+)\": Conflicting lock is held in (?P<who>\S+) "
        r"\(PID (?P<pid>\d+)\)",
        text,
    )
    if held:
        return (
            f"research memory {held['file']} is held open by another process "
            f"({Path(held['who']).name}, PID {held['pid']})"
        )
    return f"research memory busy: {text.split('; analysts', 1)[0]}"


BUSY_HINT = (
    "another process holds it read-write (an analyst's `duckdb` shell, a notebook): close it, or open it "
    "with `duckdb -readonly` so the product can keep writing; --wait SECONDS waits longer"
)


def pydantic_summary(exc: Exception) -> str:
    """A ValidationError as ``field: message`` of its first error (and how many more); other errors as is."""
    errors = getattr(exc, "errors", None)
    try:
        found = errors() if callable(errors) else []
    except Exception:  # noqa: BLE001
        found = []
    if not found:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    first = found[0]
    field = ".".join(str(p) for p in first.get("loc", ())) or "(top level)"
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{field}: {first.get('msg', 'invalid')}{more}"


def _field_of(text: str) -> str | None:
    """The endpoint field a message is about (the adapters and readers name the YAML field they read)."""
    for field in ("traffic.path", "model.path", "engine.url", "engine.port", "engine.args", "engine.python"):
        if field in text:
            return field
    return None


def describe_error(exc: BaseException) -> tuple[str, str | None, str | None, int]:
    """(message, where, hint, exit code) for an exception that reached main(): 2 for bad input the
    user can fix (a file, a field, a flag, a server), 1 for anything else (a bug: --debug shows it)."""
    import importlib

    def kinds(module: str, *names: str) -> tuple[type, ...]:
        try:
            mod = importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a module this host lacks raised nothing of its own
            return ()
        return tuple(getattr(mod, n) for n in names if hasattr(mod, n))

    text = str(exc)
    field = _field_of(text)
    where = field_location(field) if field else None
    if isinstance(exc, UsageError):
        return text, exc.where, exc.hint, 2
    if isinstance(exc, LaunchRefused):
        return text, None, None, 2
    if isinstance(exc, kinds("memory_db.locking", "MemoryBusyError")):
        return busy_message(exc), None, BUSY_HINT, 2
    if isinstance(exc, kinds("engines.base", "EngineError")):
        return (
            text,
            where or (field_location("engine") if COMMAND_CONTEXT.get("endpoint") else None),
            (
                ("the engine log tail above says why; " if "engine log" in text else "")
                + "fix the endpoint's engine block or the --set overrides (`autoresearch validate` checks the YAML)"
            ),
            2,
        )
    if isinstance(exc, kinds("replay.ingest", "MalformedSourceError")):
        return (
            text,
            field_location("traffic.path") if COMMAND_CONTEXT.get("endpoint") else None,
            ("fix or drop the bad lines named above, or raise traffic.max_malformed_fraction if they are expected"),
            2,
        )
    if isinstance(exc, kinds("replay.ingest", "SourceFormatError")):
        return (
            text,
            field_location("traffic.kind") if COMMAND_CONTEXT.get("endpoint") else None,
            (
                "set traffic.kind to the file's format (request_log, azure, mooncake, sample) or point traffic.path "
                "at a file of that kind"
            ),
            2,
        )
    if isinstance(exc, kinds("research.llm_agents", "LLMNotConfigured")):
        return text, "--proposer", "configure the model in the environment, or use --proposer rules", 2
    if isinstance(exc, kinds("specs.models", "ModelUnavailable")):
        return (
            text,
            field_location("model.path") if COMMAND_CONTEXT.get("endpoint") else None,
            ("set model.path to a local checkpoint folder or a builtin: model; scripts/setup.sh builds the builtins"),
            2,
        )
    if isinstance(exc, kinds("duckdb", "Error")):
        return (
            f"research memory: {text.splitlines()[0] if text else type(exc).__name__}",
            None,
            ("check the file named above is this project's research memory (--db, AUTORESEARCH_MEMORY_DB)"),
            2,
        )
    if isinstance(exc, kinds("pydantic", "ValidationError")):
        return (
            f"invalid {getattr(exc, 'title', 'input')}: {pydantic_summary(exc)}",
            where,
            ("fix the field named above (`autoresearch validate` checks the YAML definitions)"),
            2,
        )
    if isinstance(exc, kinds("httpx", "HTTPError")):
        url = getattr(getattr(exc, "request", None), "url", None) if _has_request(exc) else None
        return (
            f"could not reach {url or 'the server'}: {type(exc).__name__}: {text}",
            where,
            ("check the server runs and the URL (engine.url, AUTORESEARCH_LLM_BASE_URL) is right"),
            2,
        )
    if isinstance(exc, OSError):
        name = exc.filename if exc.filename is not None else None
        message = f"{name}: {exc.strerror}" if name is not None and exc.strerror else text or type(exc).__name__
        if field is None and name is not None and COMMAND_CONTEXT.get("endpoint"):
            field = _field_of_path(str(name))
            where = field_location(field) if field else None
        hint = {
            FileNotFoundError: "check the path exists (a relative path in YAML is relative to the repository root)",
            IsADirectoryError: "a file is expected there, not a folder",
            NotADirectoryError: "a folder is expected there, not a file",
            PermissionError: "make it readable (and writable, for outputs) for this user",
        }.get(type(exc), "check the path and the disk")
        return message, where, hint, 2
    first = text.splitlines()[0] if text else ""
    return (
        f"{type(exc).__name__}: {first}" if first else type(exc).__name__,
        where,
        "this looks like a bug; rerun with --debug for the traceback",
        1,
    )


def _has_request(exc) -> bool:
    try:
        return exc.request is not None  # httpx raises RuntimeError when none was set
    except RuntimeError:
        return False


def _field_of_path(name: str) -> str | None:
    """Which endpoint field names the file ``name`` (so an OSError on it points at that line)."""
    definitions, endpoint = COMMAND_CONTEXT.get("definitions"), COMMAND_CONTEXT.get("endpoint")
    spec = definitions.endpoints.get(endpoint) if definitions is not None and endpoint else None
    if spec is None:
        return None
    for field, value in (("traffic.path", spec.traffic.path), ("model.path", spec.model.path)):
        if value and (
            name == str(value)
            or Path(name) == paths.resolve_path(str(value))
            or str(paths.resolve_path(str(value))) in name
        ):
            return field
    return None
