"""Checking a live candidate engine against the reference: ask it the reference's prompts on the
evidence both sides give, then hand what came back to that evidence's judge.

Apart from the judges because it is the one place that talks to the candidate; the judges stay pure.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from research.correctness.client import CorrectnessClient, TextEncoder, evidence_for, rejected_fields, tokenizer_for
from research.correctness.greedy_text import judge_greedy_text
from research.correctness.logprobs import compare_greedy_tokens, judge
from research.correctness.outputs import ReferenceOutputs, compare_greedy_text
from research.correctness.report import CorrectnessReport, unchecked_report
from research.correctness.sampled import sampled_stats
from research.correctness.thresholds import CorrectnessThresholds


def check_candidate(
    base_url: str,
    model: str,
    reference: ReferenceOutputs,
    candidate_args: list[str],
    *,
    lossy: bool,
    thresholds: CorrectnessThresholds | None = None,
    adapter: Any = None,
    tokenizer: str | Path | None = None,
    omit_fields: Collection[str] = (),
) -> CorrectnessReport:
    """Check a live candidate engine against ``reference`` and judge it (lossless or lossy mode).

    The evidence is the reference's, weakened to greedy text when the candidate's ``adapter`` cannot
    give logprobs; a reference without evidence gives a report that says "NOT checked".
    """
    t = thresholds or CorrectnessThresholds()
    if reference.evidence == "none":
        return unchecked_report(reference, candidate_args, lossy=lossy, thresholds=t)
    omit = rejected_fields(adapter, omit_fields)
    candidate_logprobs = adapter is None or evidence_for(adapter) == "logprobs"
    with CorrectnessClient(base_url, model, t.request_timeout_s, omit) as client:
        if reference.evidence == "logprobs" and candidate_logprobs:
            comparisons, cand_positions = [], []
            for i, seq in enumerate(reference.sequences):
                _, output_ids, text = client.greedy(seq.prompt, reference.max_tokens)
                comparisons.append(compare_greedy_tokens(i, seq, output_ids, text, t.tie_margin))
                cand_positions.append(client.teacher_forced(seq.prompt_ids + seq.output_ids, reference.top_k))
            sampled = None
            if reference.sampled is not None:
                st = t.model_copy(update={"sample_temperature": reference.sampled.temperature})
                sampled = sampled_stats(client, [seq.prompt for seq in reference.sequences], st)
            return judge(
                reference, candidate_args, comparisons, cand_positions, lossy=lossy, thresholds=t, sampled=sampled
            )
        tok = reference.tokenizer or (str(tokenizer) if tokenizer is not None else tokenizer_for(adapter))
        encoder = TextEncoder(tok)
        texts = [client.greedy_text(seq.prompt, reference.max_tokens, reference.route) for seq in reference.sequences]
    comparisons = []
    for i, (seq, text) in enumerate(zip(reference.sequences, texts, strict=True)):
        c = compare_greedy_text(i, encoder.encode(seq.output_text), seq.output_text, encoder.encode(text), text)
        batched = reference.batched_texts[i] if i < len(reference.batched_texts) else None
        if not c.identical and batched is not None and encoder.encode(batched) == encoder.encode(text):
            c = c.model_copy(
                update={
                    "identical": True,
                    "first_divergence": None,
                    "matched_prefix": c.reference_length,
                    "matches_batched_reference": True,
                }
            )
        comparisons.append(c)
    return judge_greedy_text(
        reference,
        candidate_args,
        comparisons,
        lossy=lossy,
        thresholds=t,
        unit=encoder.unit,
        self_fraction=reference.self_matched_fraction(encoder.encode),
    )
