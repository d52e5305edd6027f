"""What the judge step reads from outside the store and the attempt's view (daemon/judging.py
`gather`): the job's spend (one sacct), the checkpoint disk after a failed save (statvfs), the
nodes Slurm reports unfit after a NODE_FAIL (scontrol). Each is read only when the verdict or
the policy needs it; the verdicts on them are pure (core/decide/spend.py, core/checkpoint/disk.py,
core/jobs/slurm_nodes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from oellm_autoexp.adapters.executors.base import Executor, ExecutorError
from oellm_autoexp.adapters.fs.disk_space import disk_space
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo
from oellm_autoexp.core.checkpoint.disk import DiskSpace, is_save_failure
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.spend import Spend, total_spend, usage_from_attempts
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_nodes import NodeHealth
from oellm_autoexp.core.watch.verdict import Verdict
from oellm_autoexp.daemon.presubmit import checkpoint_dir_of
from oellm_autoexp.daemon.watch import JobRuntime

# -- the cumulative spend (core/decide/spend.py) ---------------------------------------------------


def spend_of(rt: JobRuntime, attempts: Sequence[AttemptInfo], now: datetime) -> Spend | None:
    """What the job's attempts spent, when its policy has a budget to check it against."""
    if rt.policy.spend_limits is None:
        return None  # nothing to check: no sacct call
    submitted = [a for a in attempts if a.executor_job_id]
    return measure_spend(rt.executor, submitted, rt.plan.config.slurm.gpus_per_node, now)


def measure_spend(
    executor: Executor, attempts: Sequence[AttemptInfo], gpus_per_node: int, now: datetime
) -> Spend:
    """What every attempt of a job held, summed: one sacct call on Slurm, else the store's times.

    The local executor (and a cluster without accounting) has no sacct: each attempt's
    elapsed time is then its end (or `now`) minus its start, on the nodes it ran on.
    """
    ids = [a.executor_job_id for a in attempts if a.executor_job_id]
    usage = getattr(executor, "usage", None)  # only SlurmExecutor asks sacct
    if usage is not None:
        try:
            return total_spend(usage(ids), gpus_per_node)
        except ExecutorError:
            pass  # no accounting here: the store's start and end times are the next best
    return total_spend(usage_from_attempts(attempts, now), gpus_per_node)


# -- the checkpoint disk, the nodes ----------------------------------------------------------------


def disk_if_save_failed(rt: JobRuntime, cause: Signal | None) -> DiskSpace | None:
    """The checkpoint directory's free space, read only when the attempt's cause is a failed write."""
    return disk_space(checkpoint_dir_of(rt.plan)) if is_save_failure(cause) else None


def unhealthy_after(rt: JobRuntime, verdict: Verdict, allocation: Sequence[str]) -> list[NodeHealth]:
    """The attempt's nodes Slurm reports unfit, asked only when Slurm ended it with NODE_FAIL (one
    `scontrol show node`; the executor may not know Slurm: none then). A node set DOWN under a
    job leaves no log line naming it: its state is the evidence that blames it."""
    record = verdict.record
    query = getattr(rt.executor, "unhealthy_nodes", None)  # only SlurmExecutor knows node states
    if record is None or record.state is not JobState.NODE_FAIL or query is None or not allocation:
        return []
    try:
        return list(query(allocation))
    except ExecutorError:
        return []  # no evidence: no one is blamed
