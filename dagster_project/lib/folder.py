"""Load a defs folder (``definitions/`` or ``$AUTORESEARCH_DEFINITIONS``) the way Dagster does.

The code location, the drift sensors and the ``autoresearch`` CLI all read the same ``defs.yaml``
files through Dagster's component loader, so a file valid for ``dg check defs`` is valid for the
CLI and the other way round. ``load_definitions`` turns Dagster's errors into ``DefinitionError``
(file, line, field, message) and reports every file's problems, not only the first file's.
"""

from __future__ import annotations

import hashlib
import re
import sys
import types
from pathlib import Path

import yaml
from dagster.components.core.component_tree import ComponentTree
from dagster_shared.yaml_utils import parse_yaml_with_source_position
from pydantic import BaseModel, ValidationError

from specs import config, paths
from specs.config import DefinitionError, DefinitionIssue, DefinitionSet
from dagster_project.lib.components import Declaration, declared

SHIPPED = paths.REPO_ROOT / "definitions"


def defs_tree(folder: Path | str) -> ComponentTree:
    """Dagster's component tree over ``folder``: the project's own defs module for the shipped
    folder (as ``dg`` loads it), else a module made for the folder (a test's or a user's copy)."""
    folder = Path(folder).resolve()
    if folder == SHIPPED.resolve():
        return ComponentTree.for_project(paths.REPO_ROOT)
    name = "autoresearch_defs_" + hashlib.sha256(str(folder).encode()).hexdigest()[:12]
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        module.__file__, module.__path__ = None, [str(folder)]
        sys.modules[name] = module
    return ComponentTree.from_module(module, project_root=paths.REPO_ROOT)


def load_definitions(folder: Path | str) -> DefinitionSet:
    """Every endpoint, campaign and recipe declared under ``folder``; DefinitionError lists every problem."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DefinitionError([DefinitionIssue(folder, 1, "", "not a folder of defs.yaml files")])
    _reject_old_layout(folder)
    tree, components, issues = defs_tree(folder), [], []
    for file in sorted(folder.rglob("defs.yaml")):
        try:
            component = tree.load_component(file.parent.relative_to(folder))
        except Exception as exc:  # noqa: BLE001 - every load error becomes a file:line issue
            issues.extend(_issues(exc, file))
            continue
        if isinstance(component, Declaration):
            components.append(component)
    if issues:
        raise DefinitionError(issues)
    return declared(components)


def _reject_old_layout(folder: Path) -> None:
    """YAML files of the old layout (top-level ``endpoint:`` keys) would be silently ignored: refuse them."""
    old = [
        f
        for f in sorted(folder.rglob("*.y*ml"))
        if f.name != "defs.yaml"
        and f.suffix in (".yaml", ".yml")
        and re.search(r"^(endpoints?|campaigns?|recipes?):", f.read_text(encoding="utf-8"), re.M)
    ]
    if old:
        raise DefinitionError(
            [
                DefinitionIssue(
                    f,
                    1,
                    "",
                    "old layout: each endpoint, campaign or recipe is now a "
                    'defs.yaml of its own (see docs/architecture.md, "Declaring '
                    'endpoints")',
                )
                for f in old
            ]
        )


_AT = re.compile(r"^(?P<field>.*) at (?P<file>.+):(?P<line>\d+)$")


def _issues(exc: BaseException, file: Path) -> list[DefinitionIssue]:
    """Dagster's load error as file:line issues: its pydantic errors carry the field and position."""
    for cause in _chain(exc):
        if isinstance(cause, DefinitionError):
            return cause.issues
        if isinstance(cause, yaml.YAMLError):
            mark = getattr(cause, "problem_mark", None)
            return [DefinitionIssue(file, mark.line + 1 if mark else 1, "", f"not valid YAML: {cause}")]
        if isinstance(cause, ValidationError):
            model, issues = getattr(config, cause.title, None), []
            for err in cause.errors():
                match = _AT.match(str(err["loc"][0])) if len(err["loc"]) == 1 else None
                field, where, line = (
                    (match["field"], Path(match["file"]), int(match["line"]))
                    if match
                    else (".".join(str(p) for p in err["loc"]), file, 1)
                )
                head, *parts = field.split(".")
                written, _ = _walk(model, parts) if model else (parts, None)
                if err["type"] == "union_tag_invalid":
                    written.append(err["ctx"]["discriminator"].strip("'"))
                if written != parts or err["type"] == "union_tag_invalid":  # Dagster looked up pydantic's path
                    line = _line(where, [head, *written]) or line
                issues.append(DefinitionIssue(where, line, ".".join([head, *written]), _message(err, model, parts)))
            return issues
    innermost = list(_chain(exc))[-1]
    line = re.search(rf"{re.escape(str(file))}:(\d+)", str(innermost)) or re.search(r"line (\d+)", str(innermost))
    return [DefinitionIssue(file, int(line.group(1)) if line else 1, "", f"{type(innermost).__name__}: {innermost}")]


def _line(file: Path, path: list[str]) -> int | None:
    """The line of ``path`` in ``file`` (the nearest existing ancestor's)."""
    try:
        tree = parse_yaml_with_source_position(file.read_text(encoding="utf-8"), str(file)).source_position_tree
    except (OSError, yaml.YAMLError):
        return None
    position, _ = tree.lookup_closest_and_path([int(p) if p.isdigit() else p for p in path], None)
    return position.start.line


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _message(err: dict, model: type[BaseModel] | None, parts: list[str]) -> str:
    """Pydantic's message, made actionable for the common YAML mistakes."""
    if err["type"] == "union_tag_invalid":  # an unknown `kind:` of a tagged block (launcher)
        ctx = err["ctx"]
        return f"unknown {ctx['discriminator'].strip(chr(39))} {ctx['tag']!r}; allowed: {ctx['expected_tags']}"
    if err["type"] == "extra_forbidden":
        _, inside = _walk(model, parts[:-1]) if model else ([], None)
        allowed = sorted(inside.model_fields) if inside else []
        return f"unknown field; allowed here: {', '.join(allowed)}" if allowed else "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "list_type":
        return err["msg"] + ' (write a YAML list, e.g. ["--max-num-seqs", "8"])'
    if err["type"] == "string_type":
        return err["msg"] + ' (quote numbers and switches, e.g. "8")'
    return err["msg"]


def _walk(model: type[BaseModel], parts: list[str]) -> tuple[list[str], type[BaseModel] | None]:
    """``parts`` as written in the YAML (pydantic puts a tagged union's tag in the path:
    ``launcher.modal.timeout_s`` is ``launcher.timeout_s`` in the file), and the model they end in."""
    current, parts, written = model, list(parts), []
    while parts:
        part = parts.pop(0)
        written.append(part)
        field = getattr(current, "model_fields", {}).get(part) if current else None
        members = _models_in(field.annotation) if field else []
        if len(members) > 1 and parts:  # a tagged union: the next part is the member's tag
            tag = parts.pop(0)
            members = [
                m for m in members if "kind" in m.model_fields and tag in m.model_fields["kind"].annotation.__args__
            ]
        current = members[0] if len(members) == 1 else None
    return written, current


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) or () for m in _models_in(arg)]
