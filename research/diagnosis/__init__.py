"""Diagnosis of one endpoint: what limits its capacity, with the numbers that say so.

Pure functions over plain inputs (a replay pool DataFrame, the baseline's SweepResults, the
engine arguments, an optional parsed profile and diagnostic-workload results), so every rule is
unit-testable with constructed data. Each rule names a bottleneck from
``research.proposals.BOTTLENECKS`` with a severity in 0..1 and the evidence behind it, in
words a person can check against the load curve and the engine's /metrics.

Engine-metric names are those loadgen writes into ``StepResult.engine_metrics``:
``requests_running_mean/_max``, ``requests_waiting_mean/_max``, ``kv_cache_usage_mean/_max``,
``preemptions_delta``, ``prefix_cache_queries_delta``, ``prefix_cache_hits_delta``,
``prefix_cache_hit_rate``, ``spec_decode_acceptance_rate``, ``prompt_tokens_delta``,
``generation_tokens_delta``.

One module a job; every name is importable from ``research.diagnosis`` itself:

- ``traffic``: statistics of the replay pool (``request_stats``, ``estimate_prefix_reuse``);
- ``sweep_stats``: statistics of the engine over the baseline's sweeps (``engine_stats``);
- ``scheduler_rules``: the rules an engine setting answers (batch limit, prefix cache, KV cache, speculation);
- ``time_rules``: the rules on where a step's time goes (prefill, decode, the profile, the roofline);
- ``endpoint``: ``diagnose`` (with ``find_bottlenecks``), which runs them all into the ``Diagnosis`` record.

Each rule returns a bottleneck named after what it found, with its severity and evidence, or None.
"""

from __future__ import annotations

from research.diagnosis.endpoint import diagnose, find_bottlenecks
from research.diagnosis.sweep_stats import engine_stats
from research.diagnosis.time_rules import ROOFLINE_OVERHEAD_RATIO
from research.diagnosis.traffic import SAMPLE_ROWS, TOKENIZED_ROWS, estimate_prefix_reuse, request_stats

__all__ = [
    "ROOFLINE_OVERHEAD_RATIO",
    "SAMPLE_ROWS",
    "TOKENIZED_ROWS",
    "diagnose",
    "engine_stats",
    "estimate_prefix_reuse",
    "find_bottlenecks",
    "request_stats",
]
