"""What the monitor checks before a job is resubmitted: its checkpoint, its spend, its exclusions.

The verdicts are pure (core/checkpoint/rollback.py, core/decide/spend.py, core/decide/exclusions.py);
this module gathers their inputs (the checkpoint files, one sacct call, the store's
exclusions) and carries out the one action a check may take by itself, a checkpoint
rollback (moves aside, never deletes).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from oellm_autoexp.adapters.checkpoints.checkpoint_files import apply_rollback, check_run
from oellm_autoexp.adapters.executors.base import Executor, ExecutorError
from oellm_autoexp.adapters.fs.disk_space import Statvfs, disk_space
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, JobStatus, SQLiteStore
from oellm_autoexp.backends.build import checkpoint_dir
from oellm_autoexp.core.checkpoint.disk import DiskSpace, is_save_failure, space_warning
from oellm_autoexp.core.checkpoint.rollback import rollback_line
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.exclusions import active_nodes, exclude_list
from oellm_autoexp.core.decide.load_failure import short
from oellm_autoexp.core.decide.policy import DecisionAction
from oellm_autoexp.core.decide.spend import Spend, total_spend, usage_from_attempts
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_nodes import NodeHealth
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.outcome import OutcomeKind
from oellm_autoexp.core.watch.verdict import Verdict
from oellm_autoexp.daemon.watch import JobRuntime
from oellm_autoexp.plan.plan import JobPlan, configured_exclude


@dataclass(frozen=True)
class CheckpointGate:
    """The checkpoint check's answer before a resubmission."""

    directory: str
    resume: bool  # False: stop the job (`reason` says why and what to check)
    reason: str | None = None  # a line for the decision record; None when nothing happened
    problems: tuple[str, ...] = ()  # the check's findings, kept as the decision's evidence


# -- the checkpoint a resubmission resumes from (docs/checkpoints.md) ----------------------------


def is_resubmission(store: SQLiteStore, rt: JobRuntime) -> bool:
    """Has the job reached the executor before (so its next attempt resumes from a checkpoint)?"""
    return any(a.executor_job_id for a in store.attempts_for_job(rt.job.id))


def gate_checkpoint(
    store: SQLiteStore, rt: JobRuntime, now: datetime, statvfs: Statvfs = os.statvfs
) -> CheckpointGate:
    """Check the job's checkpoint before resubmitting it; a rollback or a stop is recorded.

    A rollback is an event (a `none` decision with the check's evidence); a checkpoint that
    cannot be fixed stops the job (a `stop` decision and the job's status, in one transaction).
    """
    latest = store.latest_attempt(rt.job.id)
    failed = failed_load_of(store, rt, latest)
    gate = with_space_warning(
        check_before_resubmit(checkpoint_dir_of(rt.plan), rt.policy.max_checkpoint_rollbacks, failed), statvfs
    )
    if gate.reason is None:
        return gate
    action = DecisionAction.NONE if gate.resume else DecisionAction.STOP
    evidence = Evidence(kind=OutcomeKind.CRASH.value, trigger="checkpoint", observed=gate.directory,
                        lines=gate.problems)  # fmt: skip
    store.record_decision(rt.job.id, attempt_id=latest.id if latest else None, action=action.value,
                          reason=gate.reason, now=now, evidence=evidence.to_json(),
                          job_status=None if gate.resume else JobStatus.STOPPED.value)  # fmt: skip
    return gate


def with_space_warning(gate: CheckpointGate, statvfs: Statvfs = os.statvfs) -> CheckpointGate:
    """A resuming gate with a warning added when the next save will not fit (core/checkpoint/disk.py)."""
    if not gate.resume:
        return gate
    disk = disk_space(Path(gate.directory), statvfs)
    warning = space_warning(disk) if disk is not None else None
    if warning is None:
        return gate
    return replace(gate, reason=f"{gate.reason}; {warning}" if gate.reason else warning)


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


def failed_load_of(store: SQLiteStore, rt: JobRuntime, latest: AttemptInfo | None) -> dict[int, str]:
    """The checkpoint the last attempt failed to load (iteration -> the decision's reason), if its
    restart said so (core/decide/load_failure.py): the rollback quarantines it."""
    if latest is None:
        return {}
    for d in reversed(store.decisions_for_job(rt.job.id)):
        if d.attempt_id != latest.id or d.action != DecisionAction.RESTART.value:
            continue
        evidence = Evidence.from_json(d.evidence)
        why = short(evidence.lines[0]) if evidence.lines else d.reason
        return {} if evidence.failed_load_iteration is None else {evidence.failed_load_iteration: why}
    return {}


def checkpoint_dir_of(plan: JobPlan) -> Path:
    """The run's checkpoint directory, as the job sees it (relative: from where autoexp runs)."""
    return Path(checkpoint_dir(plan.config.backend, plan.checkpoint_dir))


def check_before_resubmit(
    directory: Path, max_rollbacks: int, failed_loads: Mapping[int, str] | None = None
) -> CheckpointGate:
    """Check the newest checkpoint; roll back an incomplete one (or one that failed to load:
    `failed_loads`, iteration -> why); stop on what cannot be fixed."""
    if not directory.is_dir():
        return CheckpointGate(str(directory), resume=True)  # nothing saved yet: from scratch
    try:
        verdict = check_run(directory, max_rollbacks, failed_loads=failed_loads)
    except OSError as exc:
        why = f"cannot read checkpoint dir {directory}: {exc.strerror or exc}"
        return CheckpointGate(str(directory), False, _stop_line(why, directory))
    if verdict.may_resume:
        return CheckpointGate(str(directory), resume=True)
    if verdict.status == "incomplete" and verdict.plan is not None:
        try:
            apply_rollback(directory, verdict.plan)
        except OSError as exc:
            why = f"{rollback_line(verdict)}; the rollback failed: {exc.strerror or exc}"
            return CheckpointGate(str(directory), False, _stop_line(why, directory), verdict.problems)
        return CheckpointGate(str(directory), True, rollback_line(verdict), verdict.problems)
    why = rollback_line(verdict) if verdict.status == "incomplete" else f"checkpoint {verdict.summary()}"
    return CheckpointGate(str(directory), False, _stop_line(why, directory), verdict.problems)


def _stop_line(why: str, directory: Path) -> str:
    return f"not resubmitting: {why} (details: autoexp checkpoint check {directory})"


# -- the cumulative spend (core/decide/spend.py) ----------------------------------------------------------


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


# -- node exclusions (core/decide/exclusions.py) -------------------------------------------------------


def active_exclusions(store: SQLiteStore, rt: JobRuntime, now: datetime) -> tuple[str, ...]:
    """The nodes excluded for the job now (expired exclusions are kept in the store, not used)."""
    return active_nodes(store.exclusions_for_job(rt.job.id), rt.job.name, now)


def exclude_arg(store: SQLiteStore, rt: JobRuntime, now: datetime) -> tuple[str, ...]:
    """`--exclude` nodes for the next attempt: the experiment's own list plus the active exclusions."""
    active = active_exclusions(store, rt, now)
    if not active:
        return ()  # the script's own #SBATCH --exclude (if any) applies unchanged
    return tuple((exclude_list(configured_exclude(rt.plan), active) or "").split(","))


def exclude_on_queued(
    store: SQLiteStore, rt: JobRuntime, queued_ids: Sequence[str], now: datetime
) -> list[str]:
    """Give queued attempts of the job the current list (`scontrol update`); the warnings, if any.

    Only SlurmExecutor can change a queued job; the local executor starts jobs at once.
    """
    update = getattr(rt.executor, "update_excluded_nodes", None)
    nodes = ",".join(exclude_arg(store, rt, now))
    if update is None or not nodes:
        return []
    warnings = []
    for job_id in queued_ids:
        try:
            update(job_id, nodes)
        except ExecutorError as exc:
            warnings.append(f"could not exclude {nodes} from queued job {job_id}: {exc}")
    return warnings
