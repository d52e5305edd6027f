"""Whether a session's monitor is alive, from its lock row and `now`. No I/O.

A holder is alive while its heartbeat is younger than a few of its own beats
(MISSED_BEATS x its interval): a monitor that beats every 10 s is stale after 30 s,
not after a fixed 120 s. Holders from before the interval was recorded fall back to
`stale_after_s`. Whether the holder's pid still runs can only be asked on its own
host; the caller passes the answer (`pid_alive`, None when it cannot know).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NamedTuple

MISSED_BEATS = 3  # a holder that missed this many heartbeats in a row is stale


class LockRow(NamedTuple):  # NamedTuples: `autoexp status` asks this and starts without dataclasses
    """The monitor lock's columns of a session (SessionInfo has them)."""

    pid: int | None
    host: str | None
    heartbeat: datetime | None
    interval_s: float | None = None  # the holder's heartbeat interval, when it recorded one
    job: str | None = None  # the holder's Slurm job id, when the monitor runs as a Slurm job
    left_at: datetime | None = None  # when the last holder let go


class Liveness(NamedTuple):
    """Whether a session's monitor runs, as `status`, `sessions` and `report` show it."""

    alive: bool
    detail: str  # "pid 12 on login1, heartbeat 3 s ago (every 10 s)" / "none, unsupervised since ..."
    heartbeat_age_s: float | None
    unsupervised_since: datetime | None = None  # when nobody watched any more (None while alive)


def liveness(lock: LockRow, now: datetime, *, stale_after_s: float, pid_alive: bool | None) -> Liveness:
    """Alive: a holder whose heartbeat is younger than its stale limit and whose pid is not known gone."""
    if lock.pid is None or lock.heartbeat is None:
        since = lock.left_at
        return Liveness(
            False, "none" + (f", unsupervised since {_when(since)}" if since else ""), None, since
        )
    age = (now.astimezone(UTC) - lock.heartbeat.astimezone(UTC)).total_seconds()
    where = f"Slurm job {lock.job}, " if lock.job else ""
    every = f" (every {lock.interval_s:.0f} s)" if lock.interval_s else ""
    detail = f"{where}pid {lock.pid} on {lock.host}, heartbeat {age:.0f} s ago{every}"
    if pid_alive is False:
        return Liveness(False, f"{detail} (that pid is gone), unsupervised since {_when(lock.heartbeat)}", age,
                        lock.heartbeat)  # fmt: skip
    limit_s, why = stale_limit(lock.interval_s, stale_after_s)
    if age > limit_s:
        return Liveness(False, f"{detail} (stale: {why}), unsupervised since {_when(lock.heartbeat)}", age,
                        lock.heartbeat)  # fmt: skip
    return Liveness(True, detail, age)


def stale_limit(interval_s: float | None, stale_after_s: float) -> tuple[float, str]:
    """How old a heartbeat may be before its holder counts as gone, and the words for it."""
    if interval_s:
        return MISSED_BEATS * interval_s, f"{MISSED_BEATS} heartbeats missed"
    return stale_after_s, f"more than {stale_after_s:.0f} s"


def _when(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
