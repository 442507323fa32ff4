"""Load-curve plot: p50/p95/p99 of TTFT, ITL and E2E against arrival rate, SLA lines, knee and capacity.

Several sweeps (baseline vs candidate, or repeats) are overlaid, one colour per label.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from autoresearch.config import SLASpec  # noqa: E402
from loadgen.results import SweepResult  # noqa: E402

_METRICS = [("ttft_ms", "TTFT", "ttft_ms"), ("itl_ms", "Inter-token latency", "itl_ms"), ("e2e_ms", "End-to-end", "e2e_ms")]
_STYLES = {"p50": ":", "p95": "--", "p99": "-"}


def load_curve_png(sweeps: SweepResult | list[SweepResult], sla: SLASpec | None, path: str | Path,
                   labels: list[str] | None = None, title: str | None = None) -> Path:
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
        axes[3].plot(rates, [s.throughput_rps for s in steps], "-o", ms=3, color=colour, label=f"{name} throughput")
        axes[3].plot(rates, [s.error_rate * max(rates or [1]) for s in steps], ":x", color=colour,
                     label=f"{name} error rate (x max rate)")
        for ax in axes:
            if sweep.capacity_rps:
                ax.axvline(sweep.capacity_rps, color=colour, ls="-.", lw=1.2, label=f"{name} capacity {sweep.capacity_rps:g}")
            if sweep.knee_rate:
                ax.axvline(sweep.knee_rate, color=colour, ls=(0, (1, 3)), lw=1.2, label=f"{name} knee {sweep.knee_rate:g}")
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
    axes[3].set_title("Completed throughput")
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
    axes[2].plot(users, [s.output_tokens_per_s / max(1, max((x.output_tokens_per_s for x in steps), default=1))
                         * max([s.throughput_rps for s in steps] or [1]) for s in steps], ":x",
                 label="output tokens/s (scaled)")
    axes[2].set_title("Throughput")
    for ax in axes:
        ax.set_xlabel("concurrent users")
        ax.set_xscale("log", base=2)
        ax.set_xticks(users, [str(u) for u in users])
        if sweep.capacity_users:
            ax.axvline(sweep.capacity_users, color="green", ls="-.", lw=1.2,
                       label=f"highest within SLA: {sweep.capacity_users}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title or f"{sweep.endpoint}: load against concurrent users (closed loop)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
