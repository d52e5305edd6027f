"""Which of a job's node exclusions still hold before its next submission, from what Slurm shows.

The decision is core/decide/exclusions.py `in_force` (pure): an exclusion ends when its node was
seen repaired, at its upper bound at the latest, and the oldest go first past the cap on the
partition's spare nodes. This module only reads what it needs, through the executor:

- the excluded nodes' down/drain periods since the oldest exclusion was made
  (`SlurmExecutor.node_events`: `sacctmgr show event`, slurmdbd's record);
- the partition's node count (`SlurmExecutor.partition_nodes`: `scontrol show partition`).

A read that fails is "no information", never "repaired": the exclusions stay (up to their bound),
and without the partition's size no cap is applied. The local executor has neither read.
What is lifted is ended in the store with one decision each (action `none`), so `autoexp explain`
says which exclusion was lifted and why, and the next read starts from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.core.decide.exclusions import Exclusion, InForce, in_force

if TYPE_CHECKING:
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
    from oellm_autoexp.core.jobs.slurm_nodes import NodeEvent
    from oellm_autoexp.daemon.watch import JobRuntime


def exclusions_in_force(store: SQLiteStore, rt: JobRuntime, now: datetime) -> tuple[str, ...]:
    """The nodes the job's next attempt must avoid now; lifted exclusions are ended in the store."""
    active = [e for e in store.exclusions_for_job(rt.job.id) if e.job == rt.job.name and e.is_active(now)]
    if not active:
        return ()
    verdict = judge_exclusions(rt, active, now)
    if verdict.lifted:
        latest = store.latest_attempt(rt.job.id)
        store.lift_exclusions(rt.job.id, [(item.exclusion.node, item.why) for item in verdict.lifted],
                              attempt_id=latest.id if latest else None, now=now)  # fmt: skip
    return verdict.nodes


def judge_exclusions(rt: JobRuntime, active: Sequence[Exclusion], now: datetime) -> InForce:
    """`in_force` on what Slurm shows now of the excluded nodes and the job's partition."""
    slurm = rt.plan.config.slurm
    partition = slurm.sbatch.get("partition")
    return in_force(
        active, node_events(rt, active), now, job=rt.job.name,
        partition_nodes=partition_nodes(rt, partition if isinstance(partition, str) else None),
        job_nodes=slurm.nodes, share=rt.settings.exclusion_spare_share,
    )  # fmt: skip


def node_events(rt: JobRuntime, active: Sequence[Exclusion]) -> list[NodeEvent]:
    read = getattr(rt.executor, "node_events", None)
    if read is None or not active:
        return []
    try:
        events: list[NodeEvent] = read(sorted({e.node for e in active}), min(e.created_at for e in active))
    except ExecutorError:
        return []
    return events


def partition_nodes(rt: JobRuntime, partition: str | None) -> int | None:
    read = getattr(rt.executor, "partition_nodes", None)
    if read is None:
        return None
    try:
        size: int | None = read(partition)
    except ExecutorError:
        return None
    return size
