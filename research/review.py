"""The review report of a campaign: what a person reads before approving a configuration.

Markdown plus a PNG of the load curves: config diff (reference -> best), load curves before and
after, the verdicts' detectable effects (the headline MDE) above the noise floors they rest on, every repeat, correctness evidence, the lossy/lossless label, every
experiment with its verdict, open questions, and the exact commands that reproduce the result.
Nothing is deployed: the report says so, and approval is a person's decision.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from specs.config import CampaignSpec, EndpointSpec
from specs.engine_args import REMOVE, diff_args, parse_args
from loadgen.report import load_curve_markdown
from loadgen.results import SweepResult
from research import internals_evidence
from research.internals_evidence import summary as internals_summary
from research.review_economics import capacity_economics, economics_lines  # noqa: F401 - read from here too
from research.review_noise import noise_lines as _noise_lines  # noqa: F401 - tests read it from here
from research.review_noise import noise_section
from research.state import CampaignState, ExperimentState
from research.verdict_mde import review_lines as verdict_mde_lines
from research.verdict_mde import verdict_mdes


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def load_curves_png(before: list[SweepResult], after: list[SweepResult], endpoint: EndpointSpec, path: Path) -> Path:
    """TTFT (at the SLA percentile) and throughput against offered rate, reference vs best, every repeat."""
    try:  # loadgen's plot: every latency percentile, SLA lines, knee and capacity per sweep
        from loadgen.plots import load_curve_png

        labels = [f"reference #{i + 1}" for i in range(len(before))] + [f"best #{i + 1}" for i in range(len(after))]
        return Path(
            load_curve_png(
                list(before) + list(after),
                endpoint.sla,
                path,
                labels=labels,
                title=f"{endpoint.name}: load curves, reference vs best (every repeat)",
            )
        )
    except ImportError:  # fall back to the compact plot below
        pass
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pct = endpoint.sla.ttft_percentile
    key = {50: "p50", 90: "p90", 95: "p95", 99: "p99"}.get(int(pct), "p95")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, sweeps, color in (("reference", before, "tab:red"), ("best", after, "tab:green")):
        for i, sweep in enumerate(sweeps):
            steps = sorted(sweep.steps, key=lambda s: s.target_rate)
            rates = [s.target_rate for s in steps]
            ttft = [getattr(s.ttft_ms, key) for s in steps]
            thr = [s.throughput_rps for s in steps]
            kw = {"color": color, "alpha": 0.85, "marker": "o", "label": label if i == 0 else None}
            ax1.plot(rates, [t if t is not None else float("nan") for t in ttft], **kw)
            ax2.plot(rates, thr, **kw)
            if sweep.capacity_rps:
                ax1.axvline(sweep.capacity_rps, color=color, ls=":", alpha=0.6)
    ax1.axhline(endpoint.sla.ttft_ms, color="black", ls="--", lw=1, label=f"SLA TTFT {key}")
    ax1.set(xlabel="offered rate (req/s)", ylabel=f"TTFT {key} (ms)", yscale="log", title="Latency (dotted: capacity)")
    ax2.plot(
        [0, max([s.target_rate for w in before + after for s in w.steps] or [1])],
        [0, max([s.target_rate for w in before + after for s in w.steps] or [1])],
        color="grey",
        ls=":",
        lw=1,
    )
    ax2.set(xlabel="offered rate (req/s)", ylabel="completed req/s", title="Throughput")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{endpoint.name}: load curves, reference vs best (every repeat)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _diff_table(before: list[str], after: list[str]) -> list[str]:
    diff = diff_args(before, after)
    if not diff:
        return ["No change: the reference configuration is still the best one found."]
    old = parse_args(before)
    lines = ["| flag | reference | best |", "|---|---|---|"]
    for flag, value in diff.items():
        was = "(absent)" if flag not in old else ("(switch)" if old[flag] is None else old[flag])
        now = "(removed)" if value == REMOVE else ("(switch)" if value is None else value)
        lines.append(f"| `{flag}` | {was} | {now} |")
    return lines


def _label(adopted: list[ExperimentState], any_lossy: bool) -> str:
    """What the adopted changes' correctness evidence supports, in one phrase."""
    if any_lossy:
        return "LOSSY - human review required"
    if not adopted:
        return "unchanged"
    reports = [e.correctness for e in adopted]
    if any(r is None or not r.checked for r in reports):
        return "lossless by declaration, outputs NOT checked (no correctness evidence) - review before use"
    labels = sorted({r.label for r in reports})
    if all(r.lossless_equivalent for r in reports):
        return "lossless (outputs kept: " + "; ".join(labels) + ")"
    return (
        "lossless by declaration, outputs kept only within the baseline's own numerical noise ("
        + "; ".join(labels)
        + ") - review before use"
    )


def _bound(value: float | None) -> str:
    """An interval bound; None where it was unbounded (a fit with no spread to speak of)."""
    return "unbounded" if value is None else f"{value:+.1%}"


def _experiment_section(e: ExperimentState) -> list[str]:
    label = "LOSSY - flagged for human review" if e.lossy else "lossless"
    lines = [
        f"### {e.title} ({e.kind} `{e.experiment_id}`, round {e.round})",
        "",
        f"- Label: **{label}**",
        f"- Change: `{e.diff}`",
        f"- Verdict: **{e.verdict}**" + (" - confirmed in every repeat" if e.confirmed else ""),
    ]
    if e.comparison:
        c = e.comparison
        lines.append(
            f"- Repeats: capacities {[round(x, 3) for x in c.candidate_capacities]} req/s vs working baseline "
            f"{_fmt(c.baseline_capacity)} req/s (needs > +{c.threshold:.1%}); ratio {_fmt(c.capacity_ratio)}"
        )
        if c.effect is not None:
            lines.append(
                f"- Effect: **{c.effect:+.1%}**"
                + (f" by the {c.decided_by}" if c.decided_by else "")
                + f" ({f'{c.confidence:.1%}'.replace('.0%', '%')} interval {_bound(c.effect_low)} to "
                f"{_bound(c.effect_high)}); "
                "smallest effect this noise could see: "
                + (f"{c.mde:.1%}" if c.mde is not None else "none (the fit's spread is unbounded)")
            )
        lines.append(f"- Evidence: {c.evidence}")
    if e.correctness:
        lines.append(f"- Correctness: {e.correctness.summary()}")
        diverged = [s for s in e.correctness.sequences if not s.identical]
        for s in diverged[:3]:
            lines.append(
                f"  - prompt {s.prompt_index}: first divergence at token {s.first_divergence}"
                f"{' (a near-tie)' if s.divergence_is_tie else ''}: reference {s.reference_text[:80]!r} vs "
                f"candidate {s.candidate_text[:80]!r}"
            )
    if e.soak:
        lines.append(f"- Soak: {e.soak.summary()}" + (f"; diagnosis: {e.soak.diagnosis}" if e.soak.diagnosis else ""))
    internals = internals_evidence.latest(e.sweeps)
    if internals is not None:  # the adapter's evidence overlay (step times, capture stalls, padding)
        lines.append(f"- Engine internals: {internals_summary(internals)}")
    overlays = (e.identity or {}).get("overlays")
    if overlays:
        lines.append("- Overlays (content hash): " + ", ".join(f"`{k}` {v}" for k, v in sorted(overlays.items())))
    if e.engine_patch:  # the code change itself, as the proposer wrote it
        lines += ["- Engine patch (authored by the proposer; applied to this candidate's engine only):", ""]
        lines += ["```diff", e.engine_patch.rstrip("\n"), "```"]
    lines += _recipe_texts(overlays or {}, e.engine_args)
    for note in e.notes:
        lines.append(f"- {note}")
    if e.invalid_reason:
        lines.append(f"- Invalid: {e.invalid_reason}")
    return lines + [""]


def _recipe_texts(hashes: dict[str, str], args: list[str]) -> list[str]:
    """The code of each shipped patch overlay (a recipe) the candidate asked for, folded: a patch is
    judged with its text in front of the reader."""
    from engines import overlays

    try:
        asked = [r.overlay for r in overlays.split(list(args))[1]]
    except overlays.OverlayError:
        return []
    out = []
    for overlay in asked:
        if overlay.purpose != "patch" or overlay.name not in overlays.REGISTRY:
            continue
        source = overlay.folder / "sitecustomize.py"
        sha = hashes.get(overlay.name, overlay.sha256())
        out += [
            f"- Patch `{overlay.name}` ({overlay.description}; content hash {sha}):",
            "",
            f"<details><summary>engines/patches/{overlay.name}/sitecustomize.py</summary>",
            "",
            "```python",
            source.read_text().rstrip("\n"),
            "```",
            "",
            "</details>",
        ]
    return out


def cli_overrides(declared: list[str], args: list[str]) -> list[str]:
    """``--set`` / ``--unset`` options of the autoresearch CLI that turn ``declared`` into ``args``."""
    out = []
    for flag, value in diff_args(declared, args).items():
        name = flag.lstrip("-")
        if value == REMOVE:
            out += ["--unset", f"engine.{name}"]
        else:
            out += ["--set", f"engine.{name}={'' if value is None else value}"]
    return out


def reproduce_commands(state: CampaignState, endpoint: EndpointSpec, campaign: CampaignSpec) -> list[str]:
    """Commands that run as printed (on a host set up like this one): re-run the campaign, measure the
    best configuration with the same harness, or start it and leave it running."""
    best = state.working
    lines = [
        "```bash",
        "# re-run this campaign (resumes from its state file; a finished one starts anew)",
        f"autoresearch campaign run {shlex.quote(campaign.name)}",
    ]
    if best is not None:
        options = " ".join(shlex.quote(o) for o in cli_overrides(list(endpoint.engine.args), best.engine_args))
        target = shlex.quote(endpoint.name) + (f" {options}" if options else "")
        lines += [
            "# measure the best configuration with the same harness (one capacity sweep)",
            f"autoresearch sweep {target}",
            "# start it and leave it running (autoresearch engine down to stop it)",
            f"autoresearch engine up {target}",
        ]
    lines += ["```"]
    return lines


def _rounds_section(state: CampaignState) -> list[str]:
    """Every round's diagnosis and what came of it, including rounds that tried nothing."""
    md = ["## Rounds", ""]
    if not state.rounds:
        return md + ["No round was started.", ""]
    for r in state.rounds:
        d = r.diagnosis or {}
        md += [f"### Round {r.round}: `{' '.join(r.baseline_args)}`", ""]
        for b in d.get("bottlenecks", []):
            md.append(
                f"- Bottleneck **{b.get('name')}** (severity {b.get('severity', 0):.2f}): "
                + "; ".join(b.get("evidence", []))
            )
        if not d.get("bottlenecks"):
            md.append("- No bottleneck was named.")
        for note in d.get("notes", []):
            md.append(f"- Evidence note: {note}")
        for p in r.proposals:
            md.append(f"- Proposal `{p.proposal_id}` ({p.source}): {p.title}" + (" [lossy]" if p.lossy else ""))
        if r.adopted:
            md.append(f"- Adopted: `{r.adopted}`")
        if r.outcome:
            md.append(f"- Outcome: {r.outcome}")
        md.append("")
    return md


def _time_section(state: CampaignState) -> list[str]:
    """Where the campaign's active time went, stage by stage: what a shorter or longer campaign would
    trade (engine starts, correctness checks and soaks are inside each experiment's time)."""
    rows: list[tuple[str, float]] = []
    if state.reference is not None:
        rows.append(("reference baseline (sweeps, soak, reference outputs)", state.reference.wall_s))
    for r in state.rounds:
        if r.diagnosis_s:
            rows.append((f"round {r.round}: diagnosis", r.diagnosis_s))
        for exp_id in r.experiment_ids:
            e = state.experiments.get(exp_id)
            if e is not None and e.verdict != "skipped":
                rows.append((f"round {r.round}: {e.title.replace('|', '/')} ({e.verdict})", e.wall_s))
        adopted = next((b for b in state.baselines if r.adopted and b.source_experiment == r.adopted), None)
        if adopted is not None and r.adopted in state.experiments:
            extra = adopted.wall_s - state.experiments[r.adopted].wall_s
            if extra > 1:
                rows.append((f"round {r.round}: the new baseline's extra sweeps", extra))
    if not rows:
        return []
    counted = sum(t for _, t in rows)
    verified = bool((state.production_check or {}).get("rows"))  # its time is not kept apart: it is in the rest
    rest = "proposals, recording, reports" + (", the production-shaped verification" if verified else "")
    md = ["## Where the time went", "", "| stage | minutes |", "|---|---|"]
    md += [f"| {name} | {t / 60:.1f} |" for name, t in rows]
    md += [
        f"| other ({rest}) | {max(0.0, state.active_seconds - counted) / 60:.1f} |",
        f"| **active in all** | **{state.active_seconds / 60:.1f}** |",
        "",
    ]
    return md


def _production_lines(found: dict | None) -> list[str]:
    """Before and after in production shape (research.production_check), when the campaign ran it."""
    if not found:
        return []
    md = ["## Production-shaped verification", ""]
    if found.get("not_run"):
        return md + [f"Not run: {found['not_run']}", ""]
    from research.production_check import ProductionCheck

    check = ProductionCheck.model_validate(found)
    md += [
        f"The pool's own arrival pattern (per-interval rates, bursts, warm cache) for {check.seconds:g} s on "
        "each configuration, the same requests at the same times. Attainment: the share of requests that met "
        "every SLA target. GPU-seconds per 1,000 requests: what the endpoint's GPUs were held for them.",
        "",
        "| configuration | requests | SLA attainment | intervals within SLA | TTFT p95 ms | GPU-s / 1,000 | "
        "GPU-s / 1,000 within SLA |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in check.rows:
        if r.validity != "valid":
            md.append(f"| {r.label} | - | invalid: {r.invalid_reason} | - | - | - | - |")
            continue
        gpu = "unmeasured (no GPU)" if r.gpu_s_per_1k is None else f"{r.gpu_s_per_1k:.0f}"
        good = "unmeasured (no GPU)" if r.gpu_s_per_1k is None else _fmt(r.gpu_s_per_1k_within_sla, 4)
        attained = "unmeasured" if r.attainment is None else f"{r.attainment:.1%}"
        md.append(
            f"| {r.label} `{' '.join(r.engine_args)}` | {r.requests} | {attained} | "
            f"{r.intervals_within_sla}/{r.intervals} | {_fmt(r.ttft_p95_ms, 4)} | {gpu} | {good} |"
        )
    return md + ["", check.summary(), ""]


def write_report(state: CampaignState, endpoint: EndpointSpec, campaign: CampaignSpec, out_dir: Path | str) -> Path:
    """Write ``review.md`` and ``load_curves.png`` under ``out_dir``; return the markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ref, best = state.reference, state.working
    md: list[str] = [
        f"# Review: campaign `{state.campaign}` on endpoint `{endpoint.name}`",
        "",
        "**Nothing has been deployed.** A person reads this report and approves (or not) the configuration below.",
        "",
    ]
    if ref is None or best is None:
        md += [f"The campaign has no measured baseline: {state.end_reason}", ""]
        failed = state.failed_baseline or {}
        for i, sweep in enumerate(failed.get("sweeps", [])):
            examples = sorted({e for st in sweep.get("steps", []) for e in st.get("error_examples", [])})
            if examples:
                md += [f"Errors in baseline sweep {i + 1}:", ""] + [f"- `{e[:300]}`" for e in examples[:5]] + [""]
        if failed.get("log_tail"):
            md += ["Engine log (tail):", "", "```", failed["log_tail"][-3000:], "```", ""]
        path = out / "review.md"
        path.write_text("\n".join(md))
        return path
    from research.campaign import judged_gain, total_gain

    gain, gain_bound = total_gain(ref, best)
    judged = judged_gain(state)
    below = [b for b in ref.noise.capacity_below if b is not None]
    adopted = [
        state.experiments[b.source_experiment]
        for b in state.baselines
        if b.source_experiment and b.source_experiment in state.experiments
    ]
    any_lossy = any(e.lossy for e in adopted)
    mdes = verdict_mdes(state, campaign.target_mde)
    md += [
        "## Summary",
        "",
        "| | |",
        "|---|---|",
        f"| campaign id | `{state.campaign_id}` |",
        f"| model | {endpoint.model.served_name or endpoint.model.path} ({endpoint.model.revision}) |",
        f"| hardware | {endpoint.hardware.gpu_type} x {endpoint.hardware.gpu_count} |",
        f"| SLA | TTFT p{endpoint.sla.ttft_percentile:g} <= {endpoint.sla.ttft_ms:g} ms"
        + (f", ITL p{endpoint.sla.itl_percentile:g} <= {endpoint.sla.itl_ms:g} ms" if endpoint.sla.itl_ms else "")
        + (f", E2E p{endpoint.sla.e2e_percentile:g} <= {endpoint.sla.e2e_ms:g} ms" if endpoint.sla.e2e_ms else "")
        + f", errors <= {endpoint.sla.max_error_rate:.0%} |",
        f"| reference capacity (campaign start) | {_fmt(ref.capacity)} req/s"
        + (
            f" (below the sweep floor {_fmt(min(below))} req/s in {len(below)} of {ref.noise.repeats} repeats)"
            if below
            else ""
        )
        + " |",
        f"| best capacity | {_fmt(best.capacity)} req/s |",
        (
            f"| total gain (judged) | **{judged.describe()}** |"
            if judged
            else "| total gain (judged) | "
            + ("not stated: an adopted change's verdict has no interval |" if adopted else "no change adopted |")
        ),
        f"| capacity ratio (best / reference, by rung) | x{'>=' if gain_bound else ''}{_fmt(gain)}"
        + (" (a lower bound: the reference held no rate down to its floor)" if gain_bound else "")
        + " |",
        f"| minimum detectable effect (the verdicts') | **{mdes.headline()}**; {mdes.target_line()} |",
        f"| label | **{_label(adopted, any_lossy)}** |",
        f"| ended because | {state.end_reason or 'still running'} |",
        f"| experiments | {sum(e.verdict != 'skipped' for e in state.experiments.values())} run, "
        f"{sum(e.verdict == 'skipped' for e in state.experiments.values())} skipped, {len(state.rounds)} round(s) |",
        f"| budget used | {state.gpu_hours_used:.3f} "
        + (
            "GPU-h"
            if endpoint.hardware.gpu_count
            else "host-h (no GPU: the budget's gpu_hours count this host's hours)"
        )
        + f", {state.active_seconds / 60:.1f} min active, "
        f"{state.resumes} resume(s) |",
        "",
    ]
    md += ["## Configuration diff (reference -> best)", ""] + _diff_table(ref.engine_args, best.engine_args) + [""]
    md += [f"Reference: `{' '.join(ref.engine_args)}`  ", f"Best: `{' '.join(best.engine_args)}`", ""]
    png = load_curves_png(ref.sweeps, best.sweeps, endpoint, out / "load_curves.png")
    md += ["## Load curves", "", f"![load curves]({png.name})", ""]
    md += load_curve_markdown([(name, b.sweeps[0]) for name, b in (("reference", ref), ("best", best)) if b.sweeps])
    md += [""] + economics_lines([("reference", ref.sweeps), ("best", best.sweeps)], endpoint)
    md += verdict_mde_lines(mdes) + noise_section(state)
    md += _production_lines(state.production_check)
    md += ["## Adopted changes (in order)", ""]
    if not adopted:
        md += ["None: no candidate beat the noise floor in all its repeats.", ""]
    for e in adopted:
        md += _experiment_section(e)
    others = [e for e in state.experiments.values() if e.experiment_id not in {a.experiment_id for a in adopted}]
    lossy = [e for e in others if e.lossy and e.verdict != "skipped"]
    if lossy:
        md += ["## Lossy changes (flagged for human review, never adopted automatically)", ""]
        for e in lossy:
            md += _experiment_section(e)
    md += [
        "## All experiments",
        "",
        "| id | round | kind | change | verdict | capacities | ratio | label | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in sorted(state.experiments.values(), key=lambda e: (e.round, e.started_at)):
        caps = [round(s.capacity_rps or 0, 3) for s in e.sweeps]
        ratio = e.comparison.capacity_ratio if e.comparison else None
        note = (e.invalid_reason or e.skip_reason or "").replace("|", "/").splitlines()
        md.append(
            f"| `{e.experiment_id}` | {e.round} | {e.kind} | `{e.diff}` | {e.verdict}"
            f"{' (confirmed)' if e.confirmed else ''} | {caps} | {_fmt(ratio)} | "
            f"{'lossy' if e.lossy else 'lossless'} | {note[0][:160] if note else ''} |"
        )
    md += [""] + _rounds_section(state) + _time_section(state)
    md += ["## Open questions", ""]
    md += [f"- {q}" for q in state.open_questions] or ["- none"]
    md += ["", "## Reproduce", ""] + reproduce_commands(state, endpoint, campaign) + [""]
    path = out / "review.md"
    path.write_text("\n".join(md))
    return path
