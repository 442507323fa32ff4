"""How long the README's set-up takes on this machine: a clean clone of a commit, then scripts/setup.sh.

The main job's wall time counts its set-up (issue 21: no longer than 45 minutes). Each trial clones
``--ref`` into a temporary folder, runs scripts/setup.sh there (pip's download cache is shared, as on
any machine that has installed once; the environments and models are built from nothing) and removes
the clone. Nothing else engine-heavy should run meanwhile.

    python benchmarks/setup_time.py --ref HEAD --ref OLD_COMMIT --out benchmarks/results/setup_time.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def time_setup(ref: str) -> dict:
    commit = subprocess.run(["git", "rev-parse", ref], cwd=ROOT, check=True, capture_output=True, text=True)
    commit = commit.stdout.strip()
    with tempfile.TemporaryDirectory(prefix="setup_time_") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
        began = time.monotonic()
        done = subprocess.run(["bash", "scripts/setup.sh"], cwd=clone, capture_output=True, text=True)
        wall = time.monotonic() - began
        shutil.rmtree(clone, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"scripts/setup.sh at {commit[:10]} failed (exit {done.returncode}): {done.stderr[-400:]}")
    return {"ref": ref, "commit": commit[:10], "setup_s": round(wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", action="append", required=True, help="a commit to time (repeat for several)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    trials = []
    for ref in args.ref:
        trials.append(time_setup(ref))
        print(json.dumps(trials[-1]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"trials": trials}, indent=2) + "\n")


if __name__ == "__main__":
    main()
