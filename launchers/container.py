"""What runs inside a remote container: the same experiment entry point as on any host.

No Modal import here: this module is the body of the Modal function (launchers.modal_app) and is
plain Python, so it is the same code whatever launcher carried it to the GPU.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

EXPERIMENT_ROOT = "/tmp/autoresearch-experiment"  # scratch space in the container (not the Volume)


def experiment_argv(root: str = EXPERIMENT_ROOT) -> list[str]:
    """``autoresearch experiment run SPEC.json --out DIR``: the one entry point of an experiment."""
    return ["autoresearch", "experiment", "run", f"{root}/spec.json", "--out", f"{root}/out"]


def collect_files(out_dir: Path) -> dict[str, bytes]:
    """Every file under ``out_dir`` by its relative path (what comes back to the caller)."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return {}
    return {str(p.relative_to(out_dir)): p.read_bytes() for p in sorted(out_dir.rglob("*")) if p.is_file()}


def run_experiment(spec_json: str, root: str = EXPERIMENT_ROOT, env: dict[str, str] | None = None) -> dict:
    """Write the experiment spec, run the experiment unit, return its exit code and out dir files.

    The engine and the load generator both run in this container (started by the experiment unit),
    so client and server talk over loopback, as on a local host. ``env``: extra environment for the
    experiment (Dagster Pipes' bootstrap variables; never secrets)."""
    base = Path(root)
    (base / "out").mkdir(parents=True, exist_ok=True)
    (base / "spec.json").write_text(spec_json, encoding="utf-8")
    argv = experiment_argv(root)
    with open(base / "out" / "container.log", "wb") as log:
        completed = subprocess.run(
            argv, stdout=log, stderr=subprocess.STDOUT, check=False, env={**os.environ, **(env or {})}
        )
    return {"returncode": completed.returncode, "argv": argv, "files": collect_files(base / "out")}
