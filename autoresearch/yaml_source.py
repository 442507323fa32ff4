"""Load YAML with line numbers so validation errors can point at ``file:line field``.

PyYAML's composed node tree knows where every key and value sits; we walk it once
to build a map from a pydantic error location (a tuple of keys and indexes) to a line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True)
class DefinitionIssue:
    """One problem in one YAML file, located precisely enough to fix it."""

    file: Path
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class DefinitionError(ValueError):
    """Raised when one or more YAML definitions are invalid; lists every issue found."""

    def __init__(self, issues: list[DefinitionIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


def _line_map(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            # An error on a key (unknown field) is best shown at the key's own line.
            out[path + (key,)] = key_node.start_mark.line + 1
            _line_map(value_node, path + (key,), out)
            out[path + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, path + (index,), out)
    return out


def load_yaml(path: Path) -> tuple[Any, dict[tuple, int]]:
    """Parse one YAML file; return its data and a location->line map."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise DefinitionError([DefinitionIssue(Path(path), line, "", f"not valid YAML: {exc}")]) from exc
    return data, (_line_map(node) if node is not None else {})


def _nearest_line(lines: dict[tuple, int], loc: tuple) -> int:
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in lines:
            return lines[loc[:cut]]
    return 1


def validate(model: type[ModelT], data: Any, path: Path, lines: dict[tuple, int], prefix: tuple = ()) -> ModelT:
    """Validate ``data`` against ``model``; raise DefinitionError with file:line per problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        issues = []
        for err in exc.errors():
            loc = _yaml_loc(lines, prefix, tuple(err["loc"]))
            message = err["msg"]
            if err["type"] == "union_tag_invalid":  # an unknown `kind:` of a tagged block (launcher)
                tag = err["ctx"]["discriminator"].strip("'")
                loc = loc + (tag,)
                message = f"unknown {tag} {err['ctx']['tag']!r}; allowed: {err['ctx']['expected_tags']}"
            field = ".".join(str(p) for p in loc)
            if err["type"] == "extra_forbidden":
                allowed = sorted(_allowed_fields(model, tuple(err["loc"])[:-1]))
                message = f"unknown field; allowed here: {', '.join(allowed)}" if allowed else "unknown field"
            elif err["type"] == "missing":
                message = "required field is missing"
            elif err["type"] == "list_type":
                message += ' (write a YAML list, e.g. ["--max-num-seqs", "8"])'
            elif err["type"] == "string_type":
                message += ' (quote numbers and switches, e.g. "8")'
            issues.append(DefinitionIssue(Path(path), _nearest_line(lines, loc), field, message))
        raise DefinitionError(issues) from None


def _yaml_loc(lines: dict[tuple, int], prefix: tuple, loc: tuple) -> tuple:
    """The error's location as written in the YAML: pydantic inserts the tag of a tagged union
    (``launcher.modal.timeout_s``), which is no key of the file (``launcher.timeout_s``)."""
    out = prefix
    for i, part in enumerate(loc):
        if out + (part,) not in lines and i + 1 < len(loc) and out + (loc[i + 1],) in lines:
            continue
        out = out + (part,)
    return out


def _allowed_fields(model: type[BaseModel], loc: tuple) -> set[str]:
    """Field names allowed at ``loc`` inside ``model`` (best effort, for error messages)."""
    current: Any = model
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return set()
        members = _models_in(fields[part].annotation)
        if len(members) > 1 and parts:  # a tagged union: pydantic's next part is the member's tag
            tag = parts.pop(0)
            members = [m for m in members if _tag_of(m) == tag]
        current = members[0] if members else None
        if current is None:
            return set()
    fields = getattr(current, "model_fields", {})
    return {f.alias or name for name, f in fields.items()}


def _tag_of(model: type[BaseModel]) -> Any:
    kind = model.model_fields.get("kind")
    args = getattr(kind.annotation, "__args__", ()) if kind else ()
    return args[0] if args else None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or ():
        found.extend(_models_in(arg))
    return found
