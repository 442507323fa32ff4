"""Applies the runtime overlays an engine process was started with (engines/overlays.py).

``AUTORESEARCH_OVERLAYS`` lists overlay folders (os.pathsep-separated); each one's ``sitecustomize.py``
runs here, in order, in this process only. Python imports only the first ``sitecustomize`` on its
path, so this loader then runs the next one after it (an environment's own, if any). An overlay that
raises stops the engine with its reason: a change the product cannot apply is never silently dropped.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _run(path: str, name: str) -> None:
    with open(path) as handle:
        code = compile(handle.read(), path, "exec")
    exec(code, {"__name__": name, "__file__": path})  # noqa: S102 - the product's own overlay files


def _apply() -> None:
    folders = [f for f in os.environ.get("AUTORESEARCH_OVERLAYS", "").split(os.pathsep) if f]
    for folder in folders:
        path = os.path.join(folder, "sitecustomize.py")
        try:
            _run(path, "autoresearch_overlay")
        except SystemExit:
            raise
        except BaseException as exc:  # noqa: BLE001 - named, then the engine stops
            raise SystemExit(f"[autoresearch overlay] {os.path.basename(folder)} failed to apply: {exc!r}") from exc
    skip = {_HERE, *(os.path.abspath(f) for f in folders)}
    for entry in sys.path:
        folder = os.path.abspath(entry or ".")
        candidate = os.path.join(folder, "sitecustomize.py")
        if folder not in skip and os.path.isfile(candidate):
            _run(candidate, "sitecustomize_next")
            return


_apply()
