"""Engine patches a proposal authored: a unified diff against the engine's installed Python source, made
into a runtime overlay for the one candidate that proposed it, never written into the installed engine.

A subagent may propose a code change where no flag reaches the cause. The diff is applied with
``git apply`` to copies of the files it touches, taken from the engine's own environment, in a folder
named by the content hash of the diff, the engine and its version
(``$AUTORESEARCH_HOME/overlays/authored-<hash>``): the patched files, the diff, and the in-engine loader
(``engines/patches/_authored/sitecustomize.py``) that makes the engine's processes import the patched
modules instead of the installed ones. The candidate asks for it like any overlay
(``--overlay authored-<hash>``), so the overlay's content hash is part of the experiment's identity, the
correctness check compares its outputs with the reference's, and the review shows the diff.

Running code a model wrote is opt-in (``campaign.authored_patches``). Only Python files inside the
engine's own packages may change; a diff that leaves them, deletes or renames a file, does not apply to the
installed source, or leaves a file that does not compile is refused with the reason (``PatchError``): the
candidate is ``invalid`` before any engine starts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import PurePosixPath, Path

PREFIX = "authored-"
LOADER = Path(__file__).resolve().parent / "patches" / "_authored" / "sitecustomize.py"
NULL = "/dev/null"


class PatchError(ValueError):
    """A proposed patch that cannot be applied to the installed engine (the reason is the message)."""


@dataclass(frozen=True)
class FileChange:
    """One file of a diff: its path inside the engine's packages, and whether the diff creates it."""

    path: str
    created: bool


def root() -> Path:
    """Where authored overlays live: under the project's home, never in the checkout or the engine."""
    from specs.paths import home

    return home() / "overlays"


def overlay_name(diff: str, engine_kind: str, engine_version: str) -> str:
    """The content-addressed name of a diff applied to one engine version."""
    digest = hashlib.sha256("\0".join((engine_kind, engine_version, diff)).encode()).hexdigest()
    return PREFIX + digest[:16]


def _strip(path: str, level: int) -> str:
    return path if path == NULL else "/".join(path.split("/")[level:])


def file_changes(diff: str, packages: tuple[str, ...]) -> tuple[list[FileChange], int]:
    """The files ``diff`` changes and the prefix level ``git apply -p`` needs; PatchError naming the
    first file the product will not patch."""
    lines = diff.splitlines()
    headers = [
        (lines[i][4:].split("\t")[0].strip(), lines[i + 1][4:].split("\t")[0].strip())
        for i in range(len(lines) - 1)
        if lines[i].startswith("--- ") and lines[i + 1].startswith("+++ ")
    ]
    if not headers or not any(line.startswith("@@") for line in lines):
        raise PatchError("the patch is not a unified diff (no ---/+++ file headers with @@ hunks)")
    named = [p for pair in headers for p in pair if p != NULL]
    level = 1 if named and all(p.startswith(("a/", "b/")) for p in named) else 0
    changes: list[FileChange] = []
    for old, new in headers:
        old, new = _strip(old, level), _strip(new, level)
        if new == NULL:
            raise PatchError(f"the patch deletes {old}; a patch may change or add Python files, not delete them")
        if old not in (NULL, new):
            raise PatchError(f"the patch renames {old} to {new}; a patch may change or add files, not rename them")
        parts = PurePosixPath(new).parts
        if PurePosixPath(new).is_absolute() or ".." in parts or not parts:
            raise PatchError(f"{new!r} is not a path inside the engine's packages")
        if parts[0] not in packages:
            raise PatchError(f"{new} is outside the engine's packages ({', '.join(packages)}): patch only those")
        if not new.endswith(".py"):
            raise PatchError(f"{new} is not a Python source file; only the engine's Python code can be patched")
        changes.append(FileChange(new, created=old == NULL))
    return changes, level


@functools.lru_cache(maxsize=16)
def installed_root(python: str, package: str) -> Path:
    """The folder holding ``package`` in the engine's environment (its site-packages), asked of the
    engine's own interpreter (the engine lives in its own venv)."""
    code = (
        "import importlib.util, os, sys\n"
        "spec = importlib.util.find_spec(sys.argv[1])\n"
        "print(os.path.dirname(list(spec.submodule_search_locations)[0]) if spec else '')\n"
    )
    try:
        out = subprocess.run([python, "-c", code, package], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PatchError(f"cannot ask {python} where {package} is installed: {exc}") from None
    found = out.stdout.strip()
    if out.returncode != 0 or not found:
        raise PatchError(f"{package} is not installed for {python}: nothing to patch")
    return Path(found)


def _per_file(diff: str) -> list[str]:
    """The diff cut into one piece per file (at each ---/+++ header pair): recounting a hunk runs to the
    first line that is not context, removal or addition, and the next file's ``--- a/...`` is a removal."""
    lines = diff.splitlines(keepends=True)
    starts = [i for i in range(len(lines) - 1) if lines[i].startswith("--- ") and lines[i + 1].startswith("+++ ")]
    return ["".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)])]


def _apply(diff: str, work: Path, level: int) -> None:
    """``git apply`` in ``work`` (copies only; never a repository), a file at a time: hunk counts
    recounted, since a model's hunk headers are often off by a line; context must match exactly."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(work.parent), "LC_ALL": "C"}
    cmd = ["git", "apply", f"-p{level}", "--recount", "--whitespace=nowarn", "-"]
    for piece in _per_file(diff):
        piece = piece if piece.endswith("\n") else piece + "\n"
        try:
            done = subprocess.run(cmd, cwd=work, input=piece, capture_output=True, text=True, env=env, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PatchError(f"git apply could not run: {exc}") from None
        if done.returncode != 0:
            said = "; ".join(line.strip() for line in done.stderr.splitlines() if line.strip())[:400]
            raise PatchError(f"the patch does not apply to the installed engine: {said or 'git apply failed'}")


def materialize(diff: str, engine_kind: str, engine_version: str, python: str, packages: tuple[str, ...]) -> str:
    """Build (once) the overlay that applies ``diff`` to the engine ``python`` runs; its name.

    Content-addressed: the same diff on the same engine version is the same overlay, built once."""
    if not packages:
        raise PatchError(f"the {engine_kind} adapter names no source packages: its code cannot be patched")
    changes, level = file_changes(diff, packages)
    name = overlay_name(diff, engine_kind, engine_version)
    folder = root() / name
    if (folder / "meta.json").is_file():
        return name
    root().mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=".build-", dir=root()))
    try:
        files = build / "files"
        for change in changes:
            installed = installed_root(python, change.path.split("/")[0]) / change.path
            target = files / change.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if change.created:
                continue
            if not installed.is_file():
                raise PatchError(
                    f"{change.path} is not in the installed {engine_version}: the patch is for another version"
                )
            shutil.copyfile(installed, target)
        _apply(diff, files, level)
        for change in changes:
            source = (files / change.path).read_text()
            try:
                compile(source, change.path, "exec")
            except SyntaxError as exc:
                raise PatchError(f"the patched {change.path} does not compile: {exc.msg} (line {exc.lineno})") from None
        modules = {_module(c.path): c.path for c in changes}
        meta = {"engine": engine_kind, "engine_version": engine_version, "modules": modules}
        (build / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        (build / "patch.diff").write_text(diff)
        shutil.copyfile(LOADER, build / "sitecustomize.py")
        try:
            build.rename(folder)
        except OSError:  # built meanwhile by another campaign: the same content
            if not (folder / "meta.json").is_file():
                raise
        return name
    finally:
        shutil.rmtree(build, ignore_errors=True)


def _module(path: str) -> str:
    parts = list(PurePosixPath(path).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def find(name: str):
    """The authored overlay called ``name`` (an engines.overlays.Overlay), or None."""
    from engines.overlays import Overlay

    if not name.startswith(PREFIX):
        return None
    folder = root() / name
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return Overlay(
        name,
        frozenset({meta["engine"]}),
        "patch",
        f"a patch a proposal authored against {meta['engine_version']}: {', '.join(sorted(meta['modules']))}",
        root=root(),
    )


def patch_text(name: str) -> str | None:
    """The diff behind an authored overlay (for the review), or None when it is not one."""
    path = root() / name / "patch.diff"
    return path.read_text() if name.startswith(PREFIX) and path.is_file() else None


def named_args(spec, args: list[str], diff: str) -> list[str]:
    """``args`` with the (content-addressed) overlay argument of ``diff`` on ``spec``'s engine, built or not:
    what names a patch candidate (its experiment id, whether it was tried)."""
    from engines.overlays import FLAG
    from engines.registry import adapter_class

    cls = adapter_class(spec.engine.kind)
    version = cls.version_for(spec) if cls is not None else "unknown"
    return [*args, FLAG, overlay_name(diff, spec.engine.kind, version)]


def candidate_args(spec, args: list[str], diff: str, allowed: bool) -> tuple[list[str], str | None]:
    """``args`` with the overlay that applies ``diff`` to ``spec``'s engine, and why it cannot run (None
    when it can). The overlay argument is there even when the patch is refused, so the experiment is
    named by its patch."""
    from engines.overlays import FLAG
    from engines.registry import adapter_class
    from specs.paths import engine_python

    cls = adapter_class(spec.engine.kind)
    version = cls.version_for(spec) if cls is not None else "unknown"
    named = named_args(spec, args, diff)
    if not allowed:
        return named, (
            "the proposal carries an engine patch and this campaign does not run authored patches "
            "(set authored_patches: true in the campaign to run them, each in its candidate's engine only)"
        )
    if cls is None or not cls.manages_process or spec.launcher.kind != "local":
        return named, "an authored patch needs an engine this host starts (a local launcher of a managed engine)"
    python = spec.engine.python or str(engine_python())
    try:
        built = materialize(diff, spec.engine.kind, version, python, cls.source_packages)
    except PatchError as exc:
        return named, f"patch does not apply: {exc}"
    return [*args, FLAG, built], None
