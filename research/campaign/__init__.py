"""Campaign control: the research loop run headless, within its deadline and budget, resumable.

    baseline (K sweeps -> noise floor, reference outputs)
      -> diagnose -> proposals (N subagents)
      -> for each proposal: already run? decided in memory? valid? fits the budget? -> harness -> verdict
      -> two or more confirmed wins: their combination, with ablations
      -> best confirmed lossless win becomes the working baseline -> diagnose again ...
    until the deadline, the GPU-hour budget, max_rounds, or no supported experiment remains;
    then save the best configuration, the open questions and the review report.

The candidates of one round are independent: they run in parallel up to the campaign's GPU cap
(``CampaignSpec.concurrent_engines``: max_concurrent_gpus // GPUs per engine; 1 on a CPU host), each
engine on GPUs of its own (engines.gpu_lease). Their records are kept in proposal order, so the
verdicts and the winner do not depend on which finished first.

The campaign's first baseline stays the reference for total gain. State is written atomically
after every experiment (research.state), so a killed process resumes without re-running
finished experiments. Lossy wins are never adopted automatically: they are reported for
human review. Nothing is deployed.

One module a job; every name is importable from ``research.campaign`` itself, and
:class:`~research.campaign.run.CampaignLoop` wires the collaborators for one call:

    run         run_campaign, record_campaign; CampaignLoop: the loop (baseline, rounds, ending)
    context     CampaignContext: specs, state and state file, replay pool, progress (shared by all)
    budget      Limits, estimate_seconds, budget_problem, Paused; Budget: launch check and charging
    bench       Bench: measure one configuration (research.harness), book the experiment
    planning    Planner: diagnosis and proposals of a round; below_mde
    scheduler   Scheduler: a round's proposals in parallel up to the GPU cap, the queue, stopping
    adoption    Adoption: combinations and ablations, the winner, the new working baseline
    recording   MemoryRecorder: everything written to the research memory (memory_db)
    outcome     CampaignOutcome, total_gain, judged_gain, the best configuration and the review report
    steps       the replaceable steps (noise, compare, diagnose, propose) and their defaults
"""

from __future__ import annotations

from specs.engine_args import REMOVE
from research.campaign.adoption import Adoption, contender
from research.campaign.bench import Bench
from research.campaign.budget import (
    PRIOR_STARTUP_S,
    PRIOR_STEP_EXTRA_S,
    PRIOR_STEP_OVERHEAD,
    Budget,
    Limits,
    Paused,
    budget_problem,
    estimate_seconds,
)
from research.campaign.context import CampaignContext, config_hash, load_pool, ratio, workload_signature
from research.campaign.outcome import (
    CampaignOutcome,
    JudgedGain,
    judged_gain,
    summarize,
    total_gain,
    write_best_config,
    write_outcome,
    write_review,
)
from research.campaign.planning import Planner, below_mde
from research.campaign.recording import MemoryRecorder
from research.campaign.run import CampaignLoop, record_campaign, run_campaign
from research.campaign.scheduler import Scheduler, concurrent_engines
from research.campaign.steps import (
    CompareFn,
    DiagnoseFn,
    NoiseFn,
    ProposeFn,
    default_compare,
    default_diagnose,
    default_noise,
    default_propose,
    proposal_record,
)

__all__ = [
    "PRIOR_STARTUP_S",
    "PRIOR_STEP_EXTRA_S",
    "PRIOR_STEP_OVERHEAD",
    "REMOVE",
    "Adoption",
    "Bench",
    "Budget",
    "CampaignContext",
    "CampaignLoop",
    "CampaignOutcome",
    "CompareFn",
    "DiagnoseFn",
    "Limits",
    "MemoryRecorder",
    "NoiseFn",
    "Paused",
    "Planner",
    "ProposeFn",
    "Scheduler",
    "below_mde",
    "budget_problem",
    "concurrent_engines",
    "config_hash",
    "contender",
    "default_compare",
    "default_diagnose",
    "default_noise",
    "default_propose",
    "estimate_seconds",
    "judged_gain",
    "JudgedGain",
    "load_pool",
    "proposal_record",
    "ratio",
    "record_campaign",
    "run_campaign",
    "summarize",
    "total_gain",
    "workload_signature",
    "write_best_config",
    "write_outcome",
    "write_review",
]
