"""Judge recorded rounds (benchmarks/cpu_rounds.py) again with other estimators, on the same engine time.

    .venv/bin/python benchmarks/rejudge_rounds.py .autoresearch/cpu_rounds

Per estimator (the SLA samples each step is fitted on, and which rates are used):
the A/A pairs' per-round differences (their spread is the between-run noise), the paired
bootstrap's standard error of one round, and the planted pairs' effects.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs.config import SLASpec  # noqa: E402
from loadgen.capacity import estimate, sla_samples  # noqa: E402
from loadgen.results import RequestRecord, SweepResult  # noqa: E402


def load(out: Path) -> tuple[dict, dict[tuple[int, str], SweepResult]]:
    design = json.loads((out / "design.json").read_text())
    sweeps = {}
    for p in sorted(out.glob("r*-*.json")):
        i, side = p.stem[1:].split("-")
        sweeps[(int(i), side)] = SweepResult.model_validate_json(p.read_text())
    return design, sweeps


def records(out: Path, key: tuple[int, str], step) -> list[RequestRecord]:
    path = out / f"r{key[0]}-{key[1]}" / Path(step.records_path).name
    return [RequestRecord.model_validate(r) for r in pl.read_parquet(path).to_dicts()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--soft", default="0,0.1,0.2,0.3")
    args = ap.parse_args()
    design, sweeps = load(args.out)
    sla = SLASpec.model_validate(design["sla"])
    rounds = sorted({i for i, _ in sweeps})
    recs = {(key, k): records(args.out, key, st) for key, sw in sweeps.items() for k, st in enumerate(sw.steps)}
    # per-step over fractions, as seen
    for key in sorted(sweeps):
        sw = sweeps[key]
        cells = []
        for st in sw.steps:
            s = st.sla_samples
            frac = {t: sum(s[f"{t}_over"]) / max(1, sum(s[f"{t}_n"])) for t in ("ttft", "itl", "e2e")}
            cells.append(f"{st.target_rate:g}:" + "/".join(f"{frac[t]:.2f}" for t in ("ttft", "itl", "e2e")))
        print(key, " ".join(cells))
    grids = {"all": None, "default5": {0.6, 0.8, 1.0, 1.2, 1.4}}
    for soft in [float(h) for h in args.soft.split(",")]:
        for gname, factors in grids.items():

            def steps_of(key):
                sw = sweeps[key]
                out = []
                for k, st in enumerate(sw.steps):
                    f = round(st.target_rate / 2.8, 2)
                    if factors is not None and not any(abs(f - g) < 0.02 for g in factors):
                        continue
                    out.append(st.model_copy(update={"sla_samples": sla_samples(recs[(key, k)], sla, soft=soft)}))
                return out

            def pair(ka, kb, seed):
                ea, eb = estimate(steps_of(ka), seed=seed), estimate(steps_of(kb), seed=seed)
                if not ea or not eb or ea.censored or eb.censored:
                    return None
                return math.log(eb.capacity / ea.capacity), float(np.std(eb.draws - ea.draws)), ea, eb

            aa = [pair((i, "U1"), (i, "U2"), i) for i in rounds if (i, "U2") in sweeps and (i, "U1") in sweeps]
            pl_ = [pair((i, "S"), (i, "U1"), i) for i in rounds if (i, "S") in sweeps and (i, "U1") in sweeps]
            aa = [p for p in aa if p]
            pl_ = [p for p in pl_ if p]
            d = [p[0] for p in aa]
            print(
                f"soft {soft:<4} grid {gname:<8} A/A d {np.round(d, 3).tolist()} sd {np.std(d, ddof=1) if len(d) > 1 else float('nan'):.3f}"
                f" boot se {np.median([p[1] for p in aa]) if aa else float('nan'):.3f} | planted d {np.round([p[0] for p in pl_], 3).tolist()}"
                f" boot se {np.median([p[1] for p in pl_]) if pl_ else float('nan'):.3f} | caps U1 "
                f"{[round(p[2].capacity, 2) for p in aa]} limiting {[p[2].limiting for p in aa]}"
            )


if __name__ == "__main__":
    main()
