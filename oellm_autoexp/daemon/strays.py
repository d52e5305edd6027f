"""The stray net: each poll, cancel the live jobs that carry a monitored session's tag but are
no attempt the store tracks (core/jobs/strays.py decides which), and record why.

The monitor calls `StrayNet.sweep` with the tagged jobs its poll read in the same squeue
call as the watched attempts (`Executor.query_tagged`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime

from oellm_autoexp.adapters.executors.base import Executor, ExecutorError
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, SQLiteStore
from oellm_autoexp.adapters.store.strays import record_stray_cancel
from oellm_autoexp.core.jobs.strays import KnownAttempt, Stray, TaggedJob, find_strays


class StrayNet:
    def __init__(self, store: SQLiteStore, session_ids: Sequence[int], say: Callable[[str], None]) -> None:
        self.store = store
        self.session_ids = list(session_ids)
        self._say = say
        self._cancelled: set[str] = set()  # executor ids cancelled by this monitor (scancel is async)

    def note_cancelled(self, executor_id: str) -> None:
        """A job of ours cancelled elsewhere (a queued successor): the same poll's squeue may still list it."""
        self._cancelled.add(executor_id)

    def sweep(
        self, executor: Executor, tagged: Iterable[TaggedJob], now: datetime, watched: Collection[str] = ()
    ) -> list[Stray]:
        """Cancel and record every stray among `tagged`; the strays cancelled this time.

        `watched`: the executor ids of the attempts the monitor watches. Those are the attempts
        their tags name, so never strays; when every tagged job is one of them (the usual poll),
        the store is not read at all (at 1,000 jobs that read was a tenth of a poll).
        """
        unwatched = [job for job in tagged if job.executor_id not in watched]
        if not unwatched:
            return []
        known = [known_attempt(a) for sid in self.session_ids for a in self.store.attempts_for_session(sid)]
        done = []
        for stray in find_strays(unwatched, known, self.session_ids):
            if stray.executor_id in self._cancelled:
                continue
            self.store.check_fence()
            try:
                executor.cancel(stray.executor_id)
            except ExecutorError as exc:
                self._say(f"warning: cancelling stray job {stray.executor_id} failed: {exc}; will retry")
                continue
            self._cancelled.add(stray.executor_id)
            self._say(f"cancelled stray job {stray.executor_id}: {stray.reason}")
            record_stray_cancel(self.store, stray.job_id, attempt_id=stray.attempt_id,
                                executor_job_id=stray.executor_id, tag=stray.tag, reason=stray.reason,
                                now=now)  # fmt: skip
            done.append(stray)
        return done


def known_attempt(attempt: AttemptInfo) -> KnownAttempt:
    return KnownAttempt(
        attempt.id, attempt.job_id, attempt.attempt_no, attempt.submit_tag, attempt.executor_job_id,
        attempt.intent, attempt.ended_at is not None,
    )  # fmt: skip
