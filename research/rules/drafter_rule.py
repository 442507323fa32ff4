"""The drafter rule (issue 15): when to propose training a speculative-decoding draft model on the
endpoint's own traffic, with the break-even acceptance it must reach, or why not.

Apart from the playbook's techniques because it proposes no argument change to measure now but a model
to train first (a ``DrafterSuggestion``); ``research.drafter`` acts on it.
"""

from __future__ import annotations

from research.proposals import Diagnosis, DrafterSuggestion

#: Tokens per step at which a decode step stops being memory-bound (peak FLOP/s over bandwidth,
#: in tokens for bf16 weights). Order of magnitude only: GPUs several hundred, one CPU core tens.
RIDGE_TOKENS = {"gpu": 256.0, "cpu": 16.0}


def drafter_training(
    diagnosis: Diagnosis,
    *,
    k: int = 3,
    draft_cost_ratio: float = 0.3,
    gpu_count: int = 0,
    ridge_tokens: float | None = None,
    why_not: list[str] | None = None,
) -> DrafterSuggestion | None:
    """Propose training a drafter when decode limits the endpoint, stays memory-bound at its load, and
    the traffic is predictable; None otherwise.

    Memory-bound at load: the running batch times the k+1 verified positions stays under the ridge
    (``RIDGE_TOKENS``), so verifying costs about one plain step. Predictable: n-gram speculation
    already ran and accepted >= 30% of its drafts (the cheap first signal), else structured or tool
    outputs make >= 20% of replies (a weaker signal, said so in the evidence). The break-even
    acceptance length is ``k * draft_cost_ratio + verify_cost`` (research.drafter.break_even_acceptance).
    ``why_not``, when given, receives the reason for a None.
    """

    def no(reason: str) -> None:
        if why_not is not None:
            why_not.append(reason)
        return None

    decode = diagnosis.bottleneck("decode_bound")
    if decode is None:
        return no("decode is not a bottleneck in this diagnosis")
    e, r = diagnosis.engine_stats, diagnosis.request_stats
    batch = max(e.get("at_cap_requests_running_mean") or 0.0, e.get("at_cap_in_flight_mean") or 0.0, 1.0)
    ridge = ridge_tokens or RIDGE_TOKENS["gpu" if gpu_count else "cpu"]
    tokens = batch * (k + 1)
    if tokens > ridge:  # compute-bound at this load: verifying k+1 tokens per sequence costs k+1 steps
        return no(
            f"{batch:.0f} sequences x {k + 1} verified tokens = {tokens:.0f} per step, beyond the ridge of "
            f"~{ridge:.0f}: decode is compute-bound at this load"
        )
    verify_cost = 1.0 + tokens / ridge * 0.5  # approaching the ridge, verification starts to cost
    evidence = list(decode.evidence)
    evidence.append(
        f"about {batch:.1f} sequences run at capacity: {tokens:.0f} verified tokens per step, under the "
        f"ridge of ~{ridge:.0f} ({'GPU' if gpu_count else 'CPU'}): decode stays memory-bound"
    )
    rate = e.get("spec_decode_acceptance_rate")
    ngram_len = None
    if rate is not None:
        ngram_len = 1.0 + rate * k
        if rate < 0.3:
            return no(
                f"n-gram speculation accepted only {rate:.0%} of its drafts: the replies are not predictable enough"
            )
        evidence.append(
            f"n-gram speculation accepted {rate:.0%} of draft tokens (acceptance length ~{ngram_len:.2f}): "
            "replies are predictable from context"
        )
    else:
        predictable = r.get("structured_output_fraction", 0.0) + r.get("tool_result_fraction", 0.0)
        if predictable < 0.2:
            return no(
                f"no speculation observed and only {predictable:.0%} structured or tool outputs: no sign of "
                "predictable replies (run n-gram speculation first)"
            )
        evidence.append(
            f"no speculation observed yet; {predictable:.0%} of requests are structured or tool outputs "
            "(a weaker signal: run n-gram speculation first for a measured one)"
        )
    overhead = e.get("roofline_ratio")
    if overhead and overhead > 1.0:
        # A step that takes `overhead` x its bandwidth bound is mostly fixed per-step cost (launches,
        # scheduling), which a small draft pays in full: its step costs that share plus its bytes.
        draft_cost_ratio = (1.0 - 1.0 / overhead) + draft_cost_ratio / overhead
        evidence.append(
            f"decode steps take {overhead:.0f}x their bandwidth bound: a draft step costs about "
            f"{draft_cost_ratio:.0%} of a target step, not its share of the bytes"
        )
    break_even = k * draft_cost_ratio + verify_cost
    explanation = (
        f"Decode limits {diagnosis.endpoint} and is memory-bound at its load, so verifying {k + 1} tokens "
        f"costs about one step ({verify_cost:.2f}); a draft reading {draft_cost_ratio:.0%} of the target's "
        f"bytes pays off above an acceptance length of {break_even:.2f} tokens per target step"
        + (f" (n-gram reached {ngram_len:.2f})" if ngram_len else "")
        + "."
    )
    if break_even >= k + 1:
        return no(
            f"break-even acceptance length {break_even:.2f} is beyond the {k + 1} a round can yield "
            f"(a draft step costs {draft_cost_ratio:.0%} of a target step here): no drafter of this size pays off"
        )
    return DrafterSuggestion(
        endpoint=diagnosis.endpoint,
        explanation=explanation,
        evidence=evidence,
        k=k,
        draft_cost_ratio=round(draft_cost_ratio, 3),
        verify_cost=round(verify_cost, 3),
        break_even_acceptance_length=round(break_even, 3),
        ngram_acceptance_length=ngram_len,
        command=f"autoresearch drafter train {diagnosis.endpoint} --k {k}",
    )
