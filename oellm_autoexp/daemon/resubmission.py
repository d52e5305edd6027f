"""What the monitor checks before a job is resubmitted: its checkpoint, its spend, its exclusions.

The verdicts are pure (core/checkpoint_rollback.py, core/spend.py, core/exclusions.py);
this module gathers their inputs (the checkpoint files, one sacct call, the store's
exclusions) and carries out the one action a check may take by itself, a checkpoint
rollback (moves aside, never deletes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.checkpoint_files import apply_rollback, check_run
from oellm_autoexp.adapters.executor import Executor, ExecutorError
from oellm_autoexp.adapters.store import AttemptInfo
from oellm_autoexp.backends.build import checkpoint_dir
from oellm_autoexp.core.checkpoint_rollback import rollback_line
from oellm_autoexp.core.plan import JobPlan
from oellm_autoexp.core.spend import AttemptUsage, Spend, total_spend


@dataclass(frozen=True)
class CheckpointGate:
    """The checkpoint check's answer before a resubmission."""

    directory: str
    resume: bool  # False: stop the job (`reason` says why and what to check)
    reason: str | None = None  # a line for the decision record; None when nothing happened
    problems: tuple[str, ...] = ()  # the check's findings, kept as the decision's evidence


def checkpoint_dir_of(plan: JobPlan) -> Path:
    """The run's checkpoint directory, as the job sees it (relative: from where autoexp runs)."""
    return Path(checkpoint_dir(plan.config.backend, plan.checkpoint_dir))


def check_before_resubmit(directory: Path, max_rollbacks: int) -> CheckpointGate:
    """Check the newest checkpoint; roll back an incomplete one; stop on what cannot be fixed."""
    if not directory.is_dir():
        return CheckpointGate(str(directory), resume=True)  # nothing saved yet: from scratch
    try:
        verdict = check_run(directory, max_rollbacks)
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
    return f"not resubmitting: {why}; check it by hand: autoexp checkpoint check {directory}"


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


def usage_from_attempts(attempts: Sequence[AttemptInfo], now: datetime) -> list[AttemptUsage]:
    """Each started attempt's usage from the monitor's own record (start, end or `now`, nodes)."""
    out = []
    for a in attempts:
        if a.started_at is None:
            continue
        end = a.ended_at or now
        elapsed = max(int((end - a.started_at).total_seconds()), 0)
        start = a.started_at.astimezone(UTC).isoformat(timespec="seconds")
        out.append(
            AttemptUsage(a.executor_job_id or "", a.state.value, elapsed, max(len(a.nodes), 1), None, start)
        )
    return out


def configured_exclude(plan: JobPlan) -> str | None:
    """The experiment's own `slurm.sbatch.exclude`, kept when exclusions are added to it."""
    value = plan.config.slurm.sbatch.get("exclude")
    return value if isinstance(value, str) and value.strip() else None
