"""The learned start-up limit in the monitor: measured into the attempts table, read back from it.

Each attempt's start-up ends when its first iteration line is read: the monitor writes that
time (`attempts.first_iteration_at`) once, next to `started_at` (the poll that first saw it
RUNNING, where its start-up clock starts too). A new attempt's limit comes from those rows of the
job's earlier attempts through core/watch/startup.py `startup_limit`, so a monitor that resumes
(a takeover, a restart after being killed) reads the same rows and gives the same limit.

A first iteration read only while catching up on a resumed attempt's log (daemon/resume.py
`prime`) is not written: when it was read says nothing about when it was logged. That attempt then
counts as one that never reached its first iteration, which can only lengthen the next limit.
"""

from __future__ import annotations

from collections.abc import Iterable

from oellm_autoexp.adapters.store.buffer import BufferedStore
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, SQLiteStore
from oellm_autoexp.core.watch.progress import StartupLimit
from oellm_autoexp.core.watch.startup import Startup, startup_limit
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.watch import LiveAttempt


def startups(attempts: Iterable[AttemptInfo], before_attempt_no: int) -> list[Startup]:
    """The start-ups of the job's attempts before `before_attempt_no` that ran, oldest first."""
    out = []
    for a in sorted(attempts, key=lambda a: a.attempt_no):
        if a.attempt_no >= before_attempt_no or a.started_at is None:
            continue  # never seen running: it says nothing about a start-up
        if a.first_iteration_at is None:
            out.append(Startup(None))
        else:
            # A first iteration read before the poll that saw it RUNNING: a start-up shorter than a poll.
            out.append(Startup(max((a.first_iteration_at - a.started_at).total_seconds(), 0.0)))
    return out


def learned_limit(store: SQLiteStore, live: LiveAttempt) -> StartupLimit | None:
    """The attempt's start-up limit from the store; None when its job judges no hangs."""
    config = live.runtime.settings.hang
    if config is None:
        return None
    earlier = startups(store.attempts_for_job(live.runtime.job.id), live.attempt.attempt_no)
    return startup_limit(earlier, config)


def learn_startup(store: SQLiteStore, live: LiveAttempt) -> None:
    """The attempt's limit, and whether its start-up is known: on attaching it (after its log was
    primed), and again when it is first seen running (its predecessors have ended by then)."""
    live.view.startup = learned_limit(store, live)
    known = live.attempt.first_iteration_at is not None or live.view.first_iteration_s is not None
    # Once noted, kept: a requeued run's first iteration (the job queued again under its id) is no start-up.
    live.startup_noted = live.startup_noted or known


def note_first_iteration(writes: BufferedStore, live: LiveAttempt) -> None:
    """After a read: the attempt's first iteration line, once, into the store."""
    at = live.view.first_iteration_s
    if live.startup_noted or at is None:
        return
    live.startup_noted = True
    writes.set_first_iteration(live.attempt.id, utc(at))
