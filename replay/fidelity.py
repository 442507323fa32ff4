"""How closely a replay pool matches production: distances, thresholds, a table and a plot.

Both sides are reduced to a :class:`TrafficProfile` (arrivals, prompt and output lengths,
cached-prefix fraction) and compared with the same distances, so the traffic-drift sensor can
compare new production logs against a pool's profile with this module too.

Distances
- prompt / output token lengths, inter-arrival gaps, concurrency: two-sample KS statistic.
- burstiness: relative difference of the coefficient of variation of inter-arrival gaps.
- cached-prefix fraction: absolute difference (fraction of prompt tokens an unbounded prefix
  cache would serve, at the engine's block size for logs, at the trace's block size for traces).
- concurrency: in-flight requests sampled every 0.5 s under a nominal service model
  (``NOMINAL_*``): it checks that arrivals and lengths together load the server alike.

Every row has a status: ``ok``, ``FAIL``, or ``unmeasured`` when its distance cannot be computed
on the data (fewer than two values on a side, no prefix structure, all requests at one
timestamp), with the reason in its note. An unmeasured row is never ok: a blocking one fails the
check. A pool build adds a first blocking row, ``pool_requests``: at least as many distinct
requests as a step of the endpoint's capacity sweep sends (:func:`min_pool_requests`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy.stats import ks_2samp

from specs.config import FidelitySpec, SweepSpec

NOMINAL_BASE_S = 0.05
NOMINAL_PREFILL_S_PER_TOKEN = 0.0002
NOMINAL_DECODE_S_PER_TOKEN = 0.02


@dataclass
class TrafficProfile:
    """The shape of a traffic sample; arrays are per request in arrival order."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    cached_fraction: float | None = None
    cached_block: int | None = None
    logged_cached_fraction: float | None = None
    note: str = ""
    # Multi-turn sessions (replay.sessions), None for traffic without them: turns per session and
    # the think time before each later turn (seconds). Not per request: left unsorted.
    session_turns: np.ndarray | None = None
    think_s: np.ndarray | None = None

    def __post_init__(self):
        order = np.argsort(np.asarray(self.arrival_s, dtype=np.float64), kind="stable")
        self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)[order]
        self.prompt_tokens = np.asarray(self.prompt_tokens, dtype=np.int64)[order]
        self.output_tokens = np.asarray(self.output_tokens, dtype=np.int64)[order]

    def __len__(self) -> int:
        return len(self.arrival_s)

    def summary(self) -> dict:
        gaps = interarrival(self.arrival_s)
        return {
            "requests": len(self),
            "duration_s": float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0,
            "prompt_tokens_p50": _pct(self.prompt_tokens, 50),
            "prompt_tokens_p95": _pct(self.prompt_tokens, 95),
            "output_tokens_p50": _pct(self.output_tokens, 50),
            "output_tokens_p95": _pct(self.output_tokens, 95),
            "rate_rps": float(len(self) / max(self.arrival_s[-1] - self.arrival_s[0], 1e-9)) if len(self) > 1 else 0.0,
            "burstiness_cv": burstiness(gaps),
            "cached_fraction": self.cached_fraction,
            "cached_block": self.cached_block,
            "logged_cached_fraction": self.logged_cached_fraction,
        }

    def save(self, path: Path | str) -> Path:
        path = Path(path)
        meta = {k: getattr(self, k) for k in ("cached_fraction", "cached_block", "logged_cached_fraction", "note")}
        extra = {k: getattr(self, k) for k in ("session_turns", "think_s") if getattr(self, k) is not None}
        np.savez_compressed(
            path,
            arrival_s=self.arrival_s,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            meta=np.array(json.dumps(meta)),
            **extra,
        )
        return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")

    @classmethod
    def load(cls, path: Path | str) -> "TrafficProfile":
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            extra = {k: z[k] for k in ("session_turns", "think_s") if k in z.files}
            return cls(z["arrival_s"], z["prompt_tokens"], z["output_tokens"], **meta, **extra)


def _pct(a: np.ndarray, q: float) -> float | None:
    return float(np.percentile(a, q)) if len(a) else None


def interarrival(arrival_s: np.ndarray) -> np.ndarray:
    return np.diff(np.sort(np.asarray(arrival_s, dtype=np.float64)))


def burstiness(gaps: np.ndarray) -> float | None:
    """Coefficient of variation of inter-arrival gaps (1 for Poisson, larger when bursty)."""
    if len(gaps) < 2 or gaps.mean() <= 0:
        return None
    return float(gaps.std() / gaps.mean())


def concurrency_samples(p: TrafficProfile, step_s: float = 0.5) -> np.ndarray:
    """In-flight requests every ``step_s`` under the nominal service model."""
    if len(p) == 0:
        return np.zeros(1)
    start = p.arrival_s
    end = (
        start
        + NOMINAL_BASE_S
        + p.prompt_tokens * NOMINAL_PREFILL_S_PER_TOKEN
        + p.output_tokens * NOMINAL_DECODE_S_PER_TOKEN
    )
    grid = np.arange(start[0], end.max() + step_s, step_s)
    return (np.searchsorted(start, grid, side="right") - np.searchsorted(np.sort(end), grid, side="right")).astype(
        np.float64
    )


OK, FAIL, UNMEASURED = "ok", "FAIL", "unmeasured"


@dataclass
class FidelityRow:
    """One metric of the check. ``status`` is ``ok`` (measured, within its bound), ``FAIL``
    (measured, beyond it) or ``unmeasured`` (it could not be computed on this data; ``note`` says
    why). An unmeasured row is never ok: a blocking one fails the check like a FAIL."""

    name: str
    pool: float | None
    production: float | None
    distance: float | None
    threshold: float
    status: str
    blocking: bool = True
    note: str = ""
    # "max": distance <= threshold passes (the distances); "min": distance >= threshold (pool size)
    bound: str = "max"

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def measured(self) -> bool:
        return self.status != UNMEASURED


@dataclass
class FidelityReport:
    rows: list[FidelityRow] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows if r.blocking)

    @property
    def failures(self) -> list[FidelityRow]:
        """Blocking rows that are not ok: measured beyond their bound, or unmeasured."""
        return [r for r in self.rows if r.blocking and not r.ok]

    @property
    def unmeasured(self) -> list[FidelityRow]:
        return [r for r in self.rows if not r.measured]

    def table(self) -> str:
        """A fixed-width table: metric, pool, production, distance, threshold, result (and why)."""
        fmt = lambda v: "n/a" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))
        head = ("metric", "pool", "production", "distance", "threshold", "result")
        body = [
            (
                r.name,
                fmt(r.pool),
                fmt(r.production),
                fmt(r.distance),
                (">=" if r.bound == "min" else "") + f"{r.threshold:g}",
                r.status + ("" if r.blocking else " (info)") + (f"  {r.note}" if r.note else ""),
            )
            for r in self.rows
        ]
        widths = [max(len(x[i]) for x in [head, *body]) for i in range(5)]
        line = lambda x: "  ".join(v.ljust(w) for v, w in zip(x[:5], widths)) + "  " + x[5]
        if self.passed:
            verdict = "PASS"
        elif not self.rows:
            verdict = "FAIL (no metrics)"
        else:
            verdict = (
                "FAIL (" + ", ".join(r.name + (" unmeasured" if not r.measured else "") for r in self.failures) + ")"
            )
        return "\n".join(
            [line(head), line(tuple("-" * w for w in widths) + ("------",)), *map(line, body), f"fidelity: {verdict}"]
        )

    def to_dict(self) -> dict:
        return {"passed": self.passed, "rows": [{**asdict(r), "ok": r.ok} for r in self.rows]}


def _row(name, pool, prod, dist, threshold, blocking=True, note="", why="") -> FidelityRow:
    """A distance row: ok when ``dist <= threshold``; unmeasured (with ``why``) when ``dist`` is None."""
    if dist is None or not np.isfinite(dist):
        reason = why or "not measurable on this data"
        return FidelityRow(
            name, pool, prod, None, float(threshold), UNMEASURED, blocking, f"{reason}" + (f"; {note}" if note else "")
        )
    return FidelityRow(
        name, pool, prod, float(dist), float(threshold), OK if dist <= threshold else FAIL, blocking, note
    )


def _ks(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 2 or len(b) < 2:
        return None
    return float(ks_2samp(a, b, method="asymp").statistic)


def _ks_why(what: str, a: np.ndarray, b: np.ndarray) -> str:
    return f"a KS distance needs at least 2 {what} on each side (pool {len(a)}, production {len(b)})"


def _cv_why(pool_gaps: np.ndarray, production_gaps: np.ndarray) -> str:
    sides = {"pool": pool_gaps, "production": production_gaps}
    if min(len(g) for g in sides.values()) < 2:
        return (
            f"a coefficient of variation needs at least 2 inter-arrival gaps on each side "
            f"(pool {len(pool_gaps)}, production {len(production_gaps)})"
        )
    flat = [side for side, g in sides.items() if g.mean() <= 0]
    return f"all requests of the {' and the '.join(flat)} share one timestamp: its gaps have no positive mean"


def min_pool_requests(sweep: SweepSpec) -> tuple[int, str]:
    """The fewest distinct requests a pool must hold for ``sweep``, and why.

    A capacity step takes its requests from the pool in order from a seeded place, cycling
    (loadgen.sweep.run_sweep): a step is held for ``max(step_duration_s, min(min_requests / rate,
    4 * step_duration_s))`` seconds, and its schedule then has a fixed count of arrivals
    (loadgen.arrivals.schedule). A pool with fewer distinct requests than a step sends makes that
    step replay duplicates (after the prefix-cache reset, a duplicate is a cache hit production
    never had). With an explicit ladder (``sweep.rates``) that is its largest step; with the
    automatic search, whose rates are found at run time, it is ``sweep.min_requests``, the fewest
    requests any step sends. Closed-loop users (``sweep.users``) each start at their own share of
    the pool, so the pool holds at least one request per user. Never below 2: no distance is
    measurable on fewer."""
    from loadgen.arrivals import schedule  # deferred: domain to domain, no module-level edge

    need, why = (
        sweep.min_requests,
        (
            f"sweep.min_requests={sweep.min_requests}: the fewest requests a capacity "
            "step sends (automatic ladder: its rates are found at run time)"
        ),
    )
    if sweep.rates:
        best = None
        for rate in sweep.rates:
            step_s = max(sweep.step_duration_s, min(sweep.min_requests / rate, 4 * sweep.step_duration_s))
            count = len(schedule(sweep.arrival, rate, step_s, burstiness=sweep.burstiness, seed=sweep.seed))
            if best is None or count > best[0]:
                best = (count, rate, step_s)
        need, rate, step_s = best  # the count grows with the rate: refinement steps lie inside the ladder
        why = f"the largest step of sweep.rates: {rate:g} req/s held {step_s:g} s sends {need} requests"
    if sweep.users and max(sweep.users) > need:
        need, why = (
            max(sweep.users),
            f"sweep.users: {max(sweep.users)} closed-loop users each start at their own request",
        )
    if need < 2:
        need, why = 2, "no distance is measurable on fewer than 2 requests"
    return need, why + "; fewer distinct requests and every such step replays duplicates"


def pool_size_row(requests: int, distinct: int, production: int, minimum: int, why: str) -> FidelityRow:
    """Blocking row: the pool holds at least ``minimum`` distinct requests (see :func:`min_pool_requests`)."""
    note = f"minimum {minimum} distinct requests ({why})"
    if distinct != requests:
        note += f"; {requests - distinct} of {requests} requests duplicate another"
    return FidelityRow(
        "pool_requests",
        distinct,
        production,
        distinct,
        float(minimum),
        OK if distinct >= minimum else FAIL,
        True,
        note,
        bound="min",
    )


def fidelity_report(
    pool: TrafficProfile,
    production: TrafficProfile,
    thresholds: FidelitySpec | None = None,
    *,
    sweep: SweepSpec | None = None,
    distinct_requests: int | None = None,
) -> FidelityReport:
    """Compare a pool's profile with production's; every distance sits next to its threshold.

    With ``sweep`` (a pool build), a first blocking row ``pool_requests`` requires at least
    :func:`min_pool_requests` distinct requests (``distinct_requests``, else every request counts).
    A metric that cannot be computed (too few values, nothing to compare) is ``unmeasured``, which
    fails the check where the row is blocking."""
    t = thresholds or FidelitySpec()
    rows = []
    if sweep is not None:
        minimum, why = min_pool_requests(sweep)
        rows.append(
            pool_size_row(
                len(pool), len(pool) if distinct_requests is None else distinct_requests, len(production), minimum, why
            )
        )
    rows += [
        _row(
            "prompt_tokens_ks",
            _pct(pool.prompt_tokens, 50),
            _pct(production.prompt_tokens, 50),
            _ks(pool.prompt_tokens, production.prompt_tokens),
            t.prompt_tokens_ks,
            note="values: medians",
            why=_ks_why("requests", pool.prompt_tokens, production.prompt_tokens),
        ),
        _row(
            "output_tokens_ks",
            _pct(pool.output_tokens, 50),
            _pct(production.output_tokens, 50),
            _ks(pool.output_tokens, production.output_tokens),
            t.output_tokens_ks,
            note="values: medians",
            why=_ks_why("requests", pool.output_tokens, production.output_tokens),
        ),
    ]
    if pool.cached_fraction is not None and production.cached_fraction is not None and len(pool) and len(production):
        rows.append(
            _row(
                "cached_fraction_abs",
                pool.cached_fraction,
                production.cached_fraction,
                abs(pool.cached_fraction - production.cached_fraction),
                t.cached_fraction_abs,
                note=f"block {production.cached_block} tokens",
            )
        )
    elif production.cached_block is None and pool.cached_block is None:
        # the source records no prefix structure (an Azure trace): not part of this check, and not ok either
        rows.append(
            _row(
                "cached_fraction_abs",
                pool.cached_fraction,
                production.cached_fraction,
                None,
                t.cached_fraction_abs,
                blocking=False,
                why="the source records no prefix structure (no prefix blocks, no text)",
            )
        )
    else:
        side = "pool" if pool.cached_fraction is None else "production"
        rows.append(
            _row(
                "cached_fraction_abs",
                pool.cached_fraction,
                production.cached_fraction,
                None,
                t.cached_fraction_abs,
                why=f"no prompt tokens to simulate a prefix cache on (pool {len(pool)}, production "
                f"{len(production)} requests)"
                if not (len(pool) and len(production))
                else f"the {side} has no cached-prefix fraction",
            )
        )
    if production.logged_cached_fraction is not None and pool.cached_fraction is not None:
        rows.append(
            _row(
                "cached_fraction_vs_logged",
                pool.cached_fraction,
                production.logged_cached_fraction,
                abs(pool.cached_fraction - production.logged_cached_fraction),
                t.cached_fraction_abs,
                blocking=False,
                note="logged by the production engine (bounded cache, eviction)",
            )
        )
    gp, gq = interarrival(pool.arrival_s), interarrival(production.arrival_s)
    rows.append(
        _row(
            "interarrival_ks",
            _pct(gp, 50),
            _pct(gq, 50),
            _ks(gp, gq),
            t.interarrival_ks,
            note="values: median gap s",
            why=_ks_why("inter-arrival gaps", gp, gq),
        )
    )
    bp, bq = burstiness(gp), burstiness(gq)
    if bp is not None and bq == 0:  # evenly spaced production: a relative difference is undefined
        rows.append(
            _row(
                "burstiness_rel",
                bp,
                bq,
                abs(bp - bq),
                t.burstiness_rel,
                note="values: CV of gaps; production CV is 0, so the absolute difference",
            )
        )
    else:
        why = _cv_why(gp, gq)
        rows.append(
            _row(
                "burstiness_rel",
                bp,
                bq,
                None if bp is None or bq is None else abs(bp - bq) / bq,
                t.burstiness_rel,
                note="values: CV of gaps",
                why=why,
            )
        )
    cp, cq = (
        (concurrency_samples(pool), concurrency_samples(production)) if len(pool) and len(production) else (None, None)
    )
    rows.append(
        _row(
            "concurrency_ks",
            None if cp is None else float(cp.mean()),
            None if cq is None else float(cq.mean()),
            None if cp is None else _ks(cp, cq),
            t.concurrency_ks,
            note="values: mean in flight (nominal service model)",
            why=(
                f"no requests to load a server with (pool {len(pool)}, production {len(production)})"
                if cp is None
                else _ks_why("0.5 s samples", cp, cq)
            ),
        )
    )
    rows += session_rows(pool, production, t)
    return FidelityReport(rows)


def session_rows(pool: TrafficProfile, production: TrafficProfile, t: FidelitySpec) -> list[FidelityRow]:
    """Turns per session and think times, pool vs production; no rows when neither side has
    multi-turn sessions (token-count traces), a failing row when only one side has them (the pool
    lost or invented conversations, e.g. redaction that changed a resent history)."""
    if pool.session_turns is None and production.session_turns is None:
        return []
    tp = pool.session_turns if pool.session_turns is not None else np.ones(1, dtype=np.int64)
    tq = production.session_turns if production.session_turns is not None else np.ones(1, dtype=np.int64)
    rows = [
        _row(
            "turns_per_session_ks",
            float(tp.mean()),
            float(tq.mean()),
            _ks(tp, tq) if min(len(tp), len(tq)) > 1 else float(tp.mean() != tq.mean()),
            t.turns_per_session_ks,
            note="values: mean turns per session",
        )
    ]
    kp = pool.think_s if pool.think_s is not None else np.zeros(0)
    kq = production.think_s if production.think_s is not None else np.zeros(0)
    rows.append(
        _row(
            "think_time_ks",
            _pct(kp, 50),
            _pct(kq, 50),
            _ks(kp, kq),
            t.think_time_ks,
            note="values: median think s",
            why=_ks_why("think times (later turns)", kp, kq),
        )
    )
    return rows


def render_length_plot(pool: TrafficProfile, production: TrafficProfile, path: Path | str, title: str = "") -> Path:
    """PNG of prompt and output token-length distributions, pool over production (matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    for ax, attr, label in ((axes[0], "prompt_tokens", "prompt tokens"), (axes[1], "output_tokens", "output tokens")):
        a, b = getattr(production, attr), getattr(pool, attr)
        hi = max(int(a.max()) if len(a) else 1, int(b.max()) if len(b) else 1)
        bins = np.linspace(0, hi + 1, 50)
        ax.hist(a, bins=bins, density=True, alpha=0.45, label=f"production (n={len(a)})", color="tab:blue")
        ax.hist(
            b, bins=bins, density=True, histtype="step", linewidth=2, label=f"pool (n={len(b)})", color="tab:orange"
        )
        ax.set_xlabel(label)
        ax.set_ylabel("density")
        ax.legend()
    fig.suptitle(title or "replay pool vs production: token lengths")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
