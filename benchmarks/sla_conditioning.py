"""How well an SLA target pins capacity: the fraction of each step's samples over each limit, per sweep.

    .venv/bin/python benchmarks/sla_conditioning.py --db .autoresearch/memory.duckdb [--endpoint support_smollm]

A capacity is the rate where a target's over-limit fraction reaches its allowance (5% for a p95).
When that fraction rises steeply with the rate, the crossing is sharp and a few requests place it;
when it is nearly flat, a one-request change moves the crossing a long way, and no verdict on that
target can be precise without many more requests. This prints, for every recorded sweep of the
endpoint, each step's rate and its over-limit count / samples per target (TTFT and E2E per request,
ITL per inter-token gap), the fitted crossing and its interval, and how far the limiting target's
fraction moves between the lowest and highest rate tested.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from loadgen.capacity import estimate  # noqa: E402
from loadgen.results import StepResult  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--endpoint")
    args = ap.parse_args()
    import duckdb

    con = duckdb.connect(args.db, read_only=True)
    where = "where endpoint = ?" if args.endpoint else ""
    rows = con.execute(
        f"select run_id, kind, engine_args, steps from runs {where} order by started_at",
        [args.endpoint] if args.endpoint else [],
    ).fetchall()
    for run_id, kind, engine_args, steps_json in rows:
        steps = sorted(
            (StepResult.model_validate(s) for s in json.loads(steps_json or "[]")), key=lambda s: s.target_rate
        )
        steps = [s for s in steps if s.sla_samples]
        if not steps:
            continue
        fit = estimate(steps)
        print(f"{run_id} ({kind}): {' '.join(engine_args or [])}")
        print(f"  fitted capacity {fit.describe() if fit else 'none'}")
        for s in steps:
            cells = []
            for target in ("ttft", "itl", "e2e"):
                if f"{target}_over" in s.sla_samples:
                    over, n = sum(s.sla_samples[f"{target}_over"]), sum(s.sla_samples[f"{target}_n"])
                    cells.append(f"{target} {int(over)}/{int(n)} ({over / n:.1%})" if n else f"{target} -")
            print(f"  {s.target_rate:6g} req/s  " + "  ".join(cells))
        if fit and fit.limiting in ("ttft", "itl", "e2e"):
            lo, hi = steps[0].sla_samples, steps[-1].sla_samples
            frac = [sum(x[f"{fit.limiting}_over"]) / max(1, sum(x[f"{fit.limiting}_n"])) for x in (lo, hi)]
            print(
                f"  limiting {fit.limiting}: over-limit fraction {frac[0]:.1%} at {steps[0].target_rate:g} req/s, "
                f"{frac[1]:.1%} at {steps[-1].target_rate:g} req/s "
                f"(x{steps[-1].target_rate / steps[0].target_rate:.1f} the rate)"
            )


if __name__ == "__main__":
    main()
