"""Which of a job's attempts is the current one when a successor may be queued behind it
(restart.queued_successor, docs/supervision.md). Pure, on the store's records by their fields:
`status` reads them through sqlite3 and must not import the config models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

ABANDONED_INTENT = "abandoned"  # the store's Intent.ABANDONED: a submission that never happened
RESTART_ACTION, NONE_ACTION = "restart", "none"  # DecisionAction values, as stored
DROPPED_PREFIX = "queued successor attempt "  # the event recorded when a successor is cancelled
CANCELLED_STATE = "CANCELLED"  # JobState.CANCELLED's value (the reader's pick: a cancelled latest)


class _Attempt(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def attempt_no(self) -> int: ...
    @property
    def executor_job_id(self) -> str | None: ...
    @property
    def ended_at(self) -> object: ...
    @property
    def intent(self) -> str: ...


class _Decision(Protocol):
    @property
    def attempt_id(self) -> int | None: ...
    @property
    def action(self) -> str: ...
    @property
    def reason(self) -> str: ...


A = TypeVar("A", bound=_Attempt)


def unended_of(attempts: Sequence[A]) -> list[A]:
    """The attempts that reached the executor and have not ended, lowest first."""
    return [a for a in attempts if a.executor_job_id and a.ended_at is None and a.intent != ABANDONED_INTENT]


def judged_no_of(attempts: Sequence[_Attempt], decisions: Sequence[_Decision]) -> int:
    """The highest attempt a restart was decided for (0: none)."""
    numbers = {a.id: a.attempt_no for a in attempts}
    decided = [numbers.get(d.attempt_id or -1, 0) for d in decisions if d.action == RESTART_ACTION]
    return max(decided, default=0)


def open_after_of(attempts: Sequence[A], decisions: Sequence[_Decision]) -> list[A]:
    """Not ended and past the last restart decision, lowest first: the one that runs (or waits
    to), then the successor queued behind it."""
    judged = judged_no_of(attempts, decisions)
    return [a for a in unended_of(attempts) if a.attempt_no > judged]


def shown_attempt_of(attempts: Sequence[A], decisions: Sequence[_Decision]) -> A | None:
    """The attempt `status` shows: the one watched, else the last that was not a cancelled successor."""
    open_ones = open_after_of(attempts, decisions)
    if open_ones:
        return open_ones[0]
    dropped = {
        d.attempt_id for d in decisions if d.action == NONE_ACTION and d.reason.startswith(DROPPED_PREFIX)
    }
    kept = [a for a in attempts if a.id not in dropped]
    return kept[-1] if kept else (attempts[-1] if attempts else None)
