"""The README's main job on a fresh clone, recorded: what a new user's `scripts/main.sh` does and shows.

    .venv/bin/python benchmarks/main_job.py --out benchmarks/results/main_job/run26

Clones this checkout's HEAD into a temporary folder (nothing of this checkout's environments or research
memory comes along), runs `scripts/main.sh` there with each output line stamped by the wall clock from
the clone's first command, and keeps what the run left: the log, the review, its load curves, the
campaign's state (gzipped) and `run.json` (commit, date, host cores, wall time, exit status). Machine
paths are scrubbed (benchmarks/scrub_paths.py). `benchmarks/verdict_mdes.py` reads the runs' states for
the main job's headline MDE. One engine-heavy job at a time on the host: run nothing else beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.scrub_paths import scrub  # noqa: E402

CAMPAIGN = "support_smollm_default"


def run(out: Path, keep_clone: bool = False) -> int:
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    clone = Path(tempfile.mkdtemp(prefix="main-job-")) / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    began, started_at = time.monotonic(), dt.datetime.now(dt.timezone.utc)
    log_path = out / "main_job.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            ["bash", "scripts/main.sh"],
            cwd=clone,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith(("AUTORESEARCH_", "VIRTUAL_ENV"))},
        )
        for line in proc.stdout:
            m, s = divmod(int(time.monotonic() - began), 60)
            stamped = f"[+{m:02d}:{s:02d}] {line.rstrip()}"
            print(stamped, flush=True)
            log.write(stamped + "\n")
        rc = proc.wait()
    wall_s = time.monotonic() - began
    home = clone / ".autoresearch" / "campaigns" / CAMPAIGN
    review = home / f"{CAMPAIGN}.review"
    for name in ("review.md", "load_curves.png", "aa_evidence.md"):
        if (review / name).exists():
            shutil.copy2(review / name, out / name)
    state = next(home.glob("*.state.json"), None)
    if state is not None:
        with gzip.open(out / "state.json.gz", "wt") as f:
            f.write(scrub(state.read_text()))
    (out / "run.json").write_text(
        json.dumps(
            {
                "command": "scripts/main.sh (on a fresh clone: benchmarks/main_job.py)",
                "commit": commit.stdout.strip(),
                "started_at": started_at.isoformat(timespec="seconds"),
                "host_cores": os.cpu_count(),
                "wall_min": round(wall_s / 60, 1),
                "exit_status": rc,
            },
            indent=1,
        )
        + "\n"
    )
    for path in out.iterdir():
        if path.suffix in {".md", ".log", ".json"}:
            path.write_text(scrub(path.read_text()))
    if not keep_clone:
        shutil.rmtree(clone.parent, ignore_errors=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the run's folder under benchmarks/results/")
    parser.add_argument("--keep-clone", action="store_true", help="leave the temporary clone for inspection")
    args = parser.parse_args(argv)
    return run(args.out, args.keep_clone)


if __name__ == "__main__":
    sys.exit(main())
