"""Tables of a sweep: rows for Dagster metadata, markdown for reports, plain text for the CLI."""

from __future__ import annotations

from loadgen.ladder import held
from loadgen.queue_rate import step_host_s
from loadgen.results import SweepResult
from loadgen.sustained import Z, backlog_grew, queue_bound, queue_note, served_rate, shortfall


def _fmt(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"


def _sig(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def step_table(sweep: SweepResult) -> list[dict]:
    """One row per step, sorted by rate: the load curve as plain values."""
    rows = []
    for s in sorted(sweep.steps, key=lambda s: s.target_rate):
        rows.append(
            {
                "rate": s.target_rate,
                "achieved": round(s.achieved_rate, 2),
                "throughput": round(s.throughput_rps, 2),
                "ttft_p50_ms": s.ttft_ms.p50,
                "ttft_p95_ms": s.ttft_ms.p95,
                "ttft_p99_ms": s.ttft_ms.p99,
                "itl_p50_ms": s.itl_ms.p50,
                "itl_p95_ms": s.itl_ms.p95,
                "itl_p99_ms": s.itl_ms.p99,
                "e2e_p50_ms": s.e2e_ms.p50,
                "e2e_p95_ms": s.e2e_ms.p95,
                "e2e_p99_ms": s.e2e_ms.p99,
                "error_rate": s.error_rate,
                "send_lag_p99_ms": s.send_lag_ms.p99,
                "kv_usage_max": s.engine_metrics.get("kv_cache_usage_max"),
                "waiting_max": s.engine_metrics.get("requests_waiting_max"),
                "preemptions": s.engine_metrics.get("preemptions_delta"),
                "prefix_hit_rate": s.engine_metrics.get("prefix_cache_hit_rate"),
                # the host's memory-pass time at the step (sweep.host_speed_probe): a slow host, not a slow engine
                "host_pass_ms": round(host * 1e3, 3) if (host := step_host_s(s)) else None,
                # completions fell short of arrivals beyond the step's noise (loadgen.sustained), and what it served
                "queue_bound": queue_bound(s),
                "served_rps": round(served, 3) if (served := served_rate(s)) is not None else None,
                "within_sla": held(s),
                "validity": s.validity,
                "note": s.invalid_reason or "; ".join(s.sla_violations),
            }
        )
    return rows


_COLUMNS = [
    ("rate", "rate/s", 1),
    ("throughput", "ok/s", 1),
    ("ttft_p50_ms", "TTFT p50", 0),
    ("ttft_p95_ms", "p95", 0),
    ("ttft_p99_ms", "p99", 0),
    ("itl_p50_ms", "ITL p50", 1),
    ("itl_p95_ms", "p95", 1),
    ("itl_p99_ms", "p99", 1),
    ("e2e_p50_ms", "E2E p50", 0),
    ("e2e_p95_ms", "p95", 0),
    ("e2e_p99_ms", "p99", 0),
    ("error_rate", "err%", 1),
    ("send_lag_p99_ms", "lag p99", 2),
]


def _cells(row: dict) -> list[str]:
    out = []
    for key, _, digits in _COLUMNS:
        value = row[key]
        out.append(_fmt(value * 100 if key == "error_rate" and value is not None else value, digits))
    out.append("INVALID" if row["validity"] != "valid" else ("ok" if row["within_sla"] else "over SLA"))
    return out


def _summary(sweep: SweepResult) -> str:
    cap = sweep.capacity_rps
    bound = "" if sweep.capacity_bounded else " (lower bound: no tested rate broke the SLA)"
    line = (
        f"capacity {_fmt(cap, 2)} req/s{bound}, per GPU {_fmt(sweep.capacity_per_gpu, 2)}; "
        f"knee {_fmt(sweep.knee_rate, 2) if sweep.knee_rate is not None else 'not reached'}"
    )
    if sweep.validity != "valid":
        line += f"\nINVALID: {sweep.invalid_reason}"
    return line


def step_table_markdown(sweep: SweepResult) -> str:
    header = [title for _, title, _ in _COLUMNS] + ["SLA"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in step_table(sweep)]
    return "\n".join(lines) + "\n\n" + _summary(sweep) + "\n"


def render_text(sweep: SweepResult) -> str:
    """Fixed-width table for terminals (the CLI prints this)."""
    header = [title for _, title, _ in _COLUMNS] + ["SLA"]
    body = [_cells(row) for row in step_table(sweep)]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    lines = [
        f"{sweep.endpoint}{' [' + sweep.label + ']' if sweep.label else ''}  (latencies in ms)",
        fmt.format(*header),
    ]
    lines += [fmt.format(*r) for r in body]
    lines.append(_summary(sweep))
    lines += [f"note: {n}" for n in sweep.notes]
    return "\n".join(lines)


def load_curve_markdown(rows: list[tuple[str, SweepResult]]) -> list[str]:
    """The load curve as a table: offered and done rates side by side, and whether the queue grew beyond
    the step's noise (loadgen.sustained), which no short step's percentiles excuse."""
    md = [
        "Offered: the rate held; done: requests completed per second until the last one ended; queue: the "
        "requests the queue gained over the step, +- the step's own noise, of those answered; **grew** where "
        "completions fell short of arrivals beyond that noise, with what the engine then served "
        "(docs/measurement.md, 'Sustained rates'). Such a step is not within the SLA, however short.",
        "",
        "| config | offered req/s | done req/s | queue | TTFT p95 (ms) | ITL p95 (ms) | E2E p95 (ms) | errors "
        "| within SLA |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, sweep in rows:
        for s in sorted(sweep.steps, key=lambda s: s.target_rate):
            bound, gap = queue_bound(s), shortfall(s.ttft_growth)
            queue = "unmeasured"
            if gap is not None:  # requests the queue gained over the step, +- the step's noise
                if backlog_grew(s.backlog) and gap[0] <= Z * gap[1]:  # in the running batch: the counts saw it
                    b = s.backlog
                    gained, noise = b["arrived"] - b["departed"], (b["arrived"] + b["departed"]) ** 0.5
                    queue = (
                        f"**grew**: +{gained:.0f} +-{noise:.0f} of {b['arrived']:.0f} in its last {b['window_s']:.3g} s"
                    )
                else:
                    queue = (
                        f"{'**grew**' if bound else 'held'}: +{gap[0]:.0f} +-{gap[1]:.0f} of {s.ttft_growth['n']:.0f}"
                    )
                queue += f", served {served_rate(s):.3g} req/s" if bound else ""
            reasons = list(s.sla_violations)
            if bound and not any(r.startswith("queue grew") for r in reasons):
                reasons.append(queue_note(s.ttft_growth, s.target_rate, s.backlog))  # recorded before the rule
            ok = held(s)
            md.append(
                f"| {name} | {s.target_rate:g} | {s.throughput_rps:.2f} | {queue} | {_fmt(s.ttft_ms.p95)} | "
                f"{_sig(s.itl_ms.p95)} | {_fmt(s.e2e_ms.p95)} | {s.error_rate:.1%} | "
                f"{'yes' if ok else 'no: ' + '; '.join(reasons or [s.invalid_reason or 'invalid'])} |"
            )
    return md
