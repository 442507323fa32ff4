"""Judge the rounds of kept vLLM CPU power trials again, round by round, and say where their noise comes from.

    .venv/bin/python benchmarks/rejudge_trials.py .autoresearch/power_rounds_itl500 --soft 0,0.2,0.3,0.5

Reads what ``benchmarks/harness_power.py --instrument vllm_cpu --keep DIR`` kept (``DIR/e<effect>-t<k>/
r<i>-<A|B>.json`` and the requests of each step beside them). Per planted effect and bandwidth of the
smoothed counts: each round's paired log difference log(capacity B / capacity A), their mean and sd
(the between-round noise a verdict pools), and the paired bootstrap's median standard error of one round
(the part that more requests would shrink). Then per sweep, the engine's decode speed (median time per
output token after the first) at each step: how much the engine itself ran faster or slower from one
engine start, or one minute of the host, to the next.

Last, the same rounds judged with the engine's service rate from queue growth (loadgen.queue_rate:
mu = lam / (1 + k), k the TTFT's growth per second of arrivals in a step that queued), look by look with
loadgen.verdict.judge_service_rates and the product's prior: what each trial's verdict would have been.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.capacity import estimate, sla_samples  # noqa: E402
from loadgen.queue_rate import service_rate, ttft_growth  # noqa: E402
from loadgen.noise_prior import PRIOR_DF, PRIOR_SD  # noqa: E402
from loadgen.verdict import judge_service_rates  # noqa: E402
from loadgen.results import RequestRecord, SweepResult  # noqa: E402
from specs.config import SLASpec  # noqa: E402


def rounds(trial: Path):
    """(round index, {side: sweep}) for each round both of whose sides were kept."""
    i = 0
    while (trial / f"r{i}-A.json").exists() and (trial / f"r{i}-B.json").exists():
        yield i, {s: SweepResult.model_validate_json((trial / f"r{i}-{s}.json").read_text()) for s in "AB"}
        i += 1


def step_frames(trial: Path, i: int, side: str, sweep: SweepResult) -> list[pl.DataFrame]:
    return [pl.read_parquet(trial / f"r{i}-{side}" / Path(st.records_path).name) for st in sweep.steps]


def refitted(sweep: SweepResult, frames: list[pl.DataFrame], soft: float):
    sla = SLASpec.model_validate(sweep.sla)
    return [
        st.model_copy(
            update={"sla_samples": sla_samples([RequestRecord.model_validate(r) for r in f.to_dicts()], sla, soft=soft)}
        )
        for st, f in zip(sweep.steps, frames)
    ]


def with_growth(sweep: SweepResult, frames: list[pl.DataFrame]) -> list:
    """The sweep's steps with their TTFT growth measured from their requests (kept before it was recorded)."""
    return [
        st.model_copy(update={"ttft_growth": ttft_growth([RequestRecord.model_validate(r) for r in f.to_dicts()])})
        for st, f in zip(sweep.steps, frames)
    ]


def rejudged(a_rounds: list[list], b_rounds: list[list], max_rounds: int = 6) -> str:
    """The trial judged again with the service rate, look by look as the sequential rule would have."""
    stats = None
    for k in range(1, len(a_rounds) + 1):
        stats = judge_service_rates(
            a_rounds[:k],
            b_rounds[:k],
            max_rounds=max_rounds,
            final=k == len(a_rounds),
            prior_var=PRIOR_SD**2,
            prior_df=PRIOR_DF,
        )
        if stats.verdict != "undecided":
            break
    return stats.sentence() if stats else "no rounds"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kept", type=Path)
    ap.add_argument("--soft", default="0,0.2,0.3,0.5")
    args = ap.parse_args()
    trials = sorted(p for p in args.kept.glob("e*-t*") if p.is_dir())
    data = [(t, i, sw, {s: step_frames(t, i, s, sw[s]) for s in "AB"}) for t in trials for i, sw in rounds(t)]
    print(f"# {len(trials)} trials, {len(data)} rounds with both sides kept ({args.kept.name})")
    for effect in sorted({t.name.split("-")[0] for t, *_ in data}):
        for soft in [float(h) for h in args.soft.split(",")]:
            diffs, ses, lost = [], [], 0
            for t, i, sw, frames in data:
                if not t.name.startswith(effect + "-"):
                    continue
                a = estimate(refitted(sw["A"], frames["A"], soft), boot=200, seed=i)
                b = estimate(refitted(sw["B"], frames["B"], soft), boot=200, seed=i)
                if not a or not b or a.censored or b.censored:
                    lost += 1  # a crossing outside the tested rates: no difference to take
                    continue
                diffs.append(math.log(b.capacity / a.capacity))
                ses.append(float(np.std(b.draws - a.draws)))
            d = np.array(diffs)
            print(
                f"planted {effect[1:]:<4} soft {soft:<4} rounds {len(d)} (+{lost} censored)  "
                f"mean {d.mean():+.3f}  sd {d.std(ddof=1):.3f}  bootstrap se of a round {np.median(ses):.3f}"
            )
    print("# decode ms per token (median of each step), per sweep: A | B")
    for t, i, sw, frames in data:
        speed = {
            s: " ".join(
                f"{((f['e2e_s'] - f['ttft_s']) / (f['output_tokens'] - 1)).median() * 1000:4.0f}" for f in frames[s]
            )
            for s in "AB"
        }
        print(f"{t.name:<9} r{i}  {speed['A']:<26}| {speed['B']}")
    print("# the engine's service rate from queue growth (req/s): per round A, B, log(B / A); the trial judged again")
    for effect in sorted({t.name.split("-")[0] for t, *_ in data}):
        all_diffs = []
        for trial in [t for t in trials if t.name.startswith(effect + "-")]:
            a_rounds, b_rounds = [], []
            for t, i, sw, frames in data:
                if t == trial:
                    a_rounds.append(with_growth(sw["A"], frames["A"]))
                    b_rounds.append(with_growth(sw["B"], frames["B"]))
                    a, b = service_rate(a_rounds[-1]), service_rate(b_rounds[-1])
                    if a and b and a.rate and b.rate:
                        all_diffs.append(math.log(b.rate / a.rate))
                        print(f"{t.name:<9} r{i}  {a.rate:.3f} {b.rate:.3f} {all_diffs[-1]:+.3f}")
            print(f"{trial.name}: {rejudged(a_rounds, b_rounds)}")
        d = np.array(all_diffs)
        print(f"planted {effect[1:]:<4} service rate  rounds {len(d)}  mean {d.mean():+.3f}  sd {d.std(ddof=1):.3f}")


if __name__ == "__main__":
    main()
