"""Queued successors (core/decide/successor.py): queued behind each attempt, adopted, or cancelled.

A successor is recorded as the job's next attempt the moment it is queued (intent, tag,
sbatch, confirm: the same protocol as any submission), so the stray net knows it and a
resumed monitor finds it. The attempt the monitor watches is the job's lowest attempt that
has not ended (`watched_attempt`); a later one not ended is its queued successor.

- After every submission on Slurm, `queue_behind` submits attempt N+1 with
  `--dependency=afternotok:<N>` and a hold (`--begin`) while the budget allows (at most one is
  queued); `keep_held` pushes the hold back while this monitor runs.
- A restart decision adopts the successor instead of submitting (`adopt`): a pending one gets
  the job's current `--exclude` list and is released (`scontrol update`); one that already runs on a node now
  excluded is cancelled, and the restart submits afresh once that cancel went through (never
  beside it: daemon/submitter.py). One that started before this monitor did is recorded as "restarted by the queued successor while unsupervised".
- Any other decision (stop, completed, notify) writes the job's stop file, then cancels the
  successor (`drop`): one that Slurm starts in between exits without training. Every cancel of a
  successor goes through daemon/cancels.py: a scancel that fails is said as an event and tried
  again on the backoff of a stop's cancel until it goes through; the monitor stays until then,
  and holds that successor back no more. The event outlives the monitor: the next one cancels
  it again (daemon/resume.py `cancel_left_failing`), the successor of an active job too (one
  that ran on a node a restart excluded), instead of watching it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.executors.factory import submit_plan
from oellm_autoexp.adapters.fs.atomic_file import write_text_atomic
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, SQLiteStore
from oellm_autoexp.core.decide.judge import attempt_overrides
from oellm_autoexp.core.decide.policy import DecisionAction
from oellm_autoexp.core.decide.successor import (
    STOP_FILE_ENV,
    SUCCESSOR_CAUSE,
    may_queue_successor,
    renew_every_s,
    successor_args,
    unsupervised_line,
)
from oellm_autoexp.core.jobs.attempt_pick import (
    DROPPED_PREFIX,
    judged_no_of,
    open_after_of,
    unended_of,
)
from oellm_autoexp.core.jobs.job_state import JobState, is_alive
from oellm_autoexp.daemon.cancels import Cancels
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.watch import JobRuntime, past_decisions
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.attempt_plan import attempt_plan
from oellm_autoexp.plan.plan import log_path_for

STOP_DIR = "stop"  # under the state dir: one stop file per stopped job


def stop_file(state_dir: Path, job_id: int) -> Path:
    """The job's stop file; its path reaches every attempt as $AUTOEXP_STOP_FILE (absolute)."""
    return (state_dir / STOP_DIR / f"job-{job_id}").absolute()


def stop_env(state_dir: Path, job_id: int) -> dict[str, str]:
    """What every submission of the job adds to sbatch's environment."""
    return {STOP_FILE_ENV: str(stop_file(state_dir, job_id))}


def write_stop_file(state_dir: Path, job_id: int, reason: str) -> None:
    """Mark the job stopped for its batch scripts; written BEFORE its successor is cancelled."""
    path = stop_file(state_dir, job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, reason + "\n")


def unended(store: SQLiteStore, job_id: int) -> list[AttemptInfo]:
    """The job's attempts that reached the executor and have not ended, lowest first."""
    return unended_of(store.attempts_for_job(job_id))


def judged_no(store: SQLiteStore, job_id: int) -> int:
    """The highest attempt a restart was decided for (0: none). Only a later attempt is the job's
    current one or a successor: the judged attempt itself may not have ended yet (a restart on a
    fatal line cancels it, and its end is recorded when seen)."""
    return judged_no_of(store.attempts_for_job(job_id), store.decisions_for_job(job_id))


def open_after_judged(store: SQLiteStore, job_id: int) -> list[AttemptInfo]:
    """The job's attempts not ended and past the last restart decision, lowest first: the one that
    runs (or waits to), then the successor queued behind it."""
    return open_after_of(store.attempts_for_job(job_id), store.decisions_for_job(job_id))


def watched_attempt(store: SQLiteStore, job_id: int) -> AttemptInfo | None:
    """The attempt a monitor watches: the lowest one past the last restart decision that has not
    ended (not its queued successor), else the latest (module docstring)."""
    open_ones = open_after_judged(store, job_id)
    return open_ones[0] if open_ones else store.latest_attempt(job_id)


@dataclass(frozen=True)
class QueuedSuccessor:
    """A queued successor as daemon/cancels.py cancels it: not watched, so it is PENDING to us."""

    runtime: JobRuntime
    attempt: AttemptInfo
    state: JobState = JobState.PENDING

    @property
    def executor_id(self) -> str:
        return self.attempt.executor_job_id or ""


class Successors:
    def __init__(
        self, store: SQLiteStore, say: Callable[[str], None], started_s: float, cancels: Cancels | None = None
    ) -> None:
        self.store = store
        # The monitor's cancels (shared: a successor whose scancel fails holds the job as any attempt does).
        self.cancels = cancels or Cancels(store, say)
        self.state_dir = store.path.parent
        self._say = say
        self._started_s = started_s  # when this monitor began: a successor started earlier ran unwatched
        self._renew_at_s = 0.0  # when keep_held next pushes the successors' start back
        self._released: set[str] = set()  # successors this monitor adopted (their hold is over)
        self._queued: set[str] = set()  # successors this monitor queued
        self.on_cancel: Callable[[str], None] = lambda _executor_id: None  # the monitor's stray net hears it

    # -- queueing ---------------------------------------------------------------------------------

    def queue_behind(
        self, rt: JobRuntime, attempt: AttemptInfo, exclude_nodes: Sequence[str], now: float
    ) -> None:
        """Queue attempt N+1 behind attempt N (its Slurm id), if the policy and its budget allow."""
        if not rt.policy.queued_successor or rt.executor.name != "slurm" or not attempt.executor_job_id:
            return
        decisions = self.store.decisions_for_job(rt.job.id)
        restarts = sum(1 for d in decisions if d.action == DecisionAction.RESTART.value)
        if not may_queue_successor(rt.policy, restarts) or len(unended(self.store, rt.job.id)) > 1:
            return
        attempt_no = self.store.next_attempt_no(rt.job.id)
        try:
            plan = attempt_plan(
                rt.plan, attempt_no, SUCCESSOR_CAUSE, attempt_overrides(past_decisions(decisions))
            )
        except UserError:
            return  # the restart itself renders (and reports) it; no successor meanwhile
        tag = f"autoexp-{rt.job.session_id}-{rt.job.id}-{attempt_no}-{uuid.uuid4().hex[:8]}"
        attempt_id = self.store.record_intent(rt.job.id, attempt_no, tag, now=utc(now))
        extra = [
            *successor_args(attempt.executor_job_id, rt.policy.queued_successor_hold_s),
            f"--comment={tag}",
        ]
        if exclude_nodes:
            extra.append(f"--exclude={','.join(exclude_nodes)}")
        try:
            executor_id = submit_plan(rt.executor, plan, extra, env=stop_env(self.state_dir, rt.job.id))
        except ExecutorError as exc:
            # An sbatch that may have submitted keeps its intent: the next submission adopts it by its tag.
            self._say(f"warning: {rt.job.name}: queueing attempt {attempt_no} as a successor failed: {exc}")
            with contextlib.suppress(ExecutorError):
                if rt.executor.find_by_tag(tag) is None:
                    self.store.abandon_intent(attempt_id, now=utc(now))
            return
        self.store.confirm_submitted(
            attempt_id, executor_id, now=utc(now), log_path=log_path_for(plan, executor_id)
        )
        self._queued.add(executor_id)
        self._say(
            f"  {rt.job.name} attempt {attempt_no} queued behind job {attempt.executor_job_id}: job {executor_id}"
        )

    # -- a restart decision ----------------------------------------------------------------------

    def adopt(self, rt: JobRuntime, exclude_nodes: Sequence[str], now: float) -> AttemptInfo | None:
        """The queued successor as the restart's attempt; None when there is none to adopt."""
        if not rt.policy.queued_successor:
            return None
        queued = open_after_judged(self.store, rt.job.id)
        if not queued:
            return None
        successor = queued[-1]
        executor_id = successor.executor_job_id or ""
        if exclude_nodes:  # before the release: it must not start on a node now excluded
            state, nodes = self._state(rt, executor_id)
            if state is JobState.RUNNING and set(nodes) & set(exclude_nodes):
                self.cancel(rt, successor, f"it runs on {','.join(nodes)}, now excluded", now)
                return None  # the restart submits afresh, with --exclude
            if state is JobState.PENDING:
                self._update_excludes(rt, executor_id, exclude_nodes)
        # Released first, asked after: its start is what the restart waits for. One that started or
        # ended meanwhile makes scontrol fail for it alone, which says nothing new.
        self._released.add(executor_id)  # never held again by this monitor
        self._set_start(rt, [executor_id], 0)
        state, _ = self._state(rt, executor_id)
        self._note_unsupervised(rt, successor, state, now)
        self._say(
            f"✓ {rt.job.name} attempt {successor.attempt_no}: the queued successor, job {executor_id} ({state.value})"
        )
        if is_alive(state):
            adopted = self.store.find_attempt_by_tag(successor.submit_tag) or successor
            self.queue_behind(rt, adopted, exclude_nodes, now)
        return successor

    @staticmethod
    def _state(rt: JobRuntime, executor_id: str) -> tuple[JobState, tuple[str, ...]]:
        """The successor's state and nodes as Slurm says now (UNKNOWN when it cannot tell)."""
        try:
            record = rt.executor.query([executor_id]).get(executor_id)
        except ExecutorError:
            record = None  # watched from here on: the next poll says how it is
        return (record.state, record.nodes) if record else (JobState.UNKNOWN, ())

    def keep_held(self, runtimes: Sequence[JobRuntime], now: float) -> None:
        """Push every queued successor's start back by its hold: a live monitor decides when it runs."""
        if now < self._renew_at_s:
            return
        held = [rt for rt in runtimes if rt.policy.queued_successor and rt.executor.name == "slurm"
                and rt.policy.queued_successor_hold_s > 0]  # fmt: skip
        if not held:
            return
        self._renew_at_s = now + min(renew_every_s(rt.policy.queued_successor_hold_s) for rt in held)
        for rt in held:
            # Held: what waits behind the attempt that runs (the lowest not ended), and what this
            # monitor queued (in a restart's cooldown the successor is the lowest), until released.
            # Never the running attempt, nor a fresh restart waiting in the queue for resources.
            open_ones = open_after_judged(self.store, rt.job.id)
            # Nor one whose cancel fails: should it start, its stop file ends it, and Slurm forgets it.
            ids = [a.executor_job_id or "" for i, a in enumerate(open_ones)
                   if (i > 0 or a.executor_job_id in self._queued) and a.executor_job_id not in self._released
                   and not self.cancels.is_failing(a.id)]  # fmt: skip
            self._set_start(rt, ids, rt.policy.queued_successor_hold_s)

    def _set_start(self, rt: JobRuntime, ids: Sequence[str], from_now_s: int) -> None:
        set_start = getattr(rt.executor, "set_start_time", None)
        if set_start is None or not ids:
            return
        try:
            set_start(ids, from_now_s)
        except ExecutorError as exc:
            # One that started or ended meanwhile makes scontrol fail for it alone: the next poll sees it.
            if not any(text in str(exc) for text in ("no longer pending", "Invalid job id")):
                self._say(
                    f"warning: {rt.job.name}: could not hold/release queued successor(s) {','.join(ids)}: {exc}"
                )

    def _update_excludes(self, rt: JobRuntime, executor_id: str, nodes: Sequence[str]) -> None:
        update = getattr(rt.executor, "update_excluded_nodes", None)
        if update is None:
            return
        try:
            update(executor_id, ",".join(nodes))
        except ExecutorError as exc:
            self._say(
                f"warning: {rt.job.name}: could not exclude {','.join(nodes)} from job {executor_id}: {exc}"
            )

    def _note_unsupervised(self, rt: JobRuntime, successor: AttemptInfo, state: JobState, now: float) -> None:
        """Record it when the successor started before this monitor did (it ran with no monitor)."""
        if state in (JobState.PENDING, JobState.UNKNOWN):
            return
        started = self._started_at(rt, successor.executor_job_id or "")
        if started is None or started.timestamp() >= self._started_s:
            return
        line = unsupervised_line(successor.attempt_no, successor.executor_job_id or "",
                                 started.astimezone().isoformat(timespec="seconds"), successor.attempt_no - 1)  # fmt: skip
        self.store.record_decision(rt.job.id, attempt_id=successor.id, action=DecisionAction.NONE.value,
                                   reason=line, now=utc(now))  # fmt: skip
        self._say(f"{rt.job.name}: {line}")

    @staticmethod
    def _started_at(rt: JobRuntime, executor_id: str) -> datetime | None:
        started_at = getattr(rt.executor, "started_at", None)  # SlurmExecutor only (sacct)
        if started_at is None:
            return None
        try:
            found: datetime | None = started_at(executor_id)
        except ExecutorError:
            return None
        return found

    # -- any other decision ----------------------------------------------------------------------

    def drop(self, rt: JobRuntime, reason: str, now: float, *, after_attempt_no: int = 0) -> None:
        """The job stopped: write its stop file, then cancel its successors (attempts past `after_attempt_no`)."""
        if not rt.policy.queued_successor or rt.executor.name != "slurm":
            return  # no successor was ever queued for it
        write_stop_file(self.state_dir, rt.job.id, reason)
        for successor in unended(self.store, rt.job.id):
            if successor.attempt_no > after_attempt_no:
                self.cancel(rt, successor, reason, now)

    def cancel(self, rt: JobRuntime, successor: AttemptInfo, why: str, now: float) -> None:
        """scancel it through daemon/cancels.py; once that went through, it is recorded cancelled
        (`why`: the dropped event's reason). The job's stop file is not written: `drop` does that."""
        self.cancels.cancel(
            QueuedSuccessor(rt, successor), now, then=lambda at: self._cancelled(rt, successor, why, at)
        )

    def _cancelled(self, rt: JobRuntime, successor: AttemptInfo, why: str, now: float) -> None:
        executor_id = successor.executor_job_id or ""
        self.on_cancel(executor_id)
        self.store.update_attempt_state(successor.id, JobState.CANCELLED, ended_at=utc(now))
        line = f"{DROPPED_PREFIX}{successor.attempt_no} (job {executor_id}) cancelled: {why}"
        self.store.record_decision(rt.job.id, attempt_id=successor.id, action=DecisionAction.NONE.value,
                                   reason=line, now=utc(now))  # fmt: skip
        self._say(f"{rt.job.name}: {line}")

    def cancelling(self) -> bool:
        """Is a successor's scancel failing? It may still start: the monitor is not done yet."""
        return any(isinstance(f.live, QueuedSuccessor) for f in self.cancels.failing())
