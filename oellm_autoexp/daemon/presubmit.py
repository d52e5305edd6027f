"""Before a job's next attempt is submitted: the checks, in the order they run.

The loop calls `PreSubmission.next_attempt` when a restart's resubmission is due (and on
resume, for a job with no attempt to watch). Top to bottom:

1. The job is still active: `autoexp cancel` during a restart's cooldown drops the restart.
2. No earlier attempt may still run (`predecessor_may_run`, the step's one answer): an attempt
   whose scancel failed holds the job, and is cancelled again on its backoff (daemon/cancels.py).
   Two attempts of one job never run side by side on one checkpoint directory. A Slurm attempt
   that ended moments ago may still be
   COMPLETING (its processes get KillWait seconds, and a worker saves on SIGTERM): the next
   sbatch then carries `--dependency=afterany:<its id>`, so Slurm starts the new attempt only
   once the old one is gone, at no cost in queue time.
3. The checkpoint the attempt resumes from (resubmissions only; docs/checkpoints.md): an
   incomplete one, or one the last attempt failed to load, is rolled back (moved aside, never
   deleted; an event); what cannot be fixed stops the job (a `stop` decision and the job's
   status in one transaction), and its queued successor is dropped (daemon/successor.py).
   A warning is added when the next save will not fit on the disk.
4. The nodes it must not run on: the experiment's own `--exclude` plus the active exclusions.
5. The submission (daemon/submitter.py `Submitter.submit`): an unconfirmed intent is adopted
   by its tag; else the job's queued successor is adopted (daemon/successor.py
   `Successors.adopt`: given the exclusions, released); else a fresh sbatch, with the next
   successor queued behind it while the restart budget allows.

The verdicts are pure (core/checkpoint/rollback.py, core/decide/exclusions.py); this module
gathers their inputs and carries out the one action a check takes by itself, the rollback.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from oellm_autoexp.adapters.checkpoints.checkpoint_files import apply_rollback, check_run
from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.fs.disk_space import Statvfs, disk_space
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, JobStatus, SQLiteStore
from oellm_autoexp.backends.build import checkpoint_dir
from oellm_autoexp.core.checkpoint.disk import space_warning
from oellm_autoexp.core.checkpoint.rollback import rollback_line
from oellm_autoexp.core.decide.exclusions import exclude_list
from oellm_autoexp.core.decide.load_failure import short
from oellm_autoexp.core.decide.policy import DecisionAction
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.outcome import OutcomeKind
from oellm_autoexp.daemon.cancels import Cancels, Failing
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.exclusions_in_force import exclusions_in_force
from oellm_autoexp.daemon.submitter import Submitter
from oellm_autoexp.daemon.watch import JobRuntime
from oellm_autoexp.plan.plan import JobPlan, configured_exclude


class PreSubmission:
    """Runs the checks (module docstring) and, when they pass, the submission."""

    def __init__(
        self, store: SQLiteStore, submitter: Submitter, cancels: Cancels, say: Callable[[str], None]
    ) -> None:
        self.store = store
        self._submitter = submitter
        self._cancels = cancels
        self._say = say

    def next_attempt(self, rt: JobRuntime, now: float) -> AttemptInfo | None:
        """The job's next attempt (submitted or adopted) to watch; None when none is, now."""
        job = self.store.get_job(rt.job.id)
        status = job.status if job else JobStatus.STOPPED.value
        if status != JobStatus.ACTIVE.value:  # 1.
            self._say(f"{rt.job.name}: not resubmitting: the job is {status}")
            return None
        predecessor = self.predecessor_may_run(rt, now)  # 2.
        if predecessor.held:
            return None
        if not self._checkpoint_ready(rt, now):  # 3.
            self._submitter.successors.drop(rt, "stopped by the checkpoint check", now)
            return None
        return self._submitter.submit(
            rt, exclude_arg(self.store, rt, utc(now)), now, first_only=predecessor.after
        )  # 4., 5.

    def predecessor_may_run(self, rt: JobRuntime, now: float) -> Predecessor:
        """Step 2, the one answer to "may an earlier attempt of the job still run?". An attempt
        whose scancel failed holds the submission until a cancel went through (or it ended): said,
        and looked at again at its next try. Else the latest, if it may still be COMPLETING, is
        what the sbatch waits for (`after_recent_end`)."""
        held = tuple(self._cancels.holding(rt.job.id, now))
        for failing in held:
            live = failing.live
            self._say(f"{rt.job.name}: not resubmitting while attempt {live.attempt.attempt_no} (job "
                      f"{live.executor_id}) may still run (its scancel failed); cancelling again in "
                      f"{max(failing.retry_at_s - now, 0.0):g} s")  # fmt: skip
        if held:
            self._submitter.schedule(rt.job.id, min(f.retry_at_s for f in held), ())
            return Predecessor(held=held)
        return Predecessor(
            after=after_recent_end(self.store.latest_attempt(rt.job.id), rt.executor.name, utc(now))
        )

    def _checkpoint_ready(self, rt: JobRuntime, now: float) -> bool:
        """Check the checkpoint a resubmission resumes from; False: the job was stopped instead."""
        if not is_resubmission(self.store, rt):
            return True
        gate = gate_checkpoint(self.store, rt, utc(now))
        if gate.reason is not None:
            self._say(f"{rt.job.name}: {gate.reason}")
        return gate.resume


# -- 2. an earlier attempt that may still run ------------------------------------------------------


@dataclass(frozen=True)
class Predecessor:
    """Step 2's answer: may an earlier attempt of the job still run, and what follows from it."""

    held: tuple[Failing, ...] = ()  # yes, their scancel failed: nothing is submitted meanwhile
    after: tuple[str, ...] = ()  # perhaps, still COMPLETING: the sbatch waits for it in Slurm


# Slurm keeps an ended job in its tables for MinJobAge (300 s by default): a dependency on a job
# it has forgotten refuses the sbatch, so only a predecessor this recent is named.
RECENT_END_S = 30.0


def after_recent_end(latest: AttemptInfo | None, executor: str, now: datetime) -> tuple[str, ...]:
    """`--dependency=afterany:<id>` for a Slurm predecessor that ended (or was cancelled) moments
    ago and may still be COMPLETING; nothing otherwise (a retry of a refused sbatch goes without)."""
    if executor != "slurm" or latest is None or latest.executor_job_id is None:
        return ()
    if latest.ended_at is not None and (now - latest.ended_at).total_seconds() > RECENT_END_S:
        return ()  # (not seen ended yet, e.g. just cancelled: Slurm surely still knows it)
    return (f"--dependency=afterany:{latest.executor_job_id}",)


# -- 3. the checkpoint a resubmission resumes from (docs/checkpoints.md) --------------------------


@dataclass(frozen=True)
class CheckpointGate:
    """The checkpoint check's answer before a resubmission."""

    directory: str
    resume: bool  # False: stop the job (`reason` says why and what to check)
    reason: str | None = None  # a line for the decision record; None when nothing happened
    problems: tuple[str, ...] = ()  # the check's findings, kept as the decision's evidence


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


# -- 4. node exclusions (core/decide/exclusions.py) -----------------------------------------------


def active_exclusions(store: SQLiteStore, rt: JobRuntime, now: datetime) -> tuple[str, ...]:
    """The nodes excluded for the job now: until repaired, capped (daemon/exclusions_in_force.py);
    expired and lifted exclusions are kept in the store, not used."""
    return exclusions_in_force(store, rt, now)


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
