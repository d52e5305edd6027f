"""Periodic ticks for the monitor loop, from APScheduler 3.x.

The scheduler's jobs do nothing but put a tick name on the loop's queue; the
loop does the work. `coalesce` folds ticks missed while the loop was busy
into one, and `max_instances=1` keeps a slow put from piling up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from apscheduler.schedulers.background import BackgroundScheduler


class Tick(StrEnum):
    """A scheduled loop event (put on the monitor's queue beside the log tailer's events)."""

    POLL = "poll"  # query the executors for every live attempt, then judge
    RESCAN = "rescan"  # re-read every watched log, whatever inotify said
    HEARTBEAT = "heartbeat"  # refresh the session locks


@dataclass(frozen=True)
class FollowUp:
    """Look at one attempt soon: Slurm's view of it alone, then the fatal-line checks.

    After a fatal line the process usually exits within seconds; asking squeue about that job
    alone (`squeue --jobs`) costs little, where a full poll of 1,000 jobs costs a full parse and
    observe of every one, several times per fatal line.
    """

    attempt_id: int


class Ticker:
    """Puts each name of `intervals` on the queue every that many seconds (a context manager)."""

    def __init__(self, put: Callable[[object], None], intervals: Mapping[str, float]) -> None:
        self._put = put
        self._scheduler = BackgroundScheduler(
            daemon=True,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        for name, seconds in intervals.items():
            self._scheduler.add_job(put, "interval", args=[name], seconds=seconds, id=name)

    def soon(self, event: object, delays_s: Sequence[float]) -> None:
        """Put `event` (a tick name, or any loop event) on the queue once after each of these delays."""
        now = datetime.now(UTC)
        for delay in delays_s:
            self._scheduler.add_job(self._put, "date", args=[event], run_date=now + timedelta(seconds=delay))

    def __enter__(self) -> Ticker:
        self._scheduler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._scheduler.shutdown(wait=True)
