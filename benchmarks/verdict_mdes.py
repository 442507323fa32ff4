"""The main job's headline MDE per run: the median of its verdicts' MDEs with their range, as recorded.

    .venv/bin/python benchmarks/verdict_mdes.py --run run25=benchmarks/results/main_job_2core_calibrated_run25 ... \\
        --out benchmarks/results/verdict_mdes

Each run folder holds the campaign's state (``state.json.gz``, or a ``*.state.json``); every better / same /
worse verdict in it kept the MDE it was judged with. Nothing is judged again: the figures are those the
verdicts stated (research.verdict_mde, the same code as the review's). The floors' MDEs are inputs and are
left out. The median is over the runs' medians, with their range, never a best run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from research.state import CampaignState  # noqa: E402
from research.verdict_mde import verdict_mdes  # noqa: E402

TARGET = 0.10  # the main job's target_mde


def load_state(folder: Path) -> CampaignState:
    packed = folder / "state.json.gz"
    text = gzip.open(packed).read() if packed.exists() else next(folder.glob("*.state.json")).read_text()
    return CampaignState.model_validate(json.loads(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", required=True, help="NAME=FOLDER with the run's state")
    parser.add_argument("--out", type=Path, help="write OUT.md and OUT.json")
    args = parser.parse_args(argv)
    runs = []
    for spec in args.run:
        name, folder = spec.split("=", 1)
        mdes = verdict_mdes(load_state(Path(folder)), TARGET)
        runs.append({"run": name, "folder": folder, **mdes.model_dump()})
    medians = [r["median"] for r in runs if r["median"] is not None]
    lines = [
        "# The main job's verdict MDEs, as recorded",
        "",
        "| run | verdicts | median MDE | range | target 10% |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        stated = [v["mde"] for v in r["verdicts"] if v["mde"] is not None]
        span = f"{r['low']:.1%}-{r['high']:.1%}" if stated else "-"
        med = f"{r['median']:.1%}" if stated else "not measured"
        reached = {True: "reached", False: "not reached", None: "-"}[r["reached"]]
        lines.append(f"| {r['run']} | {len(stated)} of {len(r['verdicts'])} | {med} | {span} | {reached} |")
    if medians:
        lines += [
            "",
            f"Over {len(medians)} run(s): median of the runs' medians {median(medians):.1%} "
            f"(range {min(medians):.1%}-{max(medians):.1%}).",
        ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps({"target": TARGET, "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
