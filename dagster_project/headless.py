"""A headless campaign is a Dagster run: ``autoresearch campaign run`` executes the endpoint's campaign
job for the partition named after the campaign, in this process, on the project's persistent instance
(dagster_project.instance), the one ``scripts/dev.sh`` serves. The UI then shows the run, the partition
and the research assets it recorded (assets/campaign_record.py).

The campaign itself is the same headless loop as before (research.campaign): resume after a kill,
deadline, budget and exit codes are unchanged. What Dagster adds is bookkeeping:

* a run killed with its process (SIGKILL, a lost host) stays "started" on the instance; the next
  ``campaign run`` of that partition marks it failed, with the reason, and frees its pool slot;
* a partition whose run is still going in a live process is not started twice: the second caller
  gets a one-line error naming the run and the process.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from specs.config import CampaignSpec, EndpointSpec
from dagster_project.instance import persistent_instance

PID_TAG = "autoresearch/pid"
SOURCE_TAG = "autoresearch/source"


class CampaignAlreadyRunning(RuntimeError):
    """The partition's campaign is running in another live process."""


def run_campaign_job(
    campaign: CampaignSpec,
    endpoint: EndpointSpec,
    *,
    proposer: str | None = None,
    from_declared: bool = False,
    stop_after_s: float | None = None,
    definitions_dir: Path | None = None,
):
    """Run (or resume) ``campaign`` as a run of its endpoint's campaign job; return its CampaignOutcome.
    An exception inside the run is raised here as itself, so callers see the error the loop raised."""
    import dagster as dg

    from assets.campaign import CampaignRun, campaign_partitions, job_name
    from assets.common import key
    from dagster_project.definitions import build_definitions

    with warnings.catch_warnings():  # Dagster's beta/preview notices, one per endpoint: not the user's business
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        defs = build_definitions(definitions_dir)
    job = defs.resolve_job_def(job_name(endpoint))
    op_name = defs.resolve_assets_def(key(endpoint.name, "campaign")).op.name
    partition = campaign.name
    config = CampaignRun(
        campaign=campaign.name, proposer=proposer, from_declared=from_declared, stop_after_s=stop_after_s, echo=True
    )
    with persistent_instance() as instance:
        partitions = campaign_partitions(endpoint).name
        if not instance.has_dynamic_partition(partitions, partition):
            instance.add_dynamic_partitions(partitions, [partition])
        end_dead_runs(instance, job.name, partition)
        # raise_on_error: an exception inside the run reaches the caller as itself (the CLI's errors and exit
        # codes are the loop's); the run is recorded as failed on the instance first
        result = job.execute_in_process(
            instance=instance,
            partition_key=partition,
            raise_on_error=True,
            run_config={
                "ops": {op_name: {"config": config.model_dump()}},
                # progress is printed as plain lines by the asset, and a failure reaches the CLI as its
                # one-line error; the event log keeps every message (the UI shows them)
                "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
            },
            tags={PID_TAG: str(os.getpid()), SOURCE_TAG: "cli"},
        )
        return result.output_for_node(op_name)


def end_dead_runs(instance, job_name: str, partition: str) -> None:
    """Mark failed the partition's runs left "started" by a process that is gone; refuse when one is alive."""
    import dagster as dg

    runs = instance.get_runs(
        filters=dg.RunsFilter(
            job_name=job_name, statuses=[dg.DagsterRunStatus.STARTED], tags={"dagster/partition": partition}
        )
    )
    for run in runs:
        pid = int(run.tags.get(PID_TAG, "0") or 0)
        if not pid:
            continue  # launched by the UI or a sensor: its own process owns it
        if pid != os.getpid() and _alive(pid):
            raise CampaignAlreadyRunning(
                f"campaign {partition} is already running (Dagster run {run.run_id[:8]}, "
                f"process {pid}): wait for it, or stop that process first"
            )
        instance.report_run_failed(
            run,
            f"the process running it (pid {pid}) ended without finishing the run "
            "(killed); the next `autoresearch campaign run` resumes the campaign",
        )
        storage = instance.event_log_storage
        if hasattr(storage, "free_concurrency_slots_for_run"):
            storage.free_concurrency_slots_for_run(run.run_id)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process running this product (a reused pid of another program is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"autoresearch" in cmdline or b"pytest" in cmdline
