"""What the monitor tells its observers (alerts, metrics), and how they are called.

The monitor makes ONE kind of call, `observer.notice(event)`, at a few points of its loop:
after a judgement is recorded (`Judged`), after each poll (`Polled`), when every job of its
sessions reached a final status (`SessionsEnded`), and when it took over a session whose
previous monitor's heartbeat was stale (`StaleMonitorFound`). Events are frozen records, so
an observer is tested by building them directly.

Observers run on the monitor's thread and must return quickly (daemon/notify.py only queues
a message; daemon/metrics.py sets numbers). `Observers` fans an event out and swallows what
an observer raises: an alert or a metric never breaks the loop.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Protocol

from oellm_autoexp.adapters.store.sqlite_store import SessionInfo
from oellm_autoexp.core.decide.judge import Judgement
from oellm_autoexp.daemon.watch import LiveAttempt


@dataclass(frozen=True)
class Judged:
    """A judgement about `live` was recorded (in one transaction) and is being carried out."""

    live: LiveAttempt
    judgement: Judgement
    now_s: float


@dataclass(frozen=True)
class Polled:
    """A poll ended: the attempts still watched, after Slurm and the logs were looked at."""

    session_ids: tuple[int, ...]
    lives: tuple[LiveAttempt, ...]
    now_s: float


@dataclass(frozen=True)
class SessionsEnded:
    """Every job of these sessions reached a final status; the sessions are marked completed."""

    session_ids: tuple[int, ...]
    now_s: float


@dataclass(frozen=True)
class StaleMonitorFound:
    """This monitor took a session whose previous monitor had stopped beating (or died)."""

    session_id: int
    pid: int  # the previous monitor's
    host: str | None
    heartbeat: datetime | None  # its last heartbeat
    stale_after_s: float
    now_s: float


MonitorEvent = Judged | Polled | SessionsEnded | StaleMonitorFound


class MonitorObserver(Protocol):
    def notice(self, event: MonitorEvent) -> None:
        """Take one event; quick, on the monitor's thread."""

    def close(self) -> None:
        """The monitor stops: finish (bounded in time) and release threads and ports. Idempotent."""


class Observers:
    """Several observers as one; what one of them raises is reported, never passed on."""

    def __init__(self, observers: Sequence[MonitorObserver], say: Callable[[str], None]) -> None:
        self._observers = list(observers)
        self._say = say

    def notice(self, event: MonitorEvent) -> None:
        for observer in self._observers:
            self._guarded(observer, partial(observer.notice, event))

    def close(self) -> None:
        for observer in self._observers:
            self._guarded(observer, observer.close)

    def _guarded(self, observer: MonitorObserver, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self._say(
                f"warning: {type(observer).__name__} failed ({type(exc).__name__}: {exc} at "
                f"{Path(where.filename).name}:{where.lineno}); the monitor goes on"
            )


def stale_found(
    sessions: Sequence[SessionInfo], stale_after_s: float, now_s: float
) -> list[StaleMonitorFound]:
    """The events for sessions whose previous monitor was found stale (SessionLocks.stale_holders)."""
    return [
        StaleMonitorFound(s.id, s.monitor_pid or 0, s.monitor_host, s.monitor_heartbeat, stale_after_s, now_s)
        for s in sessions
    ]
