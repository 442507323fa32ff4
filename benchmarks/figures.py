"""The README's and the results index's figures, generated from the result files: medians with ranges.

    .venv/bin/python benchmarks/figures.py           # rewrite benchmarks/results/README.md and the README's table
    .venv/bin/python benchmarks/figures.py --check   # exit 1 where either differs from what the files say

Each :class:`Result` names a benchmark's current result files, the command that made them, and reads its
headline from them (never typed by hand, never a best trial). The README's "Results" table sits between
two markers and is replaced whole; ``tests/test_figures.py`` runs ``--check``, so a figure that no longer
follows from its files fails the suite.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
BEGIN, END = "<!-- results:begin (benchmarks/figures.py) -->", "<!-- results:end -->"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def spread(values: list[float], fmt: Callable[[float], str] = pct) -> str:
    """Median with its range: '12.3% (8.1-20.4%)'; a single value alone."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return "none recorded"
    if values[0] == values[-1]:
        return fmt(values[0]) + (f" in all {len(values)}" if len(values) > 1 else "")
    return f"{fmt(median(values))} (range {fmt(values[0])} to {fmt(values[-1])})"


@dataclass(frozen=True)
class Result:
    key: str
    what: str  # what it measures
    command: str
    files: tuple[str, ...]  # under benchmarks/results/, the current result (a folder or files)
    host: str
    headline: Callable[[], str]


# -- headlines ---------------------------------------------------------------------------------------


def main_job_runs() -> list[Path]:
    return sorted((RESULTS / "main_job").glob("run*/state.json.gz"), key=lambda p: p.parent.name)


def main_job() -> str:
    from research.campaign.outcome import judged_gain
    from research.state import CampaignState
    from research.verdict_mde import verdict_mdes

    runs = main_job_runs()
    if not runs:
        return "no run recorded yet"
    mdes, gains, walls, best = [], [], [], []
    for packed in runs:
        state = CampaignState.model_validate(json.loads(gzip.open(packed).read()))
        mdes.append(verdict_mdes(state, 0.10).median)
        best.append(state.working.capacity if state.working else None)
        gain = judged_gain(state)
        gains.append(gain.gain if gain else None)
        run = json.loads((packed.parent / "run.json").read_text())
        walls.append(run["wall_min"])
    adopted = [g for g in gains if g is not None]
    gain_text = spread(adopted, lambda g: f"x{g:.2f}") if adopted else "none adopted"
    return (
        f"over {len(runs)} run{'s' if len(runs) != 1 else ''}: verdict MDE {spread(mdes)} (each run's median; "
        f"target 10%); total gain judged {gain_text} in {len(adopted)} of {len(runs)}; best capacity sustained "
        f"{spread(best, lambda c: f'{c:.2f} req/s')}; wall {spread(walls, lambda m: f'{m:.1f} min')}"
    )


def harness_power() -> str:
    doc = json.loads((RESULTS / "harness_power.json").read_text())
    cells = [c for c in doc["cells"] if c["instrument"] == "simulated" and c["mode"] == "virtual"]
    aa = next(c for c in cells if c["planted_effect"] == 0)
    at = {c["planted_effect"]: c for c in cells}
    powers = ", ".join(f"+{100 * e:g}% {at[e]['power']:.0%}" for e in sorted(at) if e > 0 and "power" in at[e])
    wrong = aa["trials"] - aa["verdicts"]["same"]
    return (
        f"A/A: {wrong} false of {aa['trials']}; power {powers}; "
        f"MDE median {pct(aa['mde_median'])} ({aa['trials']} trials a cell)"
    )


def h200_power() -> str:
    mdes, same, n = [], 0, 0
    for path in sorted((RESULTS / "gpu_power").glob("power_aa*.json")):
        verdict = json.loads(path.read_text()).get("verdict") or {}
        if verdict.get("mde") is not None:
            mdes.append(verdict["mde"])
            n += 1
            same += verdict.get("verdict") == "same"
    return f"A/A `same` in {same} of {n} recorded trials; their MDE {spread(mdes)}"


def verdict_coverage() -> str:
    doc = json.loads((RESULTS / "verdict_coverage.json").read_text())
    product = [row for row in doc["table"] if row["variant"] == "product"]
    cover = [row["coverage"] for row in product]
    widths = [row["median_half_width"] for row in product]
    return (
        f"A/A coverage of the 95% interval {spread(cover, lambda c: f'{c:.0%}')} over "
        f"{sum(r['pairs'] for r in product)} pairs; half-width {spread(widths)}"
    )


def vllm_gpu() -> str:
    path = RESULTS / "vllm_gpu_adapter.json"
    if not path.exists():
        return "not yet run on a GPU (docs/gpu.md)"
    doc = json.loads(path.read_text())
    checks = doc["checks"]
    card = doc["card"].split(",")[0]
    failed = [name for name, c in checks.items() if not c["ok"]]
    text = f"{len(checks) - len(failed)} of {len(checks)} adapter checks pass on one {card}"
    text += f" (failed: {', '.join(failed)})" if failed else ""
    power = RESULTS / "vllm_gpu_power.json"
    if power.exists():
        cells = json.loads(power.read_text())["cells"]
        text += "; verdict power: " + (
            ", ".join(f"planted {pct(c['planted_effect'])}: {c['verdict']} (MDE {pct(c['mde'])})" for c in cells)
            or "no verdict yet"
        )
    return text


def replay_build() -> str:
    text = (RESULTS / "replay_build_1m.txt").read_text()
    rate = re.search(r"->\s+([\d,]+) requests/s", text).group(1)
    return f"{rate} log lines/s into a redacted, tokenised pool (1,000,000 lines, 2 shared cores)"


RESULTS_INDEX: tuple[Result, ...] = (
    Result(
        "main_job",
        "the README's main job on a fresh 2-core clone: its verdicts' MDEs, its judged gain, its wall time",
        ".venv/bin/python benchmarks/main_job.py --out benchmarks/results/main_job/runNN",
        ("main_job/",),
        "2 shared cores, no GPU",
        main_job,
    ),
    Result(
        "harness_power",
        "the harness's own error rates on the simulated engine of known capacity (A/A false verdicts, power)",
        ".venv/bin/python benchmarks/harness_power.py --trials 40 --step-s 12 --floor-rounds 16 --max-rounds 6 --jobs 2",
        ("harness_power.json", "harness_power.md"),
        "2 shared cores (virtual time)",
        harness_power,
    ),
    Result(
        "verdict_coverage",
        "whether each verdict adjustment pays: A/A coverage of the 95% interval on recorded launches",
        ".venv/bin/python benchmarks/verdict_coverage.py --run runNN=DIR ... --out benchmarks/results/verdict_coverage",
        ("verdict_coverage.json", "verdict_coverage.md"),
        "2 shared cores",
        verdict_coverage,
    ),
    Result(
        "vllm_gpu",
        "vLLM 0.24 on one GPU: the adapter's checks and verdict power on an 8B-shaped endpoint",
        "python3 benchmarks/gpu_vllm.py adapter|power --out $OUT (GPU machine), then report",
        ("vllm_gpu_adapter.json", "vllm_gpu_power.json", "vllm_gpu.md"),
        "one H100 or H200",
        vllm_gpu,
    ),
    Result(
        "h200_power",
        "verdict power of `transformers serve` on one H200 (A/A trials)",
        "python benchmarks/gpu_power.py run --pair aa|planted --out $OUT (GPU machine), then report",
        ("gpu_power/",),
        "one H200",
        h200_power,
    ),
    Result(
        "replay_build",
        "building a replay pool from production logs: ingest, PII redaction, tokenisation",
        ".venv/bin/python benchmarks/replay_build_1m.py --lines 1000000 --seed 11",
        ("replay_build_1m.txt",),
        "2 shared cores",
        replay_build,
    ),
)


# -- the two documents --------------------------------------------------------------------------------


def last_change(result: Result) -> tuple[str, str]:
    """(date, commit) of the last commit that touched the result's files; ('', '') outside git."""
    paths = [str(RESULTS / f) for f in result.files]
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%cs %h", "--", *paths], cwd=REPO, capture_output=True, text=True
        ).stdout.split()
    except OSError:
        out = []
    return (out[0], out[1]) if len(out) == 2 else ("", "")


def readme_table(headlines: dict[str, str]) -> list[str]:
    rows = ["| benchmark | headline | result |", "|---|---|---|"]
    for r in RESULTS_INDEX:
        link = f"[`{r.files[0]}`](benchmarks/results/{r.files[0]})"
        rows.append(f"| {r.what} | {headlines[r.key]} | {link} |")
    return rows


def index_markdown(headlines: dict[str, str]) -> str:
    md = [
        "# Results index",
        "",
        "One current result per benchmark; what it replaced lives in git. Headlines are read from the files by "
        "`benchmarks/figures.py` (medians with ranges), which also writes the README's table.",
        "",
        "| benchmark | what it measures | command | last changed | host | headline | files |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in RESULTS_INDEX:
        date, commit = last_change(r)
        files = ", ".join(f"[`{f}`]({f})" for f in r.files)
        md.append(f"| {r.key} | {r.what} | `{r.command}` | {date} {commit} | {r.host} | {headlines[r.key]} | {files} |")
    return "\n".join(md) + "\n"


def with_table(readme: str, table: list[str]) -> str:
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md: the markers {BEGIN!r} and {END!r} are missing: put them where the table goes")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + "\n".join(table) + "\n" + END + tail


def stale_figures(readme: str, index: str, headlines: dict[str, str]) -> list[str]:
    """The headlines that the README's table or the index does not state as the files say."""
    table = readme.split(BEGIN, 1)[-1].split(END, 1)[0] if BEGIN in readme else ""
    return [h for h in headlines.values() if h not in table or h not in index]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="say which figures no longer follow from the files")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    headlines = {r.key: r.headline() for r in RESULTS_INDEX}
    readme_path, index_path = REPO / "README.md", RESULTS / "README.md"
    readme = with_table(readme_path.read_text(), readme_table(headlines))
    if args.check:
        index = index_path.read_text() if index_path.exists() else ""
        stale = stale_figures(readme_path.read_text(), index, headlines)
        for h in stale:
            print(f"not in README.md or benchmarks/results/README.md as the files say: {h}", file=sys.stderr)
        if stale:
            print("run: .venv/bin/python benchmarks/figures.py", file=sys.stderr)
        return 1 if stale else 0
    readme_path.write_text(readme)
    index_path.write_text(index_markdown(headlines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
