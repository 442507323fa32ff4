"""The review's cost and energy at capacity: output tokens/s per GPU, $ per million output tokens and
joules per output token, with what is missing said (the same formulas as the memory's v_run_steps)."""

from __future__ import annotations

from specs.config import EndpointSpec
from loadgen.ladder import held
from loadgen.results import SweepResult


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def capacity_economics(sweeps: list[SweepResult], endpoint: EndpointSpec) -> dict:
    """Output tokens/s per GPU, $ per million output tokens and joules per output token at capacity.

    At capacity = the highest tested step that held the SLA, median over the repeats; the same
    formulas as the research memory's v_run_steps (docs/memory.md): $ = price per GPU-hour x GPUs /
    tokens per hour, J/token = mean NVML power of the step (all GPUs) / output tokens per second.
    """
    from statistics import median

    divisor = endpoint.hardware.capacity_divisor
    price = endpoint.hardware.price_per_gpu_hour_usd
    tokens, usd, joules = [], [], []
    for sweep in sweeps:
        sustained = [s for s in sweep.steps if s.validity == "valid" and held(s) and s.output_tokens_per_s > 0]
        if not sustained:
            continue
        step = max(sustained, key=lambda s: s.target_rate)
        tokens.append(step.output_tokens_per_s / divisor)
        if price is not None:
            usd.append(price * divisor / 3600 / step.output_tokens_per_s * 1e6)
        power = step.device_metrics.get("power_mean_w")
        if power is not None:
            joules.append(power / step.output_tokens_per_s)
    if joules:
        energy_note = "NVML power sampled per sweep step"
    elif endpoint.hardware.gpu_count == 0:
        energy_note = "no power telemetry (CPU host)"
    else:
        energy_note = "no power telemetry (NVML did not report power during the sweeps)"
    return {
        "output_tokens_per_s_per_gpu": median(tokens) if tokens else None,
        "usd_per_million_output_tokens": median(usd) if usd else None,
        "joules_per_output_token": median(joules) if joules else None,
        "price_note": ""
        if price is not None
        else "no price per GPU-hour in the endpoint YAML (hardware.price_per_gpu_hour_usd)",
        "energy_note": energy_note,
    }


def economics_lines(rows: list[tuple[str, list[SweepResult]]], endpoint: EndpointSpec) -> list[str]:
    """The report's "Cost and energy at capacity" table, one row per configuration, with what is missing said."""
    md = [
        "## Cost and energy at capacity",
        "",
        "| config | output tokens/s per GPU | $ per million output tokens | J per output token |",
        "|---|---|---|---|",
    ]
    price_notes, energy_notes = set(), set()
    for name, sweeps in rows:
        e = capacity_economics(sweeps, endpoint)
        price_notes.add(e["price_note"])
        energy_notes.add(e["energy_note"])
        usd, joules = e["usd_per_million_output_tokens"], e["joules_per_output_token"]
        md.append(
            f"| {name} | {_fmt(e['output_tokens_per_s_per_gpu'])} | "
            f"{'no price' if usd is None else _fmt(usd)} | {'no power telemetry' if joules is None else _fmt(joules)} |"
        )
    price = endpoint.hardware.price_per_gpu_hour_usd
    md += [
        "",
        f"Cost: ${price:g} per GPU-hour x {endpoint.hardware.capacity_divisor}."
        if price is not None
        else f"Cost: {' '.join(sorted(n for n in price_notes if n))}.",
        f"Energy: {'; '.join(sorted(energy_notes))}.",
        "",
    ]
    return md
