"""Client calibration: the highest rate this machine's client sends on schedule.

Runs the open-loop runner against the nginx null endpoint (which costs the server almost
nothing) at constant rates: doubling from ``start_rate`` until a rate is not sustained, then
bisecting. Sustained = achieved rate within 2% of target, p99 send lag under 1 ms, no errors
(the bounds of the load-generator benchmark). The result is cached per host, CPU count and
sender count under the state directory; sweeps read it to pick senders and to refuse rates the
client cannot hold.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path

from specs import paths
from loadgen import arrivals, nullserver
from loadgen.results import CalibrationPoint, CalibrationResult
from loadgen.runner import LagBounds, run_open_loop

STRICT = LagBounds(p99_ms=1.0, min_rate_ratio=0.98)
BODY = {"messages": [{"role": "user", "content": " ".join(["word"] * 32)}], "max_tokens": 16}


def cache_path() -> Path:
    return paths.home() / "loadgen_calibration.json"


def _key(senders: int) -> str:
    return f"{socket.gethostname()}|cpus={os.cpu_count()}|senders={senders}"


def measure_rate(
    url: str,
    rate: float,
    duration_s: float,
    *,
    senders: int = 1,
    bounds: LagBounds = STRICT,
    model: str = nullserver.NULL_MODEL,
) -> CalibrationPoint:
    """One constant-rate run against ``url``; sustained when valid under ``bounds`` with no errors."""
    outcome = run_open_loop(
        url,
        model,
        [BODY],
        arrivals.constant(rate, duration_s),
        duration_s=duration_s,
        senders=senders,
        lag_bounds=bounds,
        timeout_s=30.0,
    )
    errors = sum(1 for r in outcome.records if not r.ok)
    ok = outcome.valid and errors == 0
    reason = outcome.reason or (f"{errors} errors" if errors else None)
    return CalibrationPoint(
        rate=rate,
        achieved_rate=outcome.achieved_rate,
        send_lag_p99_ms=outcome.send_lag_ms.p99,
        errors=errors,
        sustained=ok,
        reason=reason,
    )


def calibrate(
    *,
    senders: int = 1,
    duration_s: float = 4.0,
    start_rate: float = 500.0,
    max_rate: float = 64000.0,
    bisect_steps: int = 3,
    client_cpus: list[int] | None = None,
    server_cpu: int | None = None,
    save: bool = True,
    progress=None,
    bounds: LagBounds = STRICT,
) -> CalibrationResult:
    """Find the highest constant rate sustained on schedule; cache it unless ``save`` is False.

    ``bounds`` are the benchmark's (p99 lag < 1 ms, rate within 2 %). ``client_cpus`` pins this process (and its sender processes) to those cores for the
    measurement; ``server_cpu`` pins nginx. By default neither is pinned.
    """
    before = os.sched_getaffinity(0)
    if client_cpus:
        os.sched_setaffinity(0, set(client_cpus))
    points: list[CalibrationPoint] = []
    try:
        with nullserver.start(cpu=server_cpu) as server:
            measure_rate(server.url, min(start_rate, 200.0), 1.0, senders=senders, bounds=bounds)  # warm-up

            def trial(rate: float) -> bool:
                point = measure_rate(server.url, rate, duration_s, senders=senders, bounds=bounds)
                points.append(point)
                if progress:
                    progress(point)
                return point.sustained

            lo, hi, rate = 0.0, math.inf, start_rate
            while rate <= max_rate:
                if trial(rate):
                    lo, rate = rate, rate * 2
                else:
                    hi = rate
                    break
            if lo == 0.0 and hi < math.inf:  # not even the start rate: go down
                rate = hi / 2
                while rate >= 10:
                    if trial(rate):
                        lo = rate
                        break
                    hi, rate = rate, rate / 2
            for _ in range(bisect_steps if hi < math.inf and lo > 0 else 0):
                mid = round(math.sqrt(lo * hi), -1)
                if not lo < mid < hi:
                    break
                if trial(mid):
                    lo = mid
                else:
                    hi = mid
    finally:
        os.sched_setaffinity(0, before)
    result = CalibrationResult(
        max_rate=lo,
        senders=senders,
        lag_p99_ms_bound=bounds.p99_ms,
        rate_ratio_bound=bounds.min_rate_ratio,
        duration_s=duration_s,
        points=points,
        host=socket.gethostname(),
        cpus=os.cpu_count() or 1,
        client_cpus=client_cpus,
        measured_at=time.time(),
    )
    if save:
        save_calibration(result)
    return result


def save_calibration(result: CalibrationResult) -> Path:
    path = cache_path()
    data = json.loads(path.read_text()) if path.exists() else {}
    data[_key(result.senders)] = result.model_dump()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)
    return path


def load_calibration(senders: int = 1) -> CalibrationResult | None:
    """The cached calibration of this host for ``senders`` sender processes, if any."""
    path = cache_path()
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        entry = data.get(_key(senders))
        return CalibrationResult(**entry) if entry else None
    except (ValueError, TypeError):
        return None


def client_limit() -> CalibrationResult | None:
    """Per-sender calibration used by sweeps (the single-sender one)."""
    return load_calibration(1)


def senders_for(
    rate: float, cal: CalibrationResult | None, headroom: float = 0.7, max_senders: int | None = None
) -> int:
    """Sender processes needed to send ``rate`` with each at most ``headroom`` x its calibrated limit."""
    if cal is None or cal.max_rate <= 0 or rate <= 0:
        return 1
    cap = max_senders or max(1, (os.cpu_count() or 1))
    return int(min(cap, max(1, math.ceil(rate / (cal.max_rate * headroom)))))
