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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import OperationalError

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

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
    method: str  # a SQLiteStore method name, e.g. "record_decision"
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        shown = [repr(a) for a in self.args] + [
            f"{k}={v!r}" for k, v in self.kwargs.items() if k != "evidence"
        ]
        return f"{self.method}({', '.join(shown)})"


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

    def write(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """store.<method>(*args, **kwargs)'s result, or None when it was queued (disk full)."""
        pending = PendingWrite(method, args, kwargs)
        if self._queue and not self.flush():
            self._queue.append(pending)  # keep the order: behind what already waits
            return None
        try:
            return self._apply(pending)
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
                self._apply(self._queue[0])
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

    def _apply(self, pending: PendingWrite) -> Any:
        return getattr(self.store, pending.method)(*pending.args, **pending.kwargs)

    def _warn(self, exc: BaseException) -> None:
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < self._warn_every_s:
            return
        self._warned_at = now
        self._say(
            f"warning: cannot write {self.store.path} (disk full: {exc.__class__.__name__}); "
            f"{len(self._queue)} write(s) kept in memory and retried each poll"
        )
