"""The product's closed vocabularies, each defined once: every layer imports them from here.

Bottleneck names live with their descriptions in ``research.proposals.BOTTLENECKS`` and engine kinds
are the registered adapters (``engines.registry``); what is a fixed set of words everywhere is below.
"""

from __future__ import annotations

from typing import Literal

#: a verdict of the harness on a candidate against its baseline (loadgen.compare, research.harness)
Verdict = Literal["better", "same", "worse", "invalid"]
#: whether a measurement may be used at all (a step, a sweep, a run in memory)
Validity = Literal["valid", "invalid"]
#: how request arrivals are drawn (loadgen.arrivals, the endpoint's sweep.arrival)
ArrivalKind = Literal["poisson", "gamma", "constant"]
#: who proposes changes: an LLM orchestrator, the rule-based proposer, or the LLM when configured
ProposerMode = Literal["auto", "rules", "llm"]
#: who wrote a proposal
ProposalSource = Literal["rules", "llm"]
#: what a soak found (loadgen.soak)
SoakOutcome = Literal["stable", "unstable", "unmeasured"]
