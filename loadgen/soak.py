"""Soak: a configuration held at its measured capacity for a sustained period, then briefly above it.

Short sweep steps cannot see what breaks under sustained load. On the H200 two configurations held
8-second steps and then died with ``torch.OutOfMemoryError`` within a minute of steady traffic; a
campaign built on steps alone would have adopted them. The harness therefore soaks every
configuration it would adopt (research.harness), in three phases on one warm engine:

1. **hold** at the measured capacity for ``soak.hold_s``. Unstable when the engine dies, when errors
   pass the SLA's error limit, when an SLA target's fraction of requests over its limit is clearly past
   its allowance (``soak.sla_tolerance`` times it), or when TTFT keeps climbing: the last third of the
   hold's requests wait longer than the first third beyond chance (a one-sided Mann-Whitney test), by
   more than half the TTFT limit, or most of them never see a first token while most of the first
   third did: a leak or a queue that grows without bound. A growing queue or a broken SLA (not a
   death, an OOM or errors) is held again at ``soak.backoff_factor`` times the rate, up to
   ``soak.backoffs`` times: short steps overstate what an engine sustains (the 2-core main job's
   prefix caching: 2.34 req/s from its sweeps, TTFT from 1.6 s to 8.9 s within a minute there), and
   the rate it does sustain is what the harness then judges it by.
2. **overload** at ``soak.overload_factor`` times the held rate for ``soak.overload_s``;
3. **recovery** at half the held rate for ``soak.recovery_s``: the engine should queue under overload and
   recover once load drops. It crashed (unstable), or it recovered (its recovery's second half waits no
   longer than the hold did, plus half the limit), or it did not (unstable), or it shed load with errors.

A dead engine's log tail is kept and read for its cause: an out-of-memory error is named as such.
"""

from __future__ import annotations

import math
import re
import time
from typing import Callable

import numpy as np
import polars as pl
from pydantic import BaseModel, Field

from specs.enums import SoakOutcome
from specs.config import EndpointSpec
from loadgen import arrivals
from loadgen.results import RequestRecord, StepResult
from loadgen.watch import Engine

# "unmeasured": the client could not keep the hold's schedule twice (a busy host, not the engine), or the
# hold gave too few TTFTs to test its queue: the soak says nothing about the engine, and the harness makes
# the verdict invalid for that reason.
Outcome = SoakOutcome
OOM_PATTERN = re.compile(
    r"OutOfMemoryError|CUDA out of memory|out of memory|Cannot allocate memory|"
    r"MemoryError|oom-kill|Killed process",
    re.IGNORECASE,
)
GROWTH_P = 0.01  # significance of "TTFT keeps climbing"
# what a lower rate may cure; a death, an OOM or errors it may not (errors that are only waits, timeouts
# and requests cut at the drain, are the queue's: they do not stop a back-off)
BACKS_OFF = ("queue growth", "sla")


class SoakResult(BaseModel):
    """What a soak found; ``outcome`` is what the harness acts on, ``reasons`` say why."""

    rate: float  # req/s of the last hold: the measured capacity, or less after back-offs
    measured_rate: float | None = None  # the capacity the sweeps measured, where the soak began
    held_s: float  # seconds actually held at that rate (less when the engine died)
    overload_rate: float | None = None
    overload_s: float = 0.0
    outcome: Outcome = "stable"
    reasons: list[str] = Field(default_factory=list)
    # "oom", "engine died", "queue growth", "sla", "errors", "no recovery"; unmeasured: "client fell behind",
    # "too few TTFTs"
    diagnosis: str | None = None
    overload: str | None = None  # "queued and recovered", "shed load with errors", "crashed", "did not recover"
    requests: int = 0
    error_rate: float | None = None
    # errors other than waits (a timeout, a request cut at the drain): what a lower rate cannot cure
    failure_rate: float | None = None
    error_examples: list[str] = Field(default_factory=list)  # up to 5 distinct error texts of the hold
    over_fraction: dict[str, float] = Field(default_factory=dict)  # per SLA target, over the hold
    ttft_first_ms: float | None = None  # median TTFT of the hold's first third of requests
    ttft_last_ms: float | None = None  # ... and of its last third
    growth_p: float | None = None  # one-sided p of "the last third waits longer"
    recovery_ttft_ms: float | None = None  # median TTFT of the recovery's second half
    backed_off: list[str] = Field(default_factory=list)  # earlier holds: "rate: what broke there"
    cut_short: str | None = None  # a back-off the caller's time window left no room for
    wall_s: float = 0.0
    log_tail: str | None = None

    @property
    def sustained_rate(self) -> float | None:
        """The rate this configuration held stable (None unless the soak was stable)."""
        return self.rate if self.outcome == "stable" else None

    def summary(self) -> str:
        backed = (
            f" (x{self.rate / self.measured_rate:.2g} of the measured {self.measured_rate:.3g} after "
            f"{len(self.backed_off)} back-off(s))"
            if self.backed_off and self.measured_rate
            else ""
        )
        head = f"soak {self.outcome}: {self.rate:.3g} req/s{backed} held {self.held_s:.0f} s" + (
            f", overload x{self.overload_rate / self.rate:.2g} {self.overload}"
            if self.overload_rate and self.overload
            else ""
        )
        return (
            head
            + (f" ({'; '.join(self.reasons)})" if self.reasons else "")
            + (f"; {self.cut_short}" if self.cut_short else "")
        )

    def metadata(self) -> dict:
        """The JSON-able fields a record or a report keeps (no log tail)."""
        return self.model_dump(exclude={"log_tail"})


def _ttft_ms(records: list[RequestRecord], end_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send time s, TTFT ms, TTFT is only a lower bound) of requests sent and not failed. A request cut
    before its first token waited at least until the cut (``end_s``): that bound is all that is known."""
    sent, ttft, bound = [], [], []
    for r in records:
        if r.sent_s is None or not (r.ok or r.cut):
            continue
        sent.append(r.sent_s)
        ttft.append(1000 * (r.ttft_s if r.ttft_s is not None else max(0.0, end_s - r.sent_s)))
        bound.append(r.ttft_s is None)
    return np.asarray(sent, dtype=float), np.asarray(ttft, dtype=float), np.asarray(bound, dtype=bool)


def rank_sum_p(x: np.ndarray, y: np.ndarray) -> float:
    """One-sided p of "x tends to be larger than y": the Mann-Whitney U test in its normal approximation
    with tie and continuity corrections (scipy's ``mannwhitneyu(x, y, alternative="greater",
    method="asymptotic")``). Written with numpy because the soak runs on GPU machines whose image has
    no scipy and whose calls cannot carry it; the approximation is what scipy itself uses for samples
    of this size."""
    n1, n2 = len(x), len(y)
    values, inverse, counts = np.unique(np.concatenate([x, y]), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # average rank of each tie group, from 1
    n = n1 + n2
    u = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2
    tie = float((counts.astype(float) ** 3 - counts).sum()) / (n * (n - 1))
    sd = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie))
    if sd == 0:
        return 1.0
    return 0.5 * math.erfc(((u - n1 * n2 / 2.0) - 0.5) / sd / math.sqrt(2))


MIN_TTFTS = 9  # three per third: fewer cannot tell a growing queue from a steady one


def queue_growth(
    records: list[RequestRecord], end_s: float, limit_ms: float
) -> tuple[float | None, float | None, float | None, bool | None]:
    """(first-third median TTFT, last-third median, p, grows): TTFT by send time over one run. A request
    that never saw its first token ranks above every one that did (it waited past the drain); its
    median contribution is its lower bound, so a last-third median is then a lower bound too. With
    fewer than MIN_TTFTS TTFTs ``grows`` is None: unmeasured, never "does not grow"."""
    sent, ttft, bound = _ttft_ms(records, end_s)
    if ttft.size < MIN_TTFTS:
        return None, None, None, None
    order = np.argsort(sent)
    third = ttft.size // 3
    ranked = np.where(bound, np.inf, ttft)
    first, last = order[:third], order[-third:]
    p = rank_sum_p(ranked[last], ranked[first])
    m_first, m_last = float(np.median(ttft[first])), float(np.median(ttft[last]))
    # most of the last third never saw a first token while most of the first third did: it waited past
    # the cut, however short that bound looks for a request sent late
    starved = bound[last].mean() > 0.5 and bound[first].mean() <= 0.5
    grows = p < GROWTH_P and (m_last - m_first > 0.5 * limit_ms or starved)
    return m_first, m_last, p, grows


def over_fractions(step: StepResult) -> dict[str, tuple[float, float]]:
    """Per SLA target: (fraction of values over the limit, the allowance), from the step's samples."""
    s = step.sla_samples
    out = {}
    for i, name in enumerate(("ttft", "itl", "e2e")):
        over, n = s.get(f"{name}_over"), s.get(f"{name}_n")
        if over is not None and n is not None and sum(n) > 0:
            out[name] = (sum(over) / sum(n), float(s["allowance"][i]))
    return out


def kept_tail(log: str, size: int = 4000) -> str:
    """The part of an engine log worth keeping: around its out-of-memory error if it names one (the
    shutdown that follows can be longer than the error), else its end."""
    found = None
    for found in OOM_PATTERN.finditer(log or ""):
        pass  # the last one: the error that ended it, not an earlier warning
    if found is None:
        return (log or "")[-size:]
    return log[max(0, found.start() - size // 2) : found.start() + size // 2]


def death_cause(log_tail: str) -> str:
    """What the engine's log says killed it: "oom" when it names an out-of-memory error."""
    return "oom" if OOM_PATTERN.search(log_tail or "") else "engine died"


def run_soak(
    engine: Engine,
    pool: pl.DataFrame,
    spec: EndpointSpec,
    rate: float,
    *,
    progress: Callable[[str], None] | None = None,
    deadline: float | None = None,
) -> SoakResult:
    """Soak ``engine`` at ``rate`` (its measured capacity) as ``spec.soak`` says; see the module doc.

    A hold that finds only a growing queue or a broken SLA is tried again at ``soak.backoff_factor``
    times its rate (up to ``soak.backoffs`` times): short steps overstate what an engine sustains, so
    such a hold says "not at this rate", and the rate the engine does sustain is the finding.
    ``deadline`` (``time.monotonic()``): the end of the caller's time window (a GPU machine lent for
    minutes). A back-off whose hold, overload and recovery would run past it is not begun: the last hold
    stands, and the result says so (``cut_short``)."""
    from loadgen.step import drain_cap, runner_for

    cfg, say = spec.soak, progress or (lambda _m: None)
    started = time.monotonic()
    soak = _Soak(
        engine, spec, runner_for(engine, pool, spec, rate * cfg.overload_factor), drain_cap(spec.sla, spec.sweep), say
    )
    backed_off: list[str] = []
    for attempt in range(cfg.backoffs + 1):
        held = rate * cfg.backoff_factor**attempt
        result = soak.hold(held)
        result.measured_rate, result.backed_off = rate, list(backed_off)
        if (
            attempt == cfg.backoffs
            or result.diagnosis not in BACKS_OFF
            or (result.failure_rate or 0.0) > spec.sla.max_error_rate
        ):
            break
        backed_off.append(f"{held:.3g} req/s: " + "; ".join(result.reasons))
        if deadline is not None and time.monotonic() + cfg.pass_s > deadline:
            result.cut_short = f"no back-off below {held:.3g} req/s: the call's window ends before another hold"
            say(f"  soak: {result.diagnosis} at {held:.3g} req/s; {result.cut_short}")
            break
        say(f"  soak: {result.diagnosis} at {held:.3g} req/s; holding x{cfg.backoff_factor:g} of it")
    if result.diagnosis not in ("oom", "engine died") and result.outcome != "unmeasured" and cfg.overload_s > 0:
        soak.overload(result)
    result.wall_s = time.monotonic() - started
    say("  " + result.summary())
    return result


def waited_out(record: RequestRecord) -> bool:
    """A request that failed only by waiting: it timed out or was still in flight at the drain (a queue's
    symptom, which a lower rate cures), not an error the engine answered with or a broken connection."""
    return record.cut or (record.error or "").startswith("timeout")


def failure_rate(records: list[RequestRecord]) -> float | None:
    """The share of requests that failed other than by waiting (``waited_out``); None without requests."""
    if not records:
        return None
    return sum(1 for r in records if not r.ok and not waited_out(r)) / len(records)


class _Soak:
    """The phases of one soak on one engine and one runner (its request offsets run on across phases)."""

    def __init__(self, engine: Engine, spec: EndpointSpec, runner, drain: float, say: Callable[[str], None]):
        self.engine, self.spec, self.runner, self.drain, self.say = engine, spec, runner, drain, say
        self.limit_ms = float(spec.sla.ttft_ms or spec.sla.e2e_ms or 1000.0)
        self.seen: dict = {}

    def run(self, phase: str, rate: float, seconds: float) -> tuple[StepResult, list[RequestRecord]]:
        from loadgen.step import step_seed

        sweep = self.spec.sweep
        schedule = arrivals.schedule(
            sweep.arrival, rate, seconds, burstiness=sweep.burstiness, seed=step_seed(sweep.seed + 7, rate)
        )
        keep: dict = {}
        step = self.runner.run(
            schedule,
            seconds,
            rate,
            f"soak-{phase}",
            keep=keep,
            offset=self.runner.take(len(schedule), 0),
            drain_s=self.drain,
        )
        self.seen["step"] = step  # what was sent before a death, for the record
        self.engine.check_alive()
        return step, keep.get("records", [])

    def died(self, result: SoakResult, phase: str, exc: Exception) -> SoakResult:
        try:  # the engine's last 20000 lines: its shutdown chatter (an error per aborted request: 2651
            # lines after a planted OOM with 16 sequences running, tests/test_soak_engine.py) pushes the
            # cause out of a short tail
            tail = self.engine.log_tail(20000) or getattr(exc, "log_tail", "") or ""
        except Exception:  # noqa: BLE001 - an external engine has no log here
            tail = getattr(exc, "log_tail", "") or ""
        result.outcome, result.diagnosis, result.log_tail = "unstable", death_cause(tail), kept_tail(tail) or None
        cause = "out of memory" if result.diagnosis == "oom" else str(exc).splitlines()[0]
        result.reasons.append(f"engine died during the {phase} ({cause})")
        if phase == "hold" and "step" in self.seen:
            step = self.seen["step"]
            result.requests, result.error_rate, result.error_examples = (
                step.requests,
                step.error_rate,
                list(step.error_examples),
            )
        if phase != "hold":
            result.overload = "crashed"
        return result

    def hold(self, rate: float) -> SoakResult:
        """Hold ``rate`` for ``soak.hold_s`` and judge it: death, errors, the SLA, a growing queue."""
        from engines.base import EngineCrashed
        from loadgen.step import client_bound, wait_idle

        cfg, sla = self.spec.soak, self.spec.sla
        result = SoakResult(rate=rate, held_s=0.0)
        wait_idle(self.engine, 60.0)
        self.runner.reset()
        self.seen.clear()
        self.say(f"  soak: holding {rate:.3g} req/s for {cfg.hold_s:g} s")
        began = time.monotonic()
        try:
            step, records = self.run("hold", rate, cfg.hold_s)
            if step.validity != "valid" and client_bound(step):  # the host, not the engine: once more
                self.say(f"  soak: the client fell behind ({step.invalid_reason}); holding again")
                wait_idle(self.engine, 60.0)
                step, records = self.run("hold", rate, cfg.hold_s)
        except EngineCrashed as exc:
            result.held_s = time.monotonic() - began
            return self.died(result, "hold", exc)
        result.held_s, result.requests, result.error_rate = cfg.hold_s, step.requests, step.error_rate
        result.error_examples = list(step.error_examples)
        result.failure_rate = failure_rate(records)
        if step.validity != "valid" and client_bound(step):
            result.outcome, result.diagnosis = "unmeasured", "client fell behind"
            result.reasons.append(f"the hold could not be measured: {step.invalid_reason}")
            return result
        if step.validity != "valid":
            result.outcome, result.diagnosis = "unstable", "invalid run"
            result.reasons.append(f"the hold could not be measured: {step.invalid_reason}")
        if step.error_rate > sla.max_error_rate:  # errors that are only waits are the queue's: "sla"
            waits_only = (result.failure_rate or 0.0) <= sla.max_error_rate
            result.outcome, result.diagnosis = "unstable", "sla" if waits_only else "errors"
            example = f" (e.g. {step.error_examples[0][:160]})" if step.error_examples else ""
            result.reasons.append(
                f"error rate {step.error_rate:.1%} at {rate:.3g} req/s > {sla.max_error_rate:.1%}{example}"
            )
        for name, (fraction, allowance) in over_fractions(step).items():
            result.over_fraction[name] = fraction
            if allowance > 0 and fraction > cfg.sla_tolerance * allowance:
                result.outcome, result.diagnosis = "unstable", result.diagnosis or "sla"
                result.reasons.append(
                    f"{name} over its limit for {fraction:.0%} of values at {rate:.3g} req/s "
                    f"(allowance {allowance:.0%}, tolerance x{cfg.sla_tolerance:g})"
                )
        first, last, p, grows = queue_growth(records, cfg.hold_s + self.drain, self.limit_ms)
        result.ttft_first_ms, result.ttft_last_ms, result.growth_p = first, last, p
        if grows is None and result.outcome == "stable":  # too few TTFTs: the queue was never tested
            result.outcome, result.diagnosis = "unmeasured", "too few TTFTs"
            result.reasons.append(
                f"queue growth unmeasured: {len(records)} request(s) at {rate:.3g} req/s over {cfg.hold_s:g} s "
                f"gave fewer than {MIN_TTFTS} first tokens; hold longer (soak.hold_s) to test it"
            )
        if grows:
            result.outcome, result.diagnosis = "unstable", "queue growth"
            result.reasons.append(
                f"TTFT keeps climbing: median {first:.0f} ms in the first third of the hold, "
                f"{last:.0f} ms in the last (p={p:.1g}): a leak or a queue that grows"
            )
        return result

    def overload(self, result: SoakResult) -> None:
        """Overload at ``overload_factor`` times the held rate, then recovery at half of it."""
        from engines.base import EngineCrashed

        cfg, sla, rate = self.spec.soak, self.spec.sla, result.rate
        result.overload_rate, result.overload_s = rate * cfg.overload_factor, cfg.overload_s
        self.say(
            f"  soak: overload {result.overload_rate:.3g} req/s for {cfg.overload_s:g} s, then "
            f"{rate / 2:.3g} req/s for {cfg.recovery_s:g} s"
        )
        try:
            over_step, _ = self.run("overload", result.overload_rate, cfg.overload_s)
            recovery, rec_records = self.run("recovery", rate / 2, max(cfg.recovery_s, 1.0))
        except EngineCrashed as exc:
            self.died(result, "overload", exc)
            return
        sent, ttft, _ = _ttft_ms(rec_records, max(cfg.recovery_s, 1.0) + self.drain)
        late = ttft[sent >= np.median(sent)] if sent.size else ttft
        result.recovery_ttft_ms = float(np.median(late)) if late.size else None
        calm = (result.ttft_first_ms if result.ttft_first_ms is not None else 0.0) + 0.5 * self.limit_ms
        if (
            result.recovery_ttft_ms is None
            or result.recovery_ttft_ms > calm
            or recovery.error_rate > sla.max_error_rate
        ):
            result.overload, result.outcome = "did not recover", "unstable"
            result.diagnosis = result.diagnosis or "no recovery"
            result.reasons.append(
                f"did not recover after x{cfg.overload_factor:g} overload: median TTFT "
                + (f"{result.recovery_ttft_ms:.0f} ms" if result.recovery_ttft_ms is not None else "unmeasured")
                + f" at half the held rate (calm: {calm:.0f} ms)"
            )
        elif over_step.error_rate > sla.max_error_rate:
            result.overload = "shed load with errors"
        else:
            result.overload = "queued and recovered"
