"""The in-engine half of an authored patch (engines/authored.py): copied into each authored overlay.

Runs in the engine's processes only (through engines/patches/_loader). It puts a finder first on
``sys.meta_path`` that loads the patched copies of the modules named in ``meta.json`` from this overlay's
``files/`` folder instead of the installed ones; every other module, including the rest of a patched
module's package, still comes from the installed engine.
"""

import importlib.machinery
import importlib.util
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "meta.json")) as _handle:
    _META = json.load(_handle)
_FILES = {module: os.path.join(_HERE, "files", *path.split("/")) for module, path in _META["modules"].items()}


class AuthoredPatchFinder:
    """Patched modules from this overlay; None (the next finder) for every other module."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        origin = _FILES.get(name)
        if origin is None:
            return None
        if os.path.basename(origin) == "__init__.py":  # a package: its other modules stay where they are
            installed = importlib.machinery.PathFinder.find_spec(name, path)
            locations = list(installed.submodule_search_locations or []) if installed else []
            return importlib.util.spec_from_file_location(name, origin, submodule_search_locations=locations)
        return importlib.util.spec_from_file_location(name, origin)


sys.meta_path.insert(0, AuthoredPatchFinder())
print(
    f"[autoresearch overlay] {os.path.basename(_HERE)}: patched {', '.join(sorted(_FILES))} "
    f"({_META['engine_version']})",
    file=sys.stderr,
    flush=True,
)
