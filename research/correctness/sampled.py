"""The sampled-output check (logprobs evidence): greedy checks never exercise the sampler, so each
prompt is also sampled and the sampled tokens are scored teacher-forced on the same engine.

Apart from the greedy and distribution checks because it is measured on both sides (the reference's own
samples and the candidate's) and judged on its own statistic, the mean negative log-likelihood per token.
"""

from __future__ import annotations

import math

from research.correctness.client import CorrectnessClient
from research.correctness.outputs import SampledStats
from research.correctness.report import SampledComparison
from research.correctness.thresholds import CorrectnessThresholds

#: Fewer scored sampled tokens than this on either side: the sampled check is not measured (fails).
MIN_SAMPLED_TOKENS = 20


def sampled_stats(client: CorrectnessClient, prompts, t: CorrectnessThresholds) -> SampledStats | None:
    """Sample each prompt once at ``t.sample_temperature`` (fixed seeds) and score the sampled tokens
    teacher-forced on the same engine: mean NLL per token. None when the temperature is 0."""
    if t.sample_temperature <= 0:
        return None
    nlls: list[float] = []
    texts: list[str] = []
    for i, prompt in enumerate(prompts):
        prompt_ids, output_ids, text = client.sample(prompt, t.max_tokens, t.sample_temperature, seed=1000 + i)
        texts.append(text)
        if not output_ids:
            continue
        positions = client.teacher_forced(prompt_ids + output_ids, 1)
        for j, token in enumerate(output_ids):
            logprob = positions[len(prompt_ids) - 1 + j].get(token)
            if logprob is not None and math.isfinite(logprob):
                nlls.append(-logprob)
    n = len(nlls)
    mean = sum(nlls) / n if n else 0.0
    var = sum((x - mean) ** 2 for x in nlls) / (n - 1) if n > 1 else 0.0
    return SampledStats(
        temperature=t.sample_temperature,
        sequences=len(texts),
        tokens=n,
        mean_nll=mean,
        se=math.sqrt(var / n) if n else 0.0,
        texts=[x[:200] for x in texts[:3]],
    )


def compare_sampled(reference: SampledStats, candidate: SampledStats, t: CorrectnessThresholds) -> SampledComparison:
    """Two-sided: a sampler that emits nonsense raises the NLL, one that turned greedy lowers it."""
    shift = candidate.mean_nll - reference.mean_nll
    limit = max(t.sampled_max_nll_shift, t.sampled_se_multiple * math.hypot(reference.se, candidate.se))
    # a side that sampled (almost) nothing was not measured: no pass on a mean of no tokens
    measured = min(reference.tokens, candidate.tokens) >= MIN_SAMPLED_TOKENS
    return SampledComparison(
        reference=reference, candidate=candidate, shift=shift, limit=limit, passed=measured and abs(shift) <= limit
    )
