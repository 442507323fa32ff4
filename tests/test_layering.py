"""The layers read top down (docs/architecture.md, "Layers"): static, from the source, no imports run.

bottom  specs: the YAML's specs, the replay pool's schema, paths, engine arguments, builtin models
domain  engines, replay, loadgen, research, memory_db, launchers: plain typed modules, no Dagster
app     autoresearch (workflows, engine control, the experiment unit), assets, sensors, dagster_project;
        autoresearch.cli on top of them all (it loads the defs folder and runs Dagster jobs)

A module imports only its own layer or lower ones, at module level or inside a function (a deferred
import may defer a heavy dependency, never hide an upward one); no module-level imports form a cycle,
and no imports at all (deferred ones included) form a cycle between packages.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER_OF = {
    "specs": 0,
    **dict.fromkeys(["engines", "replay", "loadgen", "research", "memory_db", "launchers"], 1),
    **dict.fromkeys(["autoresearch", "dagster_project", "assets", "sensors"], 2),
}
PACKAGES = list(LAYER_OF)
LAYERS = {0: "bottom", 1: "domain", 2: "app"}


#: the command line is the top of the app: it runs Dagster jobs and loads the defs folder, while the rest
#: of ``autoresearch`` (workflows, engine control, the experiment unit) is what the CLI and the assets run.
#: Its error messages (a field's file:line, read through the defs folder) and its checks before a command
#: runs are the command line's own.
TOP = (
    "autoresearch.cli",
    "autoresearch.cli_compare",
    "autoresearch.cli_errors",
    "autoresearch.cli_preflight",
    "autoresearch.__main__",
)


def package(module: str) -> str:
    return "autoresearch.cli" if module in TOP else module.split(".")[0]


def layer(module: str) -> int:
    return LAYER_OF[module.split(".")[0]]


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
                    names = [
                        f"{child.module}.{a.name}" if f"{child.module}.{a.name}" in mods else child.module
                        for a in child.names
                    ]
                else:
                    visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
                    continue
                for imported in {t for t in map(target, names) if t and t != name}:
                    out.append((name, imported, child.lineno, in_function))

        visit(ast.parse(file.read_text(encoding="utf-8")), False)
    return out


def test_no_module_imports_a_higher_layer():
    mods = modules()
    upward = [
        f"{mods[a].relative_to(REPO)}:{line}: {LAYERS[layer(a)]} module imports {b} ({LAYERS[layer(b)]})"
        for a, b, line, _ in imports(mods)
        if layer(b) > layer(a)
    ]
    assert not upward, "\n".join(upward)


def cycles_in(edges: dict[str, Iterable[str]]) -> list[list[str]]:
    """For each node on a cycle, one path from it back to itself (a depth-first search per node)."""
    cycles = []
    for start in edges:
        stack, seen = [(b, [start, b]) for b in edges[start]], set()
        while stack:
            node, path = stack.pop()
            if node == start:
                cycles.append(path)
                break
            if node in seen:
                continue
            seen.add(node)
            stack.extend((b, path + [b]) for b in edges[node])
    return cycles


def test_no_module_level_import_cycles():
    mods = modules()
    edges: dict[str, set[str]] = {name: set() for name in mods}
    for a, b, _, in_function in imports(mods):
        if not in_function:
            edges[a].add(b)
    cycles = [" -> ".join(path) for path in cycles_in(edges)]
    assert not cycles, "\n".join(cycles)


def test_no_package_cycles():
    """Package to package, every import counts (a deferred one too): the packages form a graph that
    reads in one direction, so each can be understood, tested and replaced from the bottom up."""
    mods = modules()
    edges: dict[str, dict[str, str]] = {p: {} for p in [*PACKAGES, "autoresearch.cli"]}
    for a, b, line, _ in imports(mods):
        if package(a) != package(b):
            edges[package(a)].setdefault(package(b), f"{mods[a].relative_to(REPO)}:{line} imports {b}")
    cycles = [
        " -> ".join(path) + " (" + "; ".join(edges[x][y] for x, y in zip(path, path[1:])) + ")"
        for path in cycles_in(edges)
    ]
    assert not cycles, "\n".join(cycles)


def test_the_bottom_package_imports_no_other_package():
    mods = modules()
    found = [
        f"{mods[a].relative_to(REPO)}:{line} imports {b}"
        for a, b, line, _ in imports(mods)
        if package(a) == "specs" and package(b) != "specs"
    ]
    assert not found, "\n".join(found)


def test_domain_and_bottom_layers_do_not_import_dagster():
    mods = modules()
    found = []
    for name, file in mods.items():
        if layer(name) == 2:
            continue
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            found += [f"{file.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n.split(".")[0] == "dagster"]
    assert not found, "\n".join(found)
