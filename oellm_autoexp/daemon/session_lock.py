"""One monitor per session: the lock row in the store, taken, kept alive and released.

A lock is free when nobody holds it, when its heartbeat is older than
`stale_after_s`, or when its holder is a pid on this host that no longer runs.
A heartbeat that finds the lock taken over reports it, so the loser stops
instead of deciding beside the new holder (which could submit jobs twice).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from oellm_autoexp.core.host.liveness import Liveness, LockRow, liveness
from oellm_autoexp.errors import UserError

if TYPE_CHECKING:  # annotations only: `autoexp status` asks monitor_liveness without the ORM
    from oellm_autoexp.adapters.store.sqlite_store import SessionInfo, SQLiteStore

STALE_AFTER_S = 120.0  # MonitorSettings.lock_stale_after_s's default
MONITOR_JOB_ENV = "AUTOEXP_MONITOR_JOB"  # set by a monitor running as a Slurm job: its job id


def this_host() -> str:
    """This host's name: what socket.gethostname() returns (both read the kernel's nodename);
    socket is not imported for it, as `autoexp status` asks this at every start."""
    return os.uname().nodename


def monitor_liveness(session: SessionInfo, now: datetime, stale_after_s: float = STALE_AFTER_S) -> Liveness:
    """Alive: a holder whose heartbeat is younger than a few of its beats and, on this host, whose pid runs."""
    lock = LockRow(session.monitor_pid, session.monitor_host, session.monitor_heartbeat,
                   session.monitor_interval_s, session.monitor_job, session.monitor_left_at)  # fmt: skip
    here = session.monitor_pid is not None and session.monitor_host == this_host()
    pid_alive = pid_runs(session.monitor_pid) if here and session.monitor_pid is not None else None
    return liveness(lock, now, stale_after_s=stale_after_s, pid_alive=pid_alive)


def pid_runs(pid: int) -> bool:
    """True while `pid` exists on this host (signal 0 only asks; another user's process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def refuse_if_monitored_elsewhere(
    store: SQLiteStore, now: datetime, host: str | None = None, stale_after_s: float = STALE_AFTER_S
) -> None:
    """UserError if a live monitor on another host holds a session of this store (R6).

    The state dir is then on a filesystem two hosts share (NFS, Lustre, GPFS, BeeGFS):
    SQLite's locks are unreliable there, so a second host writing beside that monitor
    could corrupt the database. Reading is safe; writing must happen on the monitor's host.
    """
    here = host or this_host()
    for session in store.list_sessions():
        if session.monitor_host in (None, here):
            continue
        live = monitor_liveness(session, now, stale_after_s)
        if live.alive:
            raise UserError(
                f"session {session.id} ({session.name}) is monitored on host {session.monitor_host} "
                f"({live.detail}); {store.path} is shared between hosts, and writing to it from {here} "
                f"beside that monitor could corrupt it. Run this command on {session.monitor_host}, "
                "or stop that monitor first (read-only commands work from any host)"
            )


class SessionLocks:
    def __init__(self, store: SQLiteStore, session_ids: Sequence[int]) -> None:
        self.store = store
        self.session_ids = list(session_ids)
        self.pid, self.host = os.getpid(), this_host()

    def acquire(self, now: datetime, stale_after_s: float, *, interval_s: float | None = None) -> None:
        """Take every session's lock, or none: MonitorLockHeld names the holder.

        Each lock taken bumps the session's generation, which the store then checks at every
        write (fencing). `interval_s`: our heartbeat interval, for `status`'s liveness. A monitor
        started as a Slurm job names it in $AUTOEXP_MONITOR_JOB (shown by `status`).
        """
        taken: list[int] = []
        try:
            for sid in self.session_ids:
                session = self.store.get_session(sid)
                if session is None:
                    raise UserError(f"no session with id {sid} in {self.store.path}")
                dead = (
                    session.monitor_pid if self._is_dead(session.monitor_pid, session.monitor_host) else None
                )
                self.store.acquire_monitor_lock_or_raise(
                    sid, pid=self.pid, host=self.host, now=now, stale_after_s=stale_after_s, dead_pid=dead,
                    interval_s=interval_s, job=os.environ.get(MONITOR_JOB_ENV) or None,
                )  # fmt: skip
                taken.append(sid)
        except BaseException:
            for sid in taken:
                self.store.release_monitor_lock(sid, pid=self.pid, host=self.host)
            raise

    def stale_holders(self, now: datetime, stale_after_s: float) -> list[SessionInfo]:
        """The sessions held by another monitor that stopped beating (or died here): `acquire` takes them."""
        found = []
        for sid in self.session_ids:
            session = self.store.get_session(sid)
            if session is None or session.monitor_pid is None or self._is_ours(session):
                continue
            beat = session.monitor_heartbeat
            stale = beat is None or (now - beat).total_seconds() > stale_after_s
            if stale or self._is_dead(session.monitor_pid, session.monitor_host):
                found.append(session)
        return found

    def _is_ours(self, session: SessionInfo) -> bool:
        return session.monitor_pid == self.pid and session.monitor_host == self.host

    def heartbeat(self, now: datetime) -> list[int]:
        """Refresh every lock; the sessions whose lock another monitor has taken."""
        return [
            sid
            for sid in self.session_ids
            if not self.store.heartbeat(sid, pid=self.pid, host=self.host, now=now)
        ]

    def release(self) -> None:
        for sid in self.session_ids:
            self.store.release_monitor_lock(sid, pid=self.pid, host=self.host)

    def _is_dead(self, pid: int | None, host: str | None) -> bool:
        # Liveness can only be checked on our own host.
        if pid is None or host != self.host or pid == self.pid:
            return False
        return not pid_runs(pid)
