"""Writes that survive a full disk (issue 13 D9): retried, and kept in memory meanwhile.

When the state dir's filesystem fills up, SQLite answers "database or disk is full"
(and plain files ENOSPC). The monitor must keep running on what it knows: a write
that fails so is queued here, in order, and retried at the next `flush()` (each
poll); later writes queue behind it so the order of decisions is kept. A warning
is said at most once a minute. Nothing queued is dropped: `pending()` lists what
is not yet on disk, for a clean stop that names it.

Only writes whose result nobody waits for belong here (decisions, states, signals,
job statuses). `record_intent` does not: the intent must be on disk BEFORE sbatch,
so a submission is postponed instead (see daemon/submitter.py).
"""

from __future__ import annotations

import errno
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy.exc import OperationalError

from oellm_autoexp.adapters.store.sqlite_store import NewSignal, SQLiteStore
from oellm_autoexp.core.decide.exclusions import Exclusion
from oellm_autoexp.core.decide.judge import Judgement
from oellm_autoexp.core.jobs.job_state import JobState

WARN_EVERY_S = 60.0
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def is_disk_full(exc: BaseException) -> bool:
    """True for SQLite's SQLITE_FULL and for ENOSPC/EDQUOT/EFBIG from the filesystem."""
    if isinstance(exc, OperationalError):
        exc = exc.orig if isinstance(exc.orig, BaseException) else exc
    if isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS


@dataclass(frozen=True)
class PendingWrite:
    """One store write, ready to run: which method, with what (for a clean stop that names it)."""

    method: str  # the SQLiteStore method it calls, e.g. "record_judgement"
    call: Callable[[], Any] = field(repr=False)
    shown: tuple[str, ...] = ()  # its arguments, as `describe` prints them

    def describe(self) -> str:
        return f"{self.method}({', '.join(self.shown)})"


class BufferedStore:
    """Calls store methods now, or, while the disk is full, later (in order)."""

    def __init__(
        self,
        store: SQLiteStore,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        warn_every_s: float = WARN_EVERY_S,
    ) -> None:
        self.store = store
        self._say = say
        self._clock = clock
        self._warn_every_s = warn_every_s
        self._queue: list[PendingWrite] = []
        self._warned_at: float | None = None

    # -- the writes the monitor makes without waiting for their result, typed as on SQLiteStore --

    def set_session_status(self, session_id: int, status: str) -> None:
        self._write("set_session_status", partial(self.store.set_session_status, session_id, status),
                    session_id, status)  # fmt: skip

    def set_job_status(self, job_id: int, status: str, reason: str = "") -> None:
        self._write("set_job_status", partial(self.store.set_job_status, job_id, status, reason),
                    job_id, status, reason)  # fmt: skip

    def update_attempt_state(
        self,
        attempt_id: int,
        state: JobState,
        *,
        exit_code: int | None = None,
        nodes: Sequence[str] | None = None,
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        call = partial(self.store.update_attempt_state, attempt_id, state, exit_code=exit_code, nodes=nodes,
                       started_at=started_at, ended_at=ended_at)  # fmt: skip
        self._write("update_attempt_state", call, attempt_id, state, f"exit_code={exit_code!r}")

    def set_last_iteration(self, attempt_id: int, iteration: int) -> None:
        self._write("set_last_iteration", partial(self.store.set_last_iteration, attempt_id, iteration),
                    attempt_id, iteration)  # fmt: skip

    def set_first_iteration(self, attempt_id: int, at: datetime) -> None:
        self._write("set_first_iteration", partial(self.store.set_first_iteration, attempt_id, at),
                    attempt_id, at.isoformat())  # fmt: skip

    def record_signals(self, attempt_id: int, signals: Sequence[NewSignal]) -> None:
        self._write("record_signals", partial(self.store.record_signals, attempt_id, signals),
                    attempt_id, f"{len(signals)} signal(s)")  # fmt: skip

    def record_decision(
        self, job_id: int, *, attempt_id: int | None, action: str, reason: str, now: datetime
    ) -> int | None:
        """The decision's id, or None when it was kept for later (disk full)."""
        call = partial(self.store.record_decision, job_id, attempt_id=attempt_id, action=action, reason=reason,
                       now=now)  # fmt: skip
        return self._write(
            "record_decision", call, job_id, f"attempt_id={attempt_id!r}", action, repr(reason)
        )

    def record_judgement(
        self,
        job_id: int,
        attempt_id: int,
        judgement: Judgement,
        *,
        now: datetime,
        signals: Sequence[NewSignal] = (),
        ended: tuple[JobState, int | None] | None = None,
        iteration: int | None = None,
        exclusions: Sequence[Exclusion] = (),
    ) -> int | None:
        """The judgement in ONE transaction (SQLiteStore.record_judgement); None when kept for later."""
        call = partial(self.store.record_judgement, job_id, attempt_id, judgement, now=now, signals=signals,
                       ended=ended, iteration=iteration, exclusions=exclusions)  # fmt: skip
        decision = judgement.decision
        return self._write("record_judgement", call, job_id, attempt_id, decision.action.value,
                           repr(decision.reason))  # fmt: skip

    def _write(self, method: str, call: Callable[[], Any], *shown: object) -> Any:
        """call()'s result, or None when it was queued (disk full)."""
        pending = PendingWrite(method, call, tuple(s if isinstance(s, str) else repr(s) for s in shown))
        if self._queue and not self.flush():
            self._queue.append(pending)  # keep the order: behind what already waits
            return None
        try:
            return pending.call()
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            self._queue.append(pending)
            self._warn(exc)
            return None

    def flush(self) -> bool:
        """Retry the queued writes in order; True when none is left."""
        while self._queue:
            try:
                self._queue[0].call()
            except Exception as exc:
                if not is_disk_full(exc):
                    raise
                self._warn(exc)
                return False
            self._queue.pop(0)
        if self._warned_at is not None:
            self._say(f"the state database is writable again: {self.store.path}; every queued write is saved")
            self._warned_at = None
        return True

    def pending(self) -> list[PendingWrite]:
        return list(self._queue)

    def _warn(self, exc: BaseException) -> None:
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < self._warn_every_s:
            return
        self._warned_at = now
        self._say(
            f"warning: cannot write {self.store.path} (disk full: {exc.__class__.__name__}); "
            f"{len(self._queue)} write(s) kept in memory and retried each poll"
        )
