"""Load-curve plot: p50/p95/p99 of TTFT, ITL and E2E against arrival rate, SLA lines, knee and capacity;
done against offered rate, with the steps whose queue grew (loadgen.sustained) marked.

Several sweeps (baseline vs candidate, or repeats) are overlaid, one colour per label.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from specs.config import SLASpec  # noqa: E402
from loadgen.results import SweepResult  # noqa: E402
from loadgen.sustained import queue_bound  # noqa: E402

_METRICS = [
    ("ttft_ms", "TTFT", "ttft_ms"),
    ("itl_ms", "Inter-token latency", "itl_ms"),
    ("e2e_ms", "End-to-end", "e2e_ms"),
]
_STYLES = {"p50": ":", "p95": "--", "p99": "-"}


def load_curve_png(
    sweeps: SweepResult | list[SweepResult],
    sla: SLASpec | None,
    path: str | Path,
    labels: list[str] | None = None,
    title: str | None = None,
) -> Path:
    """Write the load-curve figure to ``path`` (PNG) and return it."""
    if isinstance(sweeps, SweepResult):
        sweeps = [sweeps]
    if not sweeps:
        raise ValueError("load_curve_png needs at least one sweep")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, grid = plt.subplots(2, 2, figsize=(12, 7.5))  # 1200x750 px: fits a laptop screen and the UI's dialog
    axes = grid.ravel()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, sweep in enumerate(sweeps):
        colour = colours[k % len(colours)]
        name = (labels[k] if labels and k < len(labels) else None) or sweep.label or f"sweep {k + 1}"
        steps = sorted((s for s in sweep.steps if s.validity == "valid"), key=lambda s: s.target_rate)
        bad = [s for s in sweep.steps if s.validity != "valid"]
        rates = [s.target_rate for s in steps]
        for ax, (attr, heading, sla_attr) in zip(axes, _METRICS):
            for level, style in _STYLES.items():
                values = [getattr(getattr(s, attr), level) for s in steps]
                pts = [(r, v) for r, v in zip(rates, values) if v is not None]
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", ms=3, color=colour, label=f"{name} {level}")
            for s in bad:
                ax.axvline(s.target_rate, color=colour, alpha=0.4, lw=4)
            ax.set_title(heading)
        axes[3].plot(rates, [s.throughput_rps for s in steps], "-o", ms=3, color=colour, label=f"{name} done")
        grew = [s for s in steps if queue_bound(s)]  # completions short of arrivals beyond the step's noise
        if grew:
            axes[3].plot(
                [s.target_rate for s in grew],
                [s.throughput_rps for s in grew],
                "X",
                ms=9,
                color=colour,
                ls="None",
                label=f"{name} queue grew",
            )
        axes[3].plot(
            rates,
            [s.error_rate * max(rates or [1]) for s in steps],
            ":x",
            color=colour,
            label=f"{name} error rate (x max rate)",
        )
        for ax in axes:
            if sweep.capacity_rps:
                ax.axvline(
                    sweep.capacity_rps, color=colour, ls="-.", lw=1.2, label=f"{name} capacity {sweep.capacity_rps:g}"
                )
            if sweep.knee_rate:
                ax.axvline(
                    sweep.knee_rate, color=colour, ls=(0, (1, 3)), lw=1.2, label=f"{name} knee {sweep.knee_rate:g}"
                )
    if sla is not None:
        for ax, (_, _, sla_attr) in zip(axes, _METRICS):
            limit = getattr(sla, sla_attr)
            if limit is not None:
                q = getattr(sla, sla_attr.replace("_ms", "_percentile"))
                ax.axhline(limit, color="red", lw=1.5, label=f"SLA p{q:g} {limit:g} ms")
    for ax in axes[:3]:
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel("ms")
        if all(v > 0 for line in ax.get_lines() for v in line.get_ydata() if line.get_linestyle() != "None"):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    top = max((s.target_rate for sweep in sweeps for s in sweep.steps), default=1.0)
    axes[3].plot([0, top], [0, top], color="grey", ls=":", lw=1, label="done = offered")
    axes[3].set_title("Offered and done (X: the queue grew)")
    axes[3].set_xlabel("arrival rate (req/s)")
    axes[3].set_ylabel("req/s")
    axes[3].grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(6, len(names)) or 1, fontsize=7, frameon=False)
    axes[3].legend(fontsize=7)
    fig.suptitle(title or " vs ".join(s.endpoint + (f" [{s.label}]" if s.label else "") for s in sweeps))
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def users_curve_png(sweep: SweepResult, sla: SLASpec | None, path: str | Path, title: str | None = None) -> Path:
    """The concurrency sweep's load curve against users (TTFT and E2E percentiles, SLA limits, the
    highest count held; throughput): a closed loop's x axis is people, not arrival rate."""
    if sweep.mode != "users":
        raise ValueError("users_curve_png needs a concurrency sweep (mode 'users'); use load_curve_png for rates")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = sorted((s for s in sweep.steps if s.validity == "valid"), key=lambda s: s.users)
    users = [s.users for s in steps]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (attr, heading, sla_attr) in zip(axes, [_METRICS[0], _METRICS[2]]):
        for level, style in _STYLES.items():
            pts = [(u, getattr(getattr(s, attr), level)) for u, s in zip(users, steps)]
            pts = [p for p in pts if p[1] is not None]
            if pts:
                ax.plot(*zip(*pts), style, marker="o", ms=3, color="tab:blue", label=level)
        limit = getattr(sla, sla_attr) if sla is not None else None
        if limit is not None:
            ax.axhline(limit, color="red", lw=1.5, label=f"SLA {limit:g} ms")
        ax.set_title(heading)
        ax.set_ylabel("ms")
    axes[2].plot(users, [s.throughput_rps for s in steps], "-o", ms=3, label="completed req/s")
    axes[2].plot(
        users,
        [
            s.output_tokens_per_s
            / max(1, max((x.output_tokens_per_s for x in steps), default=1))
            * max([s.throughput_rps for s in steps] or [1])
            for s in steps
        ],
        ":x",
        label="output tokens/s (scaled)",
    )
    axes[2].set_title("Throughput")
    for ax in axes:
        ax.set_xlabel("concurrent users")
        ax.set_xscale("log", base=2)
        ax.set_xticks(users, [str(u) for u in users])
        if sweep.capacity_users:
            ax.axvline(
                sweep.capacity_users,
                color="green",
                ls="-.",
                lw=1.2,
                label=f"highest within SLA: {sweep.capacity_users}",
            )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title or f"{sweep.endpoint}: load against concurrent users (closed loop)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def pareto_png(points: list[dict], curves: list[dict], path: str | Path, title: str | None = None) -> Path:
    """Throughput per GPU against per-user speed, one point per configuration (at capacity), front marked.

    ``points`` and ``curves`` are rows of memory_db's v_pareto_points and v_run_steps (see
    memory_db.queries.pareto_points / pareto_curves). Points are labelled with their configuration and,
    where known, $ per million output tokens and joules per token; faint lines are each configuration's
    steps (rate rising: per-user speed falls as throughput climbs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(10, 6.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    plotted = [
        p for p in points if p["output_tokens_per_s_per_gpu"] is not None and p["user_tokens_per_s_p50"] is not None
    ]
    colour_of = {p["config_hash"]: colours[k % len(colours)] for k, p in enumerate(plotted)}
    first = True
    for config, colour in colour_of.items():
        for run in sorted({c["run_id"] for c in curves if c["config_hash"] == config}):
            pts = [
                (c["user_tokens_per_s_p50"], c["output_tokens_per_s_per_gpu"])
                for c in curves
                if c["run_id"] == run and c["user_tokens_per_s_p50"] is not None
            ]
            if len(pts) > 1:
                ax.plot(
                    *zip(*pts),
                    "-",
                    color=colour,
                    alpha=0.25,
                    lw=1,
                    label="each sweep's steps (thin: rate rising)" if first else None,
                )
                first = False
    for p in plotted:
        front = bool(p["on_front"])
        ax.scatter(
            p["user_tokens_per_s_p50"],
            p["output_tokens_per_s_per_gpu"],
            s=90 if front else 45,
            color=colour_of[p["config_hash"]],
            edgecolor="black" if front else "none",
            zorder=3,
            marker="*" if front else "o",
        )
        extra = []
        if p.get("usd_per_million_output_tokens") is not None:
            extra.append(f"${p['usd_per_million_output_tokens']:.3g}/M tok")
        if p.get("joules_per_output_token") is not None:
            extra.append(f"{p['joules_per_output_token']:.3g} J/tok")
        text = p["label"] if len(p["label"]) <= 48 else p["label"][:45] + "..."
        ax.annotate(
            text + (f"\n{', '.join(extra)}" if extra else ""),
            (p["user_tokens_per_s_p50"], p["output_tokens_per_s_per_gpu"]),
            textcoords="offset points",
            xytext=(6, 6),
            fontsize=7,
        )
    front = sorted((p for p in plotted if p["on_front"]), key=lambda p: p["user_tokens_per_s_p50"])
    if front:
        ax.plot(
            [p["user_tokens_per_s_p50"] for p in front],
            [p["output_tokens_per_s_per_gpu"] for p in front],
            color="black",
            lw=1.2,
            ls="--",
            label="Pareto front (stars; dots: dominated)",
        )
    if plotted:
        ax.legend(fontsize=8)
        ax.margins(0.12)
    ax.set_xlabel("per-user speed: output tokens/s per request (p50, 1 / time per output token)")
    ax.set_ylabel("throughput: output tokens/s per GPU (at capacity)")
    ax.grid(alpha=0.3)
    if not plotted:
        ax.text(0.5, 0.5, "no configuration held the SLA at any tested rate yet", ha="center", transform=ax.transAxes)
    ax.set_title(title or "Pareto front")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
