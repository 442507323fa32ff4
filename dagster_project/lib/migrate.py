"""Move YAML of the old layout (files under definitions/ with top-level ``endpoint:``, ``campaign:``
or ``recipe:`` keys) into defs.yaml files of the component types: ``autoresearch migrate OLD NEW``.

The body of each declaration is kept as written, comments included; only its top-level key becomes
``type: dagster_project.lib.<Type>`` plus ``attributes:`` (so its lines move down by one).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from specs.config import DefinitionError, DefinitionIssue

TYPES = {"endpoint": "Endpoint", "campaign": "Campaign", "recipe": "DiagnosticRecipe"}
_TOP = re.compile(r"^(?P<key>[A-Za-z_]+):[ \t]*(#.*)?$", re.M)


def migrate_text(text: str, source: Path = Path("<text>")) -> list[tuple[str, str, str]]:
    """(folder, name, defs.yaml text) per declaration in ``text``; folder is endpoints/campaigns/recipes."""
    starts = list(_TOP.finditer(text))
    out, begin = [], 0
    for index, top in enumerate(starts):
        line = text.count("\n", 0, top.start()) + 1
        kind = top["key"]
        if kind not in TYPES:
            raise DefinitionError(
                [
                    DefinitionIssue(
                        source,
                        line,
                        kind,
                        "expected endpoint:, campaign: or recipe: "
                        "(one declaration per key; a list under endpoints: is not migrated)",
                    )
                ]
            )
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        body_end = _comment_start(text, top.end(), end)  # comments right above the next key belong to it
        head = text[begin : top.start()]
        body = text[top.end() : body_end]
        name = (yaml.safe_load(body) or {}).get("name")
        if not name:
            raise DefinitionError([DefinitionIssue(source, line, f"{kind}.name", "required to name its folder")])
        out.append((f"{kind}s", name, f"{head}type: dagster_project.lib.{TYPES[kind]}\nattributes:{body}"))
        begin = body_end
    return out


def _comment_start(text: str, start: int, end: int) -> int:
    """Where the trailing run of top-level comment lines before ``end`` begins."""
    lines = text[start:end].splitlines(keepends=True)
    cut = len(lines)
    while cut and (lines[cut - 1].startswith("#") or not lines[cut - 1].strip()):
        cut -= 1
    return start + sum(len(x) for x in lines[:cut])


def write_declarations(folder: Path, text: str, source: Path = Path("<text>")) -> list[Path]:
    """Write each declaration of old-layout ``text`` as ``folder/<kind>s/<name>/defs.yaml``."""
    written = []
    for kind, name, body in migrate_text(text, source):
        file = Path(folder) / kind / name / "defs.yaml"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(body, encoding="utf-8")
        written.append(file)
    return written


def migrate_folder(old: Path, new: Path) -> list[tuple[Path, Path]]:
    """Every ``*.yaml``/``*.yml`` under ``old`` into ``new``; returns (old file, new file) pairs."""
    moved = []
    for file in sorted(p for p in Path(old).rglob("*") if p.suffix in (".yaml", ".yml")):
        for written in write_declarations(new, file.read_text(encoding="utf-8"), file):
            moved.append((file, written))
    return moved
