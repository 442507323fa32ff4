"""Arrival processes: when each request of a run is due, as offsets (seconds) from the run start.

Every function returns a sorted float64 numpy array. Randomness is seeded so a schedule can be
replayed exactly (a noise floor needs identical conditions, including identical schedules).
"""

from __future__ import annotations

import numpy as np

from specs.enums import ArrivalKind


def _check_rate(rate: float) -> None:
    if not np.isfinite(rate) or rate <= 0:
        raise ValueError(f"arrival rate must be a positive number of requests per second, got {rate!r}")


def _limit(gaps_fn, rate: float, duration_s: float | None, n: int | None) -> np.ndarray:
    """Draw gaps until ``n`` arrivals or until ``duration_s`` is covered (exclusive)."""
    if (duration_s is None) == (n is None):
        raise ValueError("give exactly one of duration_s or n")
    if n is not None:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return np.cumsum(gaps_fn(n)) if n else np.zeros(0)
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    expected = rate * duration_s
    out = np.cumsum(gaps_fn(int(expected + 6 * np.sqrt(expected) + 16)))
    while out[-1] < duration_s:  # rare: extend with more gaps
        out = np.concatenate([out, out[-1] + np.cumsum(gaps_fn(len(out)))])
    return out[out < duration_s]


def poisson(rate: float, duration_s: float | None = None, *, n: int | None = None, seed: int = 0) -> np.ndarray:
    """Poisson arrivals: exponential gaps with mean 1/rate. The first request is at the first gap."""
    _check_rate(rate)
    rng = np.random.default_rng(seed)
    return _limit(lambda k: rng.exponential(1.0 / rate, k), rate, duration_s, n)


def gamma(
    rate: float, burstiness: float = 1.0, duration_s: float | None = None, *, n: int | None = None, seed: int = 0
) -> np.ndarray:
    """Gamma-distributed gaps with mean 1/rate and shape ``burstiness`` (vLLM's convention):
    1 = Poisson, < 1 burstier (clustered), > 1 more regular."""
    _check_rate(rate)
    if not np.isfinite(burstiness) or burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness!r}")
    rng = np.random.default_rng(seed)
    return _limit(lambda k: rng.gamma(burstiness, 1.0 / (rate * burstiness), k), rate, duration_s, n)


def constant(rate: float, duration_s: float | None = None, *, n: int | None = None) -> np.ndarray:
    """Evenly spaced arrivals at 0, 1/rate, 2/rate, ..."""
    _check_rate(rate)
    if n is None:
        if duration_s is None or duration_s <= 0:
            raise ValueError("give n or a positive duration_s")
        n = int(np.ceil(rate * duration_s - 1e-9))
    return np.arange(n, dtype=np.float64) / rate


def recorded(timestamps, time_scale: float = 1.0) -> np.ndarray:
    """Recorded arrival times (any unit-seconds clock), shifted to start at 0 and multiplied by
    ``time_scale`` (0.5 replays twice as fast, 2.0 half as fast)."""
    ts = np.sort(np.asarray(timestamps, dtype=np.float64))
    if ts.size == 0:
        return ts
    if not np.all(np.isfinite(ts)):
        raise ValueError("recorded timestamps contain NaN or infinity")
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    return (ts - ts[0]) * time_scale


def interval_counts(timestamps, interval_s: float) -> np.ndarray:
    """Requests per interval of ``interval_s`` seconds, from the first timestamp on."""
    ts = np.asarray(timestamps, dtype=np.float64)
    if ts.size == 0:
        return np.zeros(0, dtype=np.int64)
    if interval_s <= 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s}")
    rel = ts - ts.min()
    bins = int(np.floor(rel.max() / interval_s)) + 1
    return np.bincount(np.minimum((rel / interval_s).astype(np.int64), bins - 1), minlength=bins)


def production_shaped(
    *,
    counts=None,
    timestamps=None,
    interval_s: float = 60.0,
    time_scale: float = 1.0,
    rate_scale: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """Production-shaped arrivals: per-interval request counts (given, or taken from production
    ``timestamps``), with send times drawn uniformly at random inside each interval.

    ``time_scale`` shrinks or stretches the intervals (0.1 plays an hour in six minutes, with the
    same count per interval, i.e. 10x the rate); ``rate_scale`` multiplies every interval's count
    (fractional parts are drawn at random so the expected total is exact).
    """
    if (counts is None) == (timestamps is None):
        raise ValueError("give exactly one of counts or timestamps")
    if counts is None:
        counts = interval_counts(timestamps, interval_s)
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or np.any(counts < 0) or not np.all(np.isfinite(counts)):
        raise ValueError("counts must be a 1-D array of non-negative numbers")
    if time_scale <= 0 or rate_scale < 0:
        raise ValueError("time_scale must be > 0 and rate_scale >= 0")
    rng = np.random.default_rng(seed)
    scaled = counts * rate_scale
    whole = np.floor(scaled)
    per = (whole + (rng.random(len(scaled)) < (scaled - whole))).astype(np.int64)
    width = interval_s * time_scale
    starts = np.repeat(np.arange(len(per)) * width, per)
    return np.sort(starts + rng.random(starts.size) * width)


def conditioned(gaps_fn, rate: float, duration_s: float) -> np.ndarray:
    """Exactly ``round(rate * duration_s)`` arrivals in ``[0, duration_s)`` with the process's gap shape.

    A sweep step labelled "2 req/s" must offer 2 req/s: an unconditioned Poisson draw over 15 s
    offers anywhere from 1.6 to 2.4. Conditioning on the count keeps the randomised gaps (for
    Poisson this is exactly the process given its count: uniform order statistics).
    """
    _check_rate(rate)
    n = max(1, int(round(rate * duration_s)))
    times = np.cumsum(gaps_fn(n + 1))
    return times[:n] * (duration_s / times[-1])


def schedule(
    kind: ArrivalKind, rate: float, duration_s: float, *, burstiness: float = 1.0, seed: int = 0
) -> np.ndarray:
    """The schedule of one sweep step (kind as in ``SweepSpec.arrival``), offering exactly ``rate``."""
    rng = np.random.default_rng(seed)
    if kind == "poisson":
        return conditioned(lambda k: rng.exponential(1.0 / rate, k), rate, duration_s)
    if kind == "gamma":
        if burstiness <= 0:
            raise ValueError(f"burstiness must be > 0, got {burstiness}")
        shape = 1.0 / burstiness
        return conditioned(lambda k: rng.gamma(shape, 1.0 / (rate * shape), k), rate, duration_s)
    if kind == "constant":
        return constant(rate, duration_s)
    raise ValueError(f"unknown arrival kind {kind!r}; expected poisson, gamma or constant")
