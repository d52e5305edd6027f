"""The monitor's cancels of running attempts, carried out until Slurm says the attempt ended.

A decision that cancels a running attempt (a stop, or a restart on a fatal line) is recorded
first (daemon/judging.py), then `Cancels.cancel` runs `scancel`. When scancel fails the
attempt may run on: it is kept here as failing and

- said loudly: a warning line, and once per distinct error an event (a `none` decision,
  "stop requested, cancel failing: <scancel's stderr>") that `status` shows as the job's last
  decision and `explain` lists;
- cancelled again on a bounded backoff (core/jobs/cancel_retry.py) at every poll that finds a
  try due (`retry_due`), for as long as it fails;
- a hold on the job's next attempt (`holding`, asked by daemon/presubmit.py
  `predecessor_may_run`): never two
  attempts of one job side by side on one checkpoint directory.

It leaves the failing set when a scancel goes through (an event: cancelled after N failures),
or when the loop sees the attempt end (`ended`; an event if it ended by itself meanwhile).

A queued successor's cancel (daemon/successor.py: dropped on a stop, or running on a node now
excluded) goes through here too: not watched, it is marked cancelled by the `then` its cancel
names, once a scancel goes through. Its failing event is what a later monitor finds: one that
resumes cancels it again (daemon/resume.py `cancel_left_failing`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, DecisionInfo, SQLiteStore
from oellm_autoexp.core.decide.policy import DecisionAction
from oellm_autoexp.core.jobs.cancel_retry import (
    cancel_error,
    cancelled_line,
    ended_line,
    failing_line,
    is_failing_line,
    retry_after_s,
)
from oellm_autoexp.core.jobs.job_state import JobState, is_alive
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.watch import JobRuntime


class Cancellable(Protocol):
    """What a cancel needs of an attempt: a watched one (daemon/watch.py `LiveAttempt`) or a
    queued successor (daemon/successor.py `QueuedSuccessor`)."""

    @property
    def runtime(self) -> JobRuntime: ...
    @property
    def attempt(self) -> AttemptInfo: ...
    @property
    def executor_id(self) -> str: ...
    @property
    def state(self) -> JobState: ...


@dataclass(frozen=True)
class Past:
    """What the store says about an attempt before its first cancel here."""

    action: str  # the decision this cancel carries out: the last one recorded about the attempt
    failing: bool  # an earlier monitor left its cancel failing (its last event says so)


@dataclass
class Failing:
    """An attempt whose last scancel failed: it may still run."""

    live: Cancellable
    action: str  # the decision the cancel carries out (its failing events name it)
    failures: int  # scancels that failed in a row
    error: str  # what the last one said (its stderr)
    retry_at_s: float  # when it is tried again
    then: Callable[[float], None] | None = None  # once a scancel went through (a queued successor's)


class Cancels:
    """Cancels running attempts; keeps those whose scancel failed until it goes through."""

    def __init__(self, store: SQLiteStore, say: Callable[[str], None]) -> None:
        self.store = store
        self._say = say
        self._failing: dict[int, Failing] = {}  # attempt id -> its failing cancel

    def cancel(self, live: Cancellable, now: float, *, then: Callable[[float], None] | None = None) -> bool:
        """scancel the attempt; False when scancel failed (it is then tried again, see module doc).

        `then(now)` runs once a scancel went through, at this try or a later one.
        """
        self.store.check_fence()  # Slurm checks no token: a fenced monitor must not scancel
        before = self._failing.get(live.attempt.id)
        then = then or (before.then if before else None)
        # One read of the job's decisions for a first cancel; a retry knows what it carries out.
        past = self._past(live) if before is None else Past(before.action, failing=False)
        try:
            live.runtime.executor.cancel(live.executor_id)
        except ExecutorError as exc:
            self._failed(live, past.action, cancel_error(str(exc)), now, then)
            return False
        self._failing.pop(live.attempt.id, None)
        if before is not None or past.failing:
            line = cancelled_line(live.executor_id, before.failures if before else None)
            self._event(live, line, now)
            self._say(f"{_who(live)}: {line}")
        if then is not None:
            then(now)
        return True

    def retry_due(self, now: float) -> None:
        """Cancel again every failing attempt whose try is due (each poll)."""
        for failing in [f for f in self._failing.values() if f.retry_at_s <= now]:
            self.cancel(failing.live, now)

    def holding(self, job_id: int, now: float) -> list[Failing]:
        """The job's attempts that may still run because their scancel failed, after one more try
        for those due: while any is left, the job's next attempt is not submitted."""
        mine = [f for f in self._failing.values() if f.live.runtime.job.id == job_id]
        for failing in mine:
            if failing.retry_at_s <= now:
                self.cancel(failing.live, now)
        return [f for f in mine if f.live.attempt.id in self._failing]

    def is_failing(self, attempt_id: int) -> bool:
        """Is this attempt's scancel failing (it may still run, or start)?"""
        return attempt_id in self._failing

    def failing(self) -> list[Failing]:
        """Every attempt whose scancel is failing now."""
        return list(self._failing.values())

    def ended(self, live: Cancellable, now: float) -> None:
        """The loop saw the attempt end: nothing is left to cancel."""
        before = self._failing.pop(live.attempt.id, None)
        if before is not None:
            # A job lost from squeue and sacct (the unknown deadline) ends in no state of its own.
            line = ended_line(live.executor_id, "UNKNOWN" if is_alive(live.state) else live.state.value)
            self._event(live, line, now)
            self._say(f"{_who(live)}: {line}")

    def _failed(
        self, live: Cancellable, action: str, error: str, now: float, then: Callable[[float], None] | None
    ) -> None:
        before = self._failing.get(live.attempt.id)
        failures = before.failures + 1 if before else 1
        wait_s = retry_after_s(failures)
        self._failing[live.attempt.id] = Failing(live, action, failures, error, now + wait_s, then)
        who = _who(live)
        if before is not None and before.error == error:
            self._say(f"warning: {who}: scancel failed again ({failures} times): {error}; "
                      f"cancelling again in {wait_s:g} s")  # fmt: skip
            return
        # The first failure (or a new error): an event that `status` and `explain` show.
        line = failing_line(action, error)
        self._event(live, line, now)
        self._say(f"WARNING: {who}: {line}; it may still run; cancelling again in {wait_s:g} s")

    def _past(self, live: Cancellable) -> Past:
        """What the store says about the attempt, in one read of the job's decisions."""
        about = [
            d for d in self.store.decisions_for_job(live.runtime.job.id) if d.attempt_id == live.attempt.id
        ]
        acted = [d.action for d in about if d.action != DecisionAction.NONE.value]
        return Past(acted[-1] if acted else "cancel", left_failing(about))

    def _event(self, live: Cancellable, line: str, now: float) -> None:
        self.store.record_decision(live.runtime.job.id, attempt_id=live.attempt.id,
                                   action=DecisionAction.NONE.value, reason=line, now=utc(now))  # fmt: skip


def left_failing(about: Sequence[DecisionInfo]) -> bool:
    """Did an earlier monitor leave the cancel of the attempt these decisions are about (oldest
    first) failing? Its last event says so: the one fact about a failing cancel that is persisted."""
    return bool(about) and is_failing_line(about[-1].reason)


def _who(live: Cancellable) -> str:
    return f"{live.runtime.job.name} attempt {live.attempt.attempt_no} (job {live.executor_id})"
