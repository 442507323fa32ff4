"""Running a round's proposals: each one validated, checked against the memory's prior decisions and
the budget, then measured, up to the campaign's GPU cap at once.

The candidates of one round are independent: they run in parallel up to ``CampaignSpec.concurrent_engines``
(max_concurrent_gpus // GPUs per engine; 1 on a CPU host), each engine on GPUs of its own
(engines.gpu_lease). Their records are kept in proposal order, so the verdicts and the winner do not
depend on which finished first.
"""

from __future__ import annotations

import queue
import threading
import time

from specs.config import CampaignSpec, EndpointSpec
from specs.engine_args import apply_diff, diff_args
from research.campaign.bench import Bench
from research.campaign.budget import Budget, Paused
from research.campaign.context import CampaignContext
from research.campaign.recording import MemoryRecorder
from research.harness import Progress, stop_orphan
from research.state import BaselineRecord, ExperimentState, ProposalRecord, RoundRecord, experiment_id


def concurrent_engines(campaign: CampaignSpec, endpoint: EndpointSpec, progress: Progress) -> int:
    """How many experiments run at once: the campaign's GPU cap, or 1 where engines cannot be pinned apart."""
    concurrent = campaign.concurrent_engines(endpoint)
    from engines.registry import adapter_class

    if concurrent > 1 and adapter_class(endpoint.engine.kind).manages_process:
        from engines.gpu_lease import host_gpus

        if not host_gpus():  # nothing to pin engines to: parallel engines would share GPUs
            progress(
                f"no GPUs known on this host (AUTORESEARCH_GPUS unset, no NVML): experiments run "
                f"one at a time, not {concurrent}"
            )
            concurrent = 1
    return concurrent


class Scheduler:
    """Measures a round's proposals, up to ``concurrent`` at once, each launch within the budget."""

    def __init__(self, ctx: CampaignContext, budget: Budget, bench: Bench, recorder: MemoryRecorder, concurrent: int):
        self.ctx, self.budget, self.bench, self.recorder = ctx, budget, bench, recorder
        self.concurrent = concurrent

    def run_proposals(self, rnd: RoundRecord, working: BaselineRecord) -> str | None:
        """Measure the round's proposals, up to ``self.concurrent`` at once; returns an end reason or None.

        Each launch passes the same budget check as a serial run (counting the experiments still
        running); when one does not fit, no further one starts, the running ones finish and are
        recorded, then the campaign ends (or pauses). Records are put in proposal order at the end."""
        todo: list[tuple[ExperimentState, ProposalRecord]] = []
        order: list[str] = []
        for proposal in rnd.proposals:
            eid, record = self._prepare(rnd, proposal, working)
            if eid not in order:
                order.append(eid)
                if record is not None:
                    todo.append((record, proposal))
        repeats = self.ctx.repeats
        results: queue.Queue = queue.Queue()
        running: dict[str, tuple[ExperimentState, ProposalRecord, float]] = {}
        reason: str | None = None
        stop: BaseException | None = None
        try:
            while todo or running:
                while todo and len(running) < self.concurrent and reason is None and stop is None:
                    record, proposal = todo[0]
                    estimate = self.budget.estimate(repeats)
                    try:
                        reason = self.budget.check(estimate, sum(e for _, _, e in running.values()))
                    except Paused as pause:
                        stop = pause
                    if reason is not None or stop is not None:
                        break
                    todo.pop(0)
                    record.started_at = time.time()
                    self.ctx.progress(f"experiment {record.experiment_id}: {proposal.title}")
                    if self.concurrent == 1:  # serial: measured in this thread, exactly as before
                        self.bench.fill(
                            record,
                            self.bench.measure(record.engine_args, repeats, noise=working.noise, lossy=record.lossy),
                        )
                        self.bench.finish(rnd, record, proposal)
                        continue
                    running[record.experiment_id] = (record, proposal, estimate)
                    self._start(record, working, results)
                if not running:
                    break
                eid, result = results.get()
                record, proposal, _ = running.pop(eid)
                if isinstance(result, BaseException):
                    stop = stop or result
                    continue
                self.bench.fill(record, result)
                self.bench.finish(rnd, record, proposal)
        except BaseException:
            self._stop_running(running)
            raise
        finally:
            self._in_order(rnd, order)
        if stop is not None:
            raise stop
        return reason

    def _prepare(
        self, rnd: RoundRecord, proposal: ProposalRecord, working: BaselineRecord
    ) -> tuple[str, ExperimentState | None]:
        """(experiment id, the experiment to measure) for a proposal; None when nothing is to be
        measured: already run (resume), rejected before launch, or skipped on a prior decision in
        memory (recorded here)."""
        from research.interventions import validate_intervention
        from research.proposals import Intervention

        state, endpoint = self.ctx.state, self.ctx.endpoint
        base = working.engine_args
        intervention = Intervention(
            technique=proposal.technique,
            engine_arg_diff=proposal.engine_arg_diff,
            engine_patch=proposal.engine_patch,
            lossy=proposal.lossy,
        )
        check = validate_intervention(intervention, base, endpoint.engine.kind, gpu_count=endpoint.hardware.gpu_count)
        after = check.args_after or apply_diff(base, proposal.engine_arg_diff)
        lossy = check.lossy
        patch_problem = None
        if proposal.engine_patch and check.ok:  # an overlay built for this candidate only (engines.authored)
            from engines.authored import candidate_args

            after, patch_problem = candidate_args(
                endpoint, after, proposal.engine_patch, self.ctx.campaign.authored_patches
            )
        eid = experiment_id("candidate", base, after, self.ctx.repeats)
        if eid in state.experiments:
            if eid not in rnd.experiment_ids:
                rnd.experiment_ids.append(eid)
            return eid, None
        record = ExperimentState(
            experiment_id=eid,
            round=rnd.round,
            kind="candidate",
            proposal_ids=[proposal.proposal_id],
            title=proposal.title,
            baseline_args=list(base),
            engine_args=list(after),
            diff=diff_args(base, after),
            lossy=lossy,
            verdict="skipped",
            started_at=time.time(),
            engine_patch=proposal.engine_patch,
        )
        if patch_problem is not None:  # the patch is the change: nothing to measure without it
            record.verdict, record.invalid_reason = "invalid", patch_problem
            self.ctx.progress(f"  {proposal.proposal_id}: invalid ({patch_problem})")
            self.bench.finish(rnd, record, proposal)
            return eid, None
        if not check.ok:
            record.verdict, record.invalid_reason = "invalid", "rejected before launch: " + "; ".join(check.reasons)
            self.ctx.progress(f"  {proposal.proposal_id}: {record.invalid_reason}")
            self.bench.finish(rnd, record, proposal, memory=False)
            return eid, None
        prior = self.recorder.prior(record)
        if prior is not None:
            record.skip_reason = f"memory: {prior.reason}"
            self.ctx.progress(f"  {proposal.proposal_id}: skipped ({record.skip_reason})")
            self.recorder.skip(record, proposal, prior)
            self.bench.finish(rnd, record, proposal, memory=False)
            return eid, None
        return eid, record

    def _start(self, record: ExperimentState, working: BaselineRecord, results: queue.Queue) -> None:
        """Measure one experiment in a worker thread; its result (or exception) goes to ``results``.

        Daemon threads: an interrupted campaign stops the engines (_stop_running) and exits without
        waiting for sweeps to end."""

        def progress(message: str) -> None:
            self.ctx.progress(f"  [{record.experiment_id}] {message.strip()}")

        def work() -> None:
            try:
                results.put(
                    (
                        record.experiment_id,
                        self.bench.measure(
                            record.engine_args,
                            self.ctx.repeats,
                            noise=working.noise,
                            lossy=record.lossy,
                            progress=progress,
                        ),
                    )
                )
            except BaseException as exc:  # noqa: BLE001 - handed to the campaign's thread
                results.put((record.experiment_id, exc))

        threading.Thread(target=work, name=f"experiment-{record.experiment_id}", daemon=True).start()

    def _stop_running(self, running: dict) -> None:
        """Stop the engines of experiments still running (the campaign was interrupted)."""
        for eid in running:
            label = experiment_id(
                "run", self.ctx.state.working.engine_args, running[eid][0].engine_args, self.ctx.repeats
            )
            stop_orphan(self.bench.active_file(label), self.ctx.progress)

    def _in_order(self, rnd: RoundRecord, order: list[str]) -> None:
        """Put this round's experiments in proposal order (the order a serial run records them in),
        in the round and in the state, so nothing downstream depends on completion order."""
        rank = {eid: i for i, eid in enumerate(order)}
        done = [e for e in rnd.experiment_ids if e in rank]
        if not done:
            return
        done.sort(key=rank.__getitem__)
        slots = iter(done)
        rnd.experiment_ids = [next(slots) if e in rank else e for e in rnd.experiment_ids]
        moved = {e: self.ctx.state.experiments.pop(e) for e in done}
        self.ctx.state.experiments.update(moved)
        self.ctx.save()
