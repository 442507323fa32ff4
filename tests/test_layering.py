"""The layers read top down (docs/architecture.md, "Layers"): static, from the source, no imports run.

bottom  autoresearch.{config,paths,models,model_builders,engine_args}: specs, paths, models
domain  engines, replay, loadgen, research, memory_db, launchers: plain typed modules, no Dagster
app     autoresearch.{cli,workflows,engine_control,experiment_unit}, dagster_project, assets, sensors

A module imports only its own layer or lower ones, at module level or inside a function (a deferred
import may defer a heavy dependency, never hide an upward one), and no module-level imports form a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ["autoresearch", "engines", "replay", "loadgen", "research", "memory_db", "launchers", "dagster_project",
            "assets", "sensors"]
BOTTOM = {"autoresearch", "autoresearch.config", "autoresearch.paths", "autoresearch.models",
          "autoresearch.model_builders", "autoresearch.engine_args"}
APP = ("autoresearch.", "dagster_project", "assets", "sensors")
LAYERS = {0: "bottom", 1: "domain", 2: "app"}


def layer(module: str) -> int:
    if module in BOTTOM:
        return 0
    return 2 if module.startswith(APP) else 1


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for file in (REPO / package).rglob("*.py"):
            name = ".".join(file.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found[name] = file
    return found


def imports(mods: dict[str, Path]) -> list[tuple[str, str, int, bool]]:
    """(importer, imported project module, line, inside a function) for every import statement."""
    out = []

    def target(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    for name, file in mods.items():
        def visit(node, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import):
                    names = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                    # `from pkg import sub` depends on pkg.sub when it is a module, else on pkg
                    names = [f"{child.module}.{a.name}" if f"{child.module}.{a.name}" in mods else child.module
                             for a in child.names]
                else:
                    visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
                    continue
                for imported in {t for t in map(target, names) if t and t != name}:
                    out.append((name, imported, child.lineno, in_function))

        visit(ast.parse(file.read_text(encoding="utf-8")), False)
    return out


def test_no_module_imports_a_higher_layer():
    mods = modules()
    upward = [f"{mods[a].relative_to(REPO)}:{line}: {LAYERS[layer(a)]} module imports {b} ({LAYERS[layer(b)]})"
              for a, b, line, _ in imports(mods) if layer(b) > layer(a)]
    assert not upward, "\n".join(upward)


def test_no_module_level_import_cycles():
    mods = modules()
    edges: dict[str, set[str]] = {name: set() for name in mods}
    for a, b, _, in_function in imports(mods):
        if not in_function:
            edges[a].add(b)
    cycles = []
    for start in mods:  # a cycle through `start`: a path from one of its imports back to it
        stack, seen = [(b, [start, b]) for b in edges[start]], set()
        while stack:
            node, path = stack.pop()
            if node == start:
                cycles.append(" -> ".join(path))
                break
            if node in seen:
                continue
            seen.add(node)
            stack.extend((b, path + [b]) for b in edges[node])
    assert not cycles, "\n".join(cycles)


def test_domain_and_bottom_layers_do_not_import_dagster():
    mods = modules()
    found = []
    for name, file in mods.items():
        if layer(name) == 2:
            continue
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            found += [f"{file.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n.split(".")[0] == "dagster"]
    assert not found, "\n".join(found)
