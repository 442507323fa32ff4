"""Benchmark: build a replay pool from one million generated request-log lines.

Measures ingest + redaction + tokenisation (+ prefix-cache simulation and Parquet writing) of
``replay.build.build_from_request_log`` end to end: requests per second, seconds per stage and
peak resident memory of the building process. The log is generated first in a child process
(its memory is not counted) and reused if it already exists.

    .venv/bin/python benchmarks/replay_build_1m.py [--lines 1000000] [--out benchmarks/results/replay_build_1m.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _generate(path: Path, lines: int, seed: int) -> float:
    if path.exists() and path.with_suffix(".done").exists():
        return 0.0
    start = time.perf_counter()
    code = f"from replay import sample_logs; sample_logs.write_sample({str(path)!r}, {lines}, {seed})"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    path.with_suffix(".done").write_text(str(lines))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--work", type=Path, default=Path("/tmp/autoresearch-replay-bench"))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "replay_build_1m.txt")
    args = parser.parse_args()

    from specs.config import TrafficSpec
    from dagster_project.lib import load_definitions
    from specs.models import ensure_model
    from replay.build import build_pool

    args.work.mkdir(parents=True, exist_ok=True)
    log = args.work / f"support_logs_{args.lines}.jsonl"
    gen_s = _generate(log, args.lines, args.seed)
    spec = load_definitions(REPO / "definitions").endpoint("support_smollm")
    spec = spec.model_copy(update={"traffic": TrafficSpec(kind="request_log", path=str(log))})
    tok_dir = ensure_model(spec.model.path)
    load_before = os.getloadavg()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    build = build_pool(spec, tok_dir, args.work / "pool")
    wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    load_after = os.getloadavg()
    s = build.stats
    lines = [
        f"replay pool build benchmark ({time.strftime('%Y-%m-%d %H:%M:%S %Z')})",
        f"machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"load average before {load_before[0]:.1f} / after {load_after[0]:.1f} (other work shares these cores)",
        f"input: {log.name}, {log.stat().st_size / 2**30:.2f} GiB, {args.lines} lines (generated in {gen_s:.0f} s; 0 = reused)",
        f"tokenizer: {tok_dir.name} (endpoint support_smollm), prefix-cache block {build.lineage['cache_block_tokens']} tokens",
        f"rows: {s['rows']}, malformed: {len(build.malformed)}",
        f"wall: {wall:.1f} s  ->  {s['rows'] / wall:.0f} requests/s (ingest + redaction + tokenisation + prefix sim + Parquet)",
        "stages (s): "
        + ", ".join(
            f"{k.removesuffix('_s')}={s[k]:.1f}"
            for k in ("ingest_s", "redact_s", "tokenise_s", "prefix_sim_s", "write_s")
        ),
        f"peak RSS of the building process: {peak_mib:.0f} MiB (before build: {rss_before / 1024:.0f} MiB)",
        f"pool: {build.pool_path.stat().st_size / 2**20:.1f} MiB Parquet (zstd)",
        "redacted: " + ", ".join(f"{k}={v}" for k, v in sorted(build.redaction_counts.items())),
        f"stand-ins whose token count differs from the value's: {s.get('redaction_token_mismatches', 'n/a')}",
        f"command: .venv/bin/python benchmarks/replay_build_1m.py --lines {args.lines} --seed {args.seed}",
        "",
        build.fidelity.table(),
    ]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
