"""The one experiment harness: every configuration (baseline or candidate) is measured the same way.

Launch the configuration, check correctness against the campaign's reference outputs, run
``repeats`` capacity sweeps on the same replay pool, schedule and SLA as the baseline, stop
the engine, and judge: better / same / worse against the baseline's noise floor, or invalid
(launch failure, crash, errors over the SLA's limit, a client that fell behind, or a failed
correctness check). Engine failures become an ``invalid`` verdict with the reason and the log
tail, never an exception: a campaign must survive its worst candidate. The engine's launch, stop,
orphan guard and crash detection are ``engines.run_engine``'s, as for every other engine start.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import polars as pl
from pydantic import BaseModel, Field

from specs.config import EndpointSpec
from engines.session import stop_orphan
from loadgen.results import Comparison, NoiseFloor, SweepResult, Verdict
from loadgen.soak import SoakResult
from research.correctness import (
    CorrectnessReport,
    CorrectnessThresholds,
    CorrectnessUnavailable,
    ReferenceOutputs,
    capture_reference,
    check_candidate,
    unmeasurable_quality,
)

Progress = Callable[[str], None]  # where long work says what it is doing (one line at a time)
#: (engine, pool, spec) -> one capacity sweep. Default: loadgen's run_sweep.
SweepFn = Callable[[Any, pl.DataFrame, EndpointSpec], SweepResult]


class CompareFn(Protocol):
    """A verdict of candidate sweeps against a noise floor (loadgen.compare.compare by default);
    ``final=False`` at a look the sequential rule may follow with another repeat (``decided=False``)."""

    def __call__(self, noise: NoiseFloor, sweeps: list[SweepResult], *, final: bool = True) -> Comparison: ...


__all__ = ["CandidateResult", "default_sweep_fn", "judge", "run_candidate", "soak_rate", "stop_orphan"]


class CandidateResult(BaseModel):
    """Everything one measured configuration produced, with its verdict."""

    engine_args: list[str]
    sweeps: list[SweepResult] = Field(default_factory=list)
    comparison: Comparison | None = None
    correctness: CorrectnessReport | None = None
    reference: ReferenceOutputs | None = None  # captured here (baseline measurements only)
    verdict: Verdict
    confirmed: bool = False  # better, and every repeat beat the noise floor
    invalid_reason: str | None = None
    identity: dict[str, Any] = Field(default_factory=dict)
    wall_s: float = 0.0
    startup_s: float | None = None  # launch to healthy (measured; the budget estimator uses it)
    sweep_wall_s: list[float] = Field(default_factory=list)  # wall time of each sweep, drains included
    log_tail: str | None = None
    soak: SoakResult | None = None  # sustained load at its capacity, before adoption (loadgen.soak)

    @property
    def capacities(self) -> list[float]:
        return [s.capacity_rps or 0.0 for s in self.sweeps]


def default_sweep_fn(**kwargs) -> SweepFn:
    """loadgen's capacity sweep, with fixed keyword arguments (e.g. an explicit rate ladder)."""
    from loadgen.sweep import run_sweep  # imported late: loadgen is optional for unit tests of judging

    def sweep(engine, pool: pl.DataFrame, spec: EndpointSpec) -> SweepResult:
        return run_sweep(engine, pool, spec, **kwargs)

    return sweep


def ladder_near(spec: EndpointSpec, baseline: NoiseFloor | None) -> EndpointSpec:
    """``spec`` whose ladder (a fixed ``sweep.rates``) begins near the baseline's capacity
    (loadgen.ladder.rungs_from): on the CPU default a working baseline at 2.5 req/s skips the 0.7 and
    1.0 req/s rungs, 24 and 20 s steps that both sides hold, about a quarter of each sweep."""
    from loadgen.ladder import rungs_from

    if baseline is None or not spec.sweep.rates:
        return spec
    rates = rungs_from(list(spec.sweep.rates), baseline.capacity_fit_rps or baseline.capacity_mean)
    if rates == list(spec.sweep.rates):
        return spec
    return spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"rates": rates})})


def soak_rate(sweeps: list[SweepResult]) -> float | None:
    """The rate a soak holds first: the mean fitted capacity of the sweeps (their rung capacity where none
    was fitted), or less where the sweeps judge by the service rate and it is lower; None when no rate held.

    No engine sustains more than it serves: short steps above the service rate pass the SLA while their
    queue is still short. The main job's prefix caching crossed at 2.35 req/s and served 1.49; its soak
    backed off 2.35 -> 1.88 -> 1.51 and ran out of back-offs at the SLA's edge (an ``invalid`` win)."""
    from loadgen.queue_rate import service_rate

    rates = [s.capacity_fit_rps if s.capacity_fit_rps is not None else s.capacity_rps for s in sweeps]
    rates = [r for r in rates if r]
    if not rates:
        return None
    crossing = sum(rates) / len(rates)
    if sweeps[0].estimator != "service_rate":
        return crossing
    served = service_rate([st for s in sweeps if s.validity == "valid" for st in s.steps])
    return min(crossing, served.rate) if served is not None and served.rate else crossing


def _soak(
    engine,
    pool: pl.DataFrame,
    spec: EndpointSpec,
    sweeps: list[SweepResult],
    progress: Progress,
    deadline: float | None = None,
) -> SoakResult | None:
    from loadgen.soak import run_soak

    rate = soak_rate(sweeps)
    if rate is None:
        progress("  soak skipped: no rate held within the SLA")
        return None
    return run_soak(engine, pool, spec, rate, progress=progress, deadline=deadline)


def _sustained(
    judged, soak: SoakResult, baseline_sustained: float | None, baseline_noise: NoiseFloor | None, progress: Progress
):
    """A confirmed ``better`` whose soak backed off: kept only when the rate it sustained beats the
    baseline's sustained rate (its measured capacity when its soak is unknown); else ``same``."""
    floor = (
        baseline_sustained
        if baseline_sustained is not None
        else (baseline_noise.capacity_mean if baseline_noise is not None else None)
    )
    if floor is None or soak.rate > floor:
        progress(
            f"  sustained {soak.rate:.3g} req/s, above the baseline's {floor:.3g}"
            if floor
            else f"  sustained {soak.rate:.3g} req/s"
        )
        return judged
    verdict, _confirmed, reason, comparison = judged
    why = (
        f"under sustained load it held {soak.rate:.3g} req/s (its sweeps: {soak.measured_rate:.3g}), not above "
        f"the baseline's {floor:.3g}: the short steps' gain does not survive a soak"
    )
    progress(f"  verdict same: {why}")
    if comparison is not None:
        comparison = comparison.model_copy(update={"verdict": "same", "evidence": f"{why}. {comparison.evidence}"})
    return "same", False, reason, comparison


def _stable_where_the_baseline_died(judged, soak: SoakResult, progress: Progress):
    """A `same` on short steps whose soak held where the working baseline's soak died: `better`, by the
    rate it sustains (the baseline sustained none), with the short steps' effect kept as evidence."""
    _verdict, _confirmed, reason, comparison = judged
    why = (
        f"stable under sustained load at {soak.rate:.3g} req/s where the working baseline died in its own "
        "soak (it sustains none of its short-step capacity)"
    )
    progress(f"  verdict better: {why}")
    if comparison is not None:
        comparison = comparison.model_copy(update={"verdict": "better", "evidence": f"{why}. {comparison.evidence}"})
    return "better", True, reason, comparison


def judge(
    sweeps: list[SweepResult],
    noise: NoiseFloor | None,
    spec: EndpointSpec,
    compare_fn: CompareFn | None = None,
    *,
    final: bool = True,
) -> tuple[Verdict, bool, str | None, Comparison | None]:
    """Verdict of finished sweeps against a noise floor: (verdict, confirmed, invalid_reason, comparison).

    Pure, so the rules are unit-testable on constructed SweepResults.
    """
    if not sweeps:
        return "invalid", False, "no sweep finished", None
    for i, sweep in enumerate(sweeps):
        if sweep.validity != "valid":
            return "invalid", False, f"sweep {i + 1}: {sweep.invalid_reason or 'invalid'}", None
        bad_steps = [s for s in sweep.steps if s.validity != "valid"]
        if bad_steps:
            return (
                "invalid",
                False,
                f"sweep {i + 1} step {bad_steps[0].target_rate} req/s: {bad_steps[0].invalid_reason}",
                None,
            )
        if sweep.steps:
            first = min(sweep.steps, key=lambda s: s.target_rate)
            # Timeouts are what overload looks like (an SLA failure, capacity 0); other errors
            # (HTTP 4xx/5xx, refused connections) mean the configuration itself is broken.
            broken = [e for e in first.error_examples if not e.lower().startswith("timeout")]
            if first.error_rate > spec.sla.max_error_rate and (broken or not first.error_examples):
                return (
                    "invalid",
                    False,
                    f"sweep {i + 1}: error rate {first.error_rate:.1%} at the lowest rate "
                    f"{first.target_rate} req/s exceeds the SLA's limit {spec.sla.max_error_rate:.1%}",
                    None,
                )
    if noise is None:
        return "same", False, None, None
    from loadgen.compare import compare

    comparison = (compare_fn or compare)(noise, sweeps, final=final)
    if comparison.effect_low is not None or (comparison.mde is not None and comparison.verdict == "better"):
        return _verdict_of(comparison)
    base_max = max(comparison.baseline_capacities or [comparison.baseline_capacity])
    confirmed = comparison.verdict == "better" and all(
        c >= comparison.baseline_capacity * (1 + comparison.threshold) and c > base_max
        for c in comparison.candidate_capacities
    )
    reason = comparison.evidence if comparison.verdict == "invalid" else None
    return comparison.verdict, confirmed, reason, comparison


def _verdict_of(comparison: Comparison) -> tuple[Verdict, bool, str | None, Comparison]:
    """An interval verdict's outcome: better means its interval clears 0 at the stated error rate."""
    reason = comparison.evidence if comparison.verdict == "invalid" else None
    return comparison.verdict, comparison.verdict == "better", reason, comparison


def run_candidate(
    spec: EndpointSpec,
    engine_args: list[str],
    pool: pl.DataFrame,
    baseline_noise: NoiseFloor | None,
    repeats: int,
    *,
    lossy: bool = False,
    reference: ReferenceOutputs | None = None,
    capture: bool = False,
    thresholds: CorrectnessThresholds | None = None,
    workdir: Path | None = None,
    active_file: Path | None = None,
    sweep_fn: SweepFn | None = None,
    compare_fn: CompareFn | None = None,
    progress: Progress = print,
    extra_repeats: int = 2,
    soak: bool | None = None,
    baseline_sustained: float | None = None,
    purpose: str | None = None,
    deadline: float | None = None,
) -> CandidateResult:
    """Measure ``engine_args`` on ``pool`` and judge it against ``baseline_noise``.

    ``reference``: outputs to check correctness against (skipped when None); ``capture``: record
    this configuration's outputs as the reference instead (the campaign's first baseline).
    ``extra_repeats``: against a baseline with per-request samples, up to this many more sweeps while
    the verdict's interval still straddles the decision (the sequential rule, loadgen.verdict).
    ``soak``: a configuration that would be adopted (a confirmed ``better``) and a captured baseline are
    then held at their capacity on the same engine (``spec.soak``, loadgen.soak); a candidate unstable
    there is ``invalid: unstable under sustained load``; an unstable baseline is reported, not rejected.
    None (the default): soak when measuring with the product's own sweep, not when the caller hands in
    a ``sweep_fn`` of its own (a test's instrument decides what it measures). A candidate whose soak had
    to back off is judged by the rate it sustained: it must beat ``baseline_sustained`` (the rate the
    baseline's own soak held; its measured capacity when it had none), else its verdict is ``same``.
    ``baseline_sustained`` 0: the baseline died in its own soak; a `same` candidate is soaked too, and one
    that holds is `better` (it sustains what the baseline cannot). ``deadline`` (``time.monotonic()``):
    the end of the caller's time window (a campaign's deadline, a call's window); no extra repeat begins
    that the last sweep says would run past it (the sweeps measured are judged as the final look), and the
    soak begins no back-off that would.
    ``active_file``: where the running engine's pid is recorded while it runs, so that a resumed
    campaign can stop an engine its killed predecessor left behind (see :func:`stop_orphan`).
    ``purpose``: the call site, for the engine's logs and errors (default "baseline" when capturing, else
    "candidate"; the experiment unit says "unit"). The engine runs in :func:`engines.run_engine`: a
    failed launch, or an engine that dies or hangs while measured, is an ``invalid`` verdict with the tail.
    """
    from engines import EngineError, EngineRunInvalid, run_engine

    soak = sweep_fn is None if soak is None else soak
    sweep_fn = sweep_fn or default_sweep_fn()
    started = time.monotonic()
    result = CandidateResult(engine_args=list(engine_args), verdict="invalid")

    def done(reason: str | None = None, log_tail: str | None = None) -> CandidateResult:
        if reason:
            result.verdict, result.invalid_reason = "invalid", reason
            progress(f"  invalid: {reason.splitlines()[0]}")
        result.log_tail = log_tail
        result.wall_s = time.monotonic() - started
        return result

    # engines.run_engine owns launch, health, stop and the orphan guard (``active_file``); a failed
    # launch, or an engine that dies or hangs while measured, comes out as EngineRunInvalid.
    try:
        with run_engine(
            spec,
            workdir=workdir,
            purpose=purpose or ("baseline" if capture else "candidate"),
            args_override=list(engine_args),
            active_file=active_file,
            progress=progress,
        ) as engine:
            result.startup_s = engine.startup_s  # launch to healthy; also kept in each SweepResult
            started += engine.gpu_wait_s  # waiting for a free GPU held none: not charged to the budget
            judged = _measure(
                engine, spec, engine_args, pool, baseline_noise, repeats, result, done, lossy=lossy,
                reference=reference, capture=capture, thresholds=thresholds, sweep_fn=sweep_fn,
                compare_fn=compare_fn, progress=progress, extra_repeats=extra_repeats, soak=soak,
                baseline_sustained=baseline_sustained, deadline=deadline,
            )  # fmt: skip
    except EngineRunInvalid as exc:  # failed to launch, or died / hung while measured: invalid, with the log tail
        reason = exc.reason if exc.launch_failed else f"engine failed: {exc.reason}"
        return done(reason, exc.log_tail or str(exc.__cause__ or exc)[-4000:])
    except EngineError as exc:  # the engine answered, but not as asked (e.g. a metrics scrape refused)
        return done(f"engine failed: {str(exc).splitlines()[0]}", getattr(exc, "log_tail", None) or str(exc)[-4000:])
    except Exception as exc:  # a bad candidate must never end the campaign
        return done(f"measurement failed: {exc!r}", traceback.format_exc()[-4000:])
    if isinstance(judged, CandidateResult):  # ended early (correctness, soak): already judged invalid
        return judged
    verdict, confirmed, reason, comparison = judged
    result.verdict, result.confirmed, result.comparison = verdict, confirmed, comparison
    if verdict == "invalid":
        return done(reason or "invalid")
    if comparison is not None:
        progress(f"  verdict {verdict}{' (confirmed)' if confirmed else ''}: {comparison.evidence}")
    return done()


def _measure(
    engine,
    spec: EndpointSpec,
    engine_args: list[str],
    pool: pl.DataFrame,
    baseline_noise: NoiseFloor | None,
    repeats: int,
    result: CandidateResult,
    done: Callable[..., CandidateResult],
    *,
    lossy: bool,
    reference: ReferenceOutputs | None,
    capture: bool,
    thresholds: CorrectnessThresholds | None,
    sweep_fn: SweepFn,
    compare_fn: CompareFn | None,
    progress: Progress,
    extra_repeats: int,
    soak: bool,
    baseline_sustained: float | None,
    deadline: float | None = None,
):
    """The measurement on a started engine: correctness, sweeps, sequential repeats, soak. Returns the
    judgement (verdict, confirmed, reason, comparison), or ``done(...)``'s result when it ended early."""
    identity = engine.identity
    result.identity = {
        "engine": identity.engine,
        "engine_version": identity.engine_version,
        "model": identity.model,
        "launch_config_hash": identity.launch_config_hash,
        "launch_command": list(identity.launch_command),
    }
    if identity.overlays:  # runtime overlays and patches, by content hash (engines.overlays)
        result.identity["overlays"] = {name: sha for name, sha in identity.overlays}
    try:
        # The adapter says which evidence the engine gives (can_give) and which fields it rejects.
        adapter = getattr(engine, "adapter", None)
        if capture:
            progress("  capturing reference outputs")
            result.reference = capture_reference(
                engine.base_url, engine.served_model, engine_args, thresholds=thresholds, adapter=adapter
            )
            progress(
                f"  reference outputs: evidence {result.reference.evidence}"
                + (f" ({result.reference.note})" if result.reference.note else "")
            )
        elif reference is not None:
            progress("  correctness check (" + ("lossy" if lossy else "lossless") + ")")
            result.correctness = check_candidate(
                engine.base_url,
                engine.served_model,
                reference,
                engine_args,
                lossy=lossy,
                thresholds=thresholds,
                adapter=adapter,
            )
            if lossy and spec.model.weights == "random":
                result.correctness = unmeasurable_quality(result.correctness)
            progress("  " + result.correctness.summary())
            # no evidence at all ("none") is not the change's fault: it is measured, and never adopted
            if not result.correctness.passed and result.correctness.evidence != "none":
                return done(f"correctness failed: {result.correctness.reason}")
    except CorrectnessUnavailable as exc:
        engine.check_alive()
        return done(f"correctness check could not run: {exc}")
    i, decided_early = 0, None
    sweep_spec = ladder_near(spec, baseline_noise)
    while True:  # `repeats` sweeps, then more only while the sequential rule asks for them
        engine.check_alive()
        sweep_started = time.monotonic()
        sweep = sweep_fn(engine, pool, sweep_spec)
        sweep_wall = time.monotonic() - sweep_started
        result.sweep_wall_s.append(sweep_wall)
        result.sweeps.append(sweep)
        held = (
            f"below {sweep.capacity_below_rps:g} req/s (no rate held down to the floor)"
            if sweep.capacity_method == "below_floor"
            else f"{sweep.capacity_rps:.3g} req/s"
        )
        fit = (
            f" (fitted {sweep.capacity_fit_rps:.3g}, 95% {sweep.capacity_fit_low:.3g}-{sweep.capacity_fit_high:.3g})"
            if sweep.capacity_fit_rps is not None
            else ""
        )
        progress(
            f"  sweep {i + 1}/{max(repeats, i + 1)}: capacity {held}{fit} in {sweep_wall:.0f} s"
            + (f" (invalid: {sweep.invalid_reason})" if sweep.validity != "valid" else "")
        )
        if sweep.validity != "valid":
            break
        i += 1
        if i < repeats:
            continue
        if i >= repeats + extra_repeats or baseline_noise is None or not baseline_noise.steps:
            break
        # a repeat that confirms a candidate is followed by its soak: both must end in the window, or the
        # soak eats the time kept after it (the main job's production-shaped verification once)
        soak_s = spec.soak.pass_s if soak and not capture and spec.soak.hold_s > 0 else 0.0
        if deadline is not None and time.monotonic() + sweep_wall + soak_s > deadline:
            # no room for another repeat: what was measured is judged as the final look (its error rate
            # is that look's, as the sequential verdict's own time rule does)
            progress("  no time for another repeat before the deadline: judged on the sweeps measured")
            break
        # sequential rule: another repeat only while the interval still straddles the decision
        look = judge(result.sweeps, baseline_noise, spec, compare_fn, final=False)
        if look[3] is None or look[3].decided:
            decided_early = look  # judged at that look's error rate: that judgement is the verdict
            break
        progress(f"  {look[3].evidence.split('. ')[0]}: one more repeat")
    engine.check_alive()
    judged = decided_early or judge(result.sweeps, baseline_noise, spec, compare_fn)
    # A baseline that died in its own soak sustains nothing (baseline_sustained 0): a candidate the short
    # steps call `same` is soaked too, since surviving where the baseline died is the gain production sees.
    baseline_unstable = baseline_sustained == 0.0 and not capture
    wants_soak = capture or (judged[0] == "better" and judged[1]) or (baseline_unstable and judged[0] == "same")
    if soak and spec.soak.hold_s > 0 and wants_soak:
        result.comparison = judged[3]  # kept when the soak rejects it: what the sweeps had shown
        result.soak = _soak(engine, pool, spec, result.sweeps, progress, deadline)
        if result.soak is not None and result.soak.outcome == "unstable":
            engine.died_as_measured = True  # a death in the soak is its finding, not a crash of the measurement
            if not capture:
                return done(
                    "unstable under sustained load: " + "; ".join(result.soak.reasons),
                    result.soak.log_tail or engine.log_tail(),
                )
            progress(
                "  the baseline is unstable under sustained load (a finding: " + "; ".join(result.soak.reasons) + ")"
            )
        elif result.soak is not None and result.soak.outcome == "unmeasured":
            if not capture:  # nothing is adopted on a soak that said nothing about the engine
                return done("soak unmeasured: " + "; ".join(result.soak.reasons))
            progress("  the baseline's soak could not be measured: " + "; ".join(result.soak.reasons))
        elif result.soak is not None and not capture and result.soak.backed_off:
            judged = _sustained(judged, result.soak, baseline_sustained, baseline_noise, progress)
        if result.soak is not None and result.soak.outcome == "stable" and baseline_unstable and judged[0] == "same":
            judged = _stable_where_the_baseline_died(judged, result.soak, progress)
        if not engine.died_as_measured:
            engine.check_alive()
    return judged
