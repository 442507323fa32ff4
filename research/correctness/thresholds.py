"""The limits a correctness check judges against, and the names of the evidence it can rest on.

Apart from the checks themselves so that the campaign's settings, the reports and every check read
one set of numbers; defaults suit small models on CPU.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

#: what a correctness check rests on (see ``research.correctness``)
Evidence = Literal["logprobs", "greedy_text", "none"]
EVIDENCE_LABELS: dict[str, str] = {
    "logprobs": "token ids and logprobs (greedy sequences plus teacher-forced distributions)",
    "greedy_text": "greedy text (temperature-0 outputs compared as token sequences; the engine gives no logprobs)",
    "none": "none (the engine answered no correctness request; NOT checked)",
}


class CorrectnessThresholds(BaseModel):
    """Limits of the checks. Defaults suit small models on CPU; tune per endpoint if needed."""

    top_k: int = Field(default=20, ge=1, le=20)  # vLLM's default --max-logprobs is 20
    max_tokens: int = Field(default=32, ge=1)
    request_timeout_s: float = 120.0
    # Lossless, float32 on both sides: teacher-forced logprobs may differ by at most this much.
    exact_logprob_atol: float = 1e-3
    # Lossless, lower precision: distributions must agree this closely; ties within tie_margin may flip.
    lossless_max_mean_kl: float = 1e-3
    lossless_min_top1: float = 0.97
    tie_margin: float = 0.05
    # Lossy: accepted (and flagged for review) when within these.
    lossy_max_mean_kl: float = 0.05
    lossy_min_top1: float = 0.90
    lossy_max_ppl_ratio: float = 1.05
    # Lossy, greedy-text evidence only (no distributions): the mean matched-prefix fraction of the
    # reference outputs must reach this (a coarse guard against a broken model; always reviewed).
    greedy_lossy_min_prefix_fraction: float = 0.5
    # Sampled outputs (logprobs evidence): each prompt sampled once at this temperature (0 = no check);
    # a lossless candidate's mean NLL per sampled token may differ from the reference's samples by at
    # most max(sampled_max_nll_shift, sampled_se_multiple x the standard error of the difference).
    sample_temperature: float = Field(default=1.0, ge=0.0)
    sampled_max_nll_shift: float = 0.5
    sampled_se_multiple: float = 4.0
