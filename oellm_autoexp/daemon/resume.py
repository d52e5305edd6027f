"""Resuming: what a monitor does first with what earlier monitors left behind.

A monitor may start after another died (SIGKILL, a reboot, a lost login node). For each job
it finds one of four things: an intent not yet confirmed (submit: adopted by its tag if the
job exists), a live attempt (watch it again, from where its log was consumed), an attempt that
ended while nobody watched (judge it now, from its whole log), or a judgement recorded but
not carried out (carry it out: the cancel and the resubmission are safe to repeat), also for
the attempt a restart was decided for when its queued successor is the one watched
(`judged_left_running`: its cancel may have failed). A queued
successor whose scancel an earlier monitor left failing is cancelled again, never watched
(`cancel_left_failing`): a stopped job's is dropped again; an active job's (it ran on a node the
restart excluded) is cancelled, then the restart that waited for it is submitted.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterable
from typing import Protocol

from oellm_autoexp.adapters.store.buffer import BufferedStore
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, Intent, JobStatus, SQLiteStore
from oellm_autoexp.core.decide.judge import stopped_status
from oellm_autoexp.core.decide.policy import DecisionAction
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import is_terminal
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.daemon.cancels import left_failing
from oellm_autoexp.daemon.successor import judged_no, unended, watched_attempt
from oellm_autoexp.daemon.watch import JobRuntime, LiveAttempt

PRIME_BLOCK_BYTES = 4 << 20  # a resumed attempt's consumed log is re-read in blocks of this size
# Why a resumed monitor cancels an active job's successor (the dropped event's words).
LEFT_FAILING = "an earlier monitor's cancel of it had not gone through"


class ResumingLoop(Protocol):
    """What resuming needs from the monitor loop."""

    @property
    def store(self) -> SQLiteStore: ...

    @property
    def writes(self) -> BufferedStore: ...

    def attach(self, rt: JobRuntime, attempt: AttemptInfo, now: float, *, watch: bool = True) -> LiveAttempt:
        """Watch an attempt (its log, its Slurm state) from now on."""

    def submit(self, rt: JobRuntime, now: float) -> None:
        """Submit the job's next attempt (or adopt an unconfirmed one by its tag)."""

    def cancel(self, live: LiveAttempt) -> None:
        """scancel the attempt."""

    def finish(self, live: LiveAttempt, record: JobRecord, now: float) -> None:
        """The attempt ended: record and judge its end."""

    def drop_successor(self, rt: JobRuntime, reason: str, now: float, *, after_attempt_no: int) -> None:
        """The job stops: its queued successor must never start."""

    def cancel_successor(self, rt: JobRuntime, successor: AttemptInfo, why: str, now: float) -> None:
        """Cancel the job's queued successor (tried again while scancel fails); the job goes on."""


def resume(loop: ResumingLoop, runtimes: Iterable[JobRuntime], now: float) -> None:
    """Re-attach to what earlier monitors left: intents, live attempts, unjudged ends."""
    for rt in runtimes:
        latest = watched_attempt(loop.store, rt.job.id)  # not its queued successor
        if rt.job.status != JobStatus.ACTIVE.value:
            # Stopped while its attempt may still run (a cancel that failed is carried out again),
            # or cancelled by the user: watched only to record how the attempt ended.
            if (latest is not None and not carry_out_recorded(loop, rt, latest, now)
                    and not cancel_left_failing(loop, rt, latest, now)):  # fmt: skip
                loop.attach(rt, latest, now)
            continue
        behind = judged_left_running(loop.store, rt.job.id, latest)
        if behind is not None and carry_out_recorded(loop, rt, behind, now):
            continue  # its restart adopts the queued successor once its cancel went through
        if latest is None or latest.intent in (Intent.ABANDONED.value, Intent.INTENDED.value):
            loop.submit(rt, now)  # adopts an unconfirmed intent found by its tag
        elif latest.executor_job_id and (latest.ended_at is None and not is_terminal(latest.state)):
            # A judgement or a cancel left to carry out comes first: it may end this attempt.
            if not (carry_out_recorded(loop, rt, latest, now) or cancel_left_failing(loop, rt, latest, now)):
                loop.attach(rt, latest, now)
        elif latest.executor_job_id:
            judge_unwatched_end(loop, rt, latest, now)


def judged_left_running(store: SQLiteStore, job_id: int, watched: AttemptInfo | None) -> AttemptInfo | None:
    """The attempt the job's last restart was decided for, when its end was never seen and it is
    not the one watched: its queued successor is (daemon/successor.py `watched_attempt`), so its
    restart's cancel, which an earlier monitor may have left failing, would never be retried."""
    number = judged_no(store, job_id)
    found = [a for a in unended(store, job_id) if a.attempt_no == number]
    return found[0] if found and (watched is None or found[0].id != watched.id) else None


def judge_unwatched_end(loop: ResumingLoop, rt: JobRuntime, attempt: AttemptInfo, now: float) -> None:
    """An attempt that ended while no monitor watched: decide now, unless that was done."""
    if carry_out_recorded(loop, rt, attempt, now):
        return
    live = loop.attach(rt, attempt, now, watch=False)
    prime(loop.store, live, now, read_all=True)
    record = JobRecord(attempt.executor_job_id or "", attempt.state, "store", exit_code=attempt.exit_code)
    loop.finish(live, record, now)


def carry_out_recorded(loop: ResumingLoop, rt: JobRuntime, attempt: AttemptInfo, now: float) -> bool:
    """Carry out a judgement an earlier monitor recorded but may not have acted on.

    The judgement and the job's new status were written in one transaction, so
    only the actions after it can be missing: the cancel and the resubmission
    (both safe to repeat: a cancel of an ended job is a no-op, a submission is
    adopted by its tag).
    """
    decided = [d for d in loop.store.decisions_for_job(rt.job.id) if d.attempt_id == attempt.id]
    acted = [d for d in decided if d.action != DecisionAction.NONE.value]
    if not acted:
        return False
    last = acted[-1]
    evidence = Evidence.from_json(last.evidence)
    if last.action != DecisionAction.RESTART.value and rt.job.status == JobStatus.ACTIVE.value:
        # Written in one transaction by this version; an older monitor wrote the stop and the
        # job's status in two steps and may have died between them.
        status = (
            stopped_status(evidence.kind) if last.action == DecisionAction.STOP.value else JobStatus.STOPPED
        )
        loop.writes.set_job_status(rt.job.id, status.value, last.reason)
    if last.action != DecisionAction.RESTART.value:
        loop.drop_successor(rt, last.reason, now, after_attempt_no=attempt.attempt_no)
    if attempt.ended_at is None and not is_terminal(attempt.state):
        live = loop.attach(rt, attempt, now)
        live.decided_early = live.cancelled_by_monitor = True
        loop.cancel(live)
    if last.action == DecisionAction.RESTART.value:
        loop.submit(rt, now)
    return True


def cancel_left_failing(loop: ResumingLoop, rt: JobRuntime, attempt: AttemptInfo, now: float) -> bool:
    """A queued successor whose scancel an earlier monitor left failing (no decision is about it,
    only that event, the one persisted fact of a cancel that never completed) is cancelled again
    instead of watched; False for any other attempt (never a cancel without that event).

    A stopped job's: the stop drops it again (daemon/successor.py `drop`). An active job's was
    cancelled because it ran on a node the restart excluded (`Successors.adopt`): cancelled again
    (no stop file: the job goes on), then the restart's attempt is submitted, held while the
    scancel still fails (daemon/presubmit.py)."""
    decisions = loop.store.decisions_for_job(rt.job.id)
    if not left_failing([d for d in decisions if d.attempt_id == attempt.id]):
        return False
    if rt.job.status == JobStatus.ACTIVE.value:
        loop.cancel_successor(rt, attempt, LEFT_FAILING, now)
        loop.submit(rt, now)
        return True
    acted = [d for d in decisions if d.action != DecisionAction.NONE.value]
    reason = acted[-1].reason if acted else (rt.job.status_reason or rt.job.status)
    loop.drop_successor(rt, reason, now, after_attempt_no=attempt.attempt_no - 1)
    return True


def prime(store: SQLiteStore, live: LiveAttempt, now: float, *, read_all: bool) -> None:
    """Rebuild a resumed attempt's view from the part of its log already consumed.

    Those lines' signals were recorded by the earlier monitor; they only
    restore the view's memory (root cause, first fatal line, last iteration).
    """
    if not live.log_path or not os.path.exists(live.log_path):
        return
    saved = store.load_offset(live.log_path)
    if saved is None and not read_all:
        return
    size = os.path.getsize(live.log_path)
    left = size if read_all or saved is None else min(saved[1], size)
    # In blocks: a log of many GB is never held whole; the decoder keeps a character
    # split between two blocks.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with open(live.log_path, "rb") as handle:
        while left > 0 and (data := handle.read(min(PRIME_BLOCK_BYTES, left))):
            left -= len(data)
            live.view.read_text(decoder.decode(data), now)
        written_s = os.fstat(handle.fileno()).st_mtime
    live.view.read_text(decoder.decode(b"", final=True), now)
    if read_all:
        live.view.flush(now)
    # Those lines were written by the file's mtime, not now: a job silent for 20 minutes
    # before this monitor started must not be given 20 more.
    live.view.backdate_output(min(written_s, now))
    live.signals_recorded = 0 if read_all else len(live.view.classifier.signals)
