"""The monitor loop: adapter events -> core decisions -> adapters act.

One thread owns every decision and every database write: this loop. Watchdog
(through the log tailer) and APScheduler only put events on its queue:
`LogEvent`s when a log grows, `Tick`s on a schedule (poll Slurm, rescan logs,
heartbeat). A poll makes ONE query per executor for all live attempts of all
monitored sessions (SlurmExecutor: one squeue, then one sacct for the rest).
After a fatal line, `FollowUp`s look at that attempt alone within seconds (its
process usually exits soon): `squeue --jobs <id>`, not a full poll of every job.

What the loop hands off, each in a module of its own:
- daemon/resume.py: what earlier monitors left (intents, live attempts, unjudged ends);
- daemon/judging.py: the judge step (gather -> judge -> one transaction -> carry out),
  run on every verdict: the job ended, a fatal line settled, the hang tracker fired;
- daemon/read_record.py: the timing record (which bytes were read when);
- daemon/presubmit.py, daemon/submitter.py: the checks before a resubmission, and submitting;
- daemon/cancels.py: cancels, carried out (tried again while scancel fails) until the attempt ended.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from oellm_autoexp.adapters.executors.base import Executor, ExecutorError
from oellm_autoexp.adapters.executors.factory import make_executor
from oellm_autoexp.adapters.logs.tail import LogEvent, LogLines, LogRotated, LogTailer, LogTruncated
from oellm_autoexp.adapters.store.buffer import BufferedStore, is_disk_full
from oellm_autoexp.adapters.store.snapshot import SNAPSHOT_FILENAME, write_snapshot
from oellm_autoexp.adapters.store.sqlite_store import (
    AttemptInfo,
    Fenced,
    JobInfo,
    JobStatus,
    SessionStatus,
    SQLiteStore,
)
from oellm_autoexp.config.monitoring import poll_interval_s
from oellm_autoexp.core.decide.judge import Judgement
from oellm_autoexp.core.decide.policy import DecisionAction
from oellm_autoexp.core.jobs.job_record import JobRecord, allocation
from oellm_autoexp.core.jobs.job_state import JobState, is_requeue, is_terminal
from oellm_autoexp.core.watch.attempt_view import Recovery
from oellm_autoexp.core.watch.verdict import Trigger, Verdict
from oellm_autoexp.daemon.cancels import Cancels, left_failing
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.events import (
    Judged,
    MonitorObserver,
    Observers,
    Polled,
    SessionsEnded,
    stale_found,
)
from oellm_autoexp.daemon.judging import judge_attempt, unrecorded_signals
from oellm_autoexp.daemon.presubmit import PreSubmission, exclude_on_queued
from oellm_autoexp.daemon.read_record import ReadRecord
from oellm_autoexp.daemon.resume import prime, resume
from oellm_autoexp.daemon.scheduler import FollowUp, Tick, Ticker
from oellm_autoexp.daemon.session import ExecutorFactory, job_runtime
from oellm_autoexp.daemon.session_lock import SessionLocks
from oellm_autoexp.daemon.stack_probe import StackProbe
from oellm_autoexp.daemon.startup import learn_startup, note_first_iteration
from oellm_autoexp.daemon.strays import StrayNet
from oellm_autoexp.daemon.submitter import Submitter
from oellm_autoexp.daemon.successor import watched_attempt
from oellm_autoexp.daemon.watch import JobRuntime, LiveAttempt

DEFAULT_POLL_S = 10.0  # a monitor with no job to watch (its sessions are done)
FLUSH_WAIT_S = 2.0  # how long a job's end waits for the tailer to read its last lines
QUEUE_WAIT_S = 0.5  # the loop wakes at least this often to notice a stop request
# monitor_state.json is rewritten at most this often while running (and always at the end): it
# reads every job of the store, and a fatal line brings several polls within seconds.
SNAPSHOT_EVERY_S = 5.0
# Extra polls after a fatal line (seconds from it): the process usually exits within a few seconds.
FATAL_FOLLOW_UP_POLLS_S = (0.5, 1.5, 3.0, 6.0)
DEFAULT_LOCK_STALE_S = 120.0  # sessions without active jobs (MonitorSettings.lock_stale_after_s)
LOCK_LOST_EXIT = 3  # run()'s exit code when another monitor took over a session (or fenced this one off)
# The loop turns at least every QUEUE_WAIT_S; a turn this much later means the monitor itself stood
# still (paused, suspended, blocked): it catches up on logs and Slurm before judging (_notice_own_gap).
OWN_GAP_S = 15.0
CATCH_UP_WAIT_S = 10.0  # how long a catch-up waits for the tailer to read every log to its end
STORE_LOST_EXIT = 4  # run()'s exit code when autoexp.db was deleted or replaced under it


class Monitor:
    """Watches the jobs of some sessions until each is finished (or `stop` is set)."""

    def __init__(
        self,
        store: SQLiteStore,
        session_ids: Iterable[int],
        *,
        state_dir: Path,
        clock: Callable[[], float] = time.time,
        say: Callable[[str], None] | None = None,
        on_poll: Callable[[], None] | None = None,
        executor_factory: ExecutorFactory = make_executor,
        observers: Sequence[MonitorObserver] = (),
    ) -> None:
        self.store = store
        self._executor_factory = executor_factory  # tests inject executors without Slurm
        self.session_ids = list(session_ids)
        self.state_dir = state_dir
        self.clock = clock
        self._say_to = say or _print_line
        self._on_poll = on_poll  # e.g. a terminal status view redrawing after each poll
        self._events: queue.Queue[object] = queue.Queue()
        self._deferred: list[object] = []
        self._runtimes: dict[int, JobRuntime] = {}  # job id -> runtime
        self._live: dict[int, LiveAttempt] = {}  # attempt id -> live attempt
        self._by_log: dict[str, LiveAttempt] = {}  # absolute log path -> live attempt
        self._locks = SessionLocks(store, self.session_ids)
        self._tailer: LogTailer | None = None
        self._ticker: Ticker | None = None
        self._cancels = Cancels(store, self._say)  # tried again while scancel fails (daemon/cancels.py)
        self._probe = StackProbe(self._say)  # a silent hang's stack-dump probe (daemon/stack_probe.py)
        self._submitter = Submitter(store, self._say, self._cancels)  # its successors' cancels go there too
        self._presubmit = PreSubmission(store, self._submitter, self._cancels, self._say)
        self._dirty = True
        self._snapshot_at = -math.inf  # when monitor_state.json was last written
        self._lock_lost = False  # a heartbeat found another monitor holding a session: stop
        self._store_lost = False  # autoexp.db was deleted or replaced: stop, naming the jobs
        self._fenced = False  # a write found another monitor's lock generation: stop, write nothing
        self._turned_at = (time.time(), time.monotonic())  # when the loop last finished a turn
        # Writes nobody waits for go through a buffer that keeps them, in order, while the
        # disk is full (retried each poll); the stray net cancels jobs of ours nobody tracks.
        self._writes = BufferedStore(store, self._say)
        self._reads = ReadRecord(store)  # the timing record (daemon/read_record.py)
        self._strays = StrayNet(store, self.session_ids, self._say)
        self._submitter.successors.on_cancel = self._strays.note_cancelled
        self._observer = Observers(observers, self._say)  # alerts (daemon/notify.py), metrics

    # -- lifecycle ------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> int:
        """Monitor until every job is finished; 0 if all completed, 1 otherwise, 3 if the lock was lost."""
        stop = stop or threading.Event()
        self._load_runtimes()  # first: the lock's staleness limit is a job setting
        self._lock_sessions()
        try:
            settings = [rt.settings for rt in self._runtimes.values()]
            mode = settings[0].log_watch if settings else "auto"
            poll_s = min((poll_interval_s(rt.settings, rt.executor.name) for rt in self._runtimes.values()),
                         default=DEFAULT_POLL_S)  # fmt: skip
            with LogTailer(self._events.put, self.store, mode=mode, commit_on_emit=False,
                           poll_interval_s=min(s.log_poll_interval_s for s in settings) if settings else 2.0
                           ) as tailer, Ticker(self._events.put, self._intervals(poll_s)) as ticker:  # fmt: skip
                self._tailer, self._ticker = tailer, ticker
                try:
                    resume(self, self._runtimes.values(), self.clock())
                    self._poll(self.clock())
                    while (
                        not stop.is_set()
                        and not self._lock_lost
                        and not self._store_lost
                        and not self._finished()
                    ):
                        self._turn()
                except Fenced as exc:
                    # Another monitor took over while this one stood still: it acts now, not us.
                    self._say(f"STOPPING: {exc}")
                    self._fenced = self._lock_lost = True
            if self._store_lost:
                return STORE_LOST_EXIT
            return LOCK_LOST_EXIT if self._lock_lost else self._exit_code()
        finally:
            self._tailer = None
            # A monitor that lost its lock writes nothing more: the new holder decides from now on
            # (and the store would refuse the writes of a fenced-off monitor anyway).
            self._fenced = self._fenced or self._lock_lost
            if not self._store_lost and not self._fenced:
                self._writes.flush()
                self._reads.save()
                self._write_snapshot()
            if not self._store_lost:
                self._release_sessions()
            why = "another monitor holds the session" if self._fenced else "disk full"
            for pending in self._writes.pending():
                self._say(f"NOT SAVED ({why}): {pending.describe()}")
            self._observer.close()

    def _turn(self) -> None:
        """One turn of the loop: the next event, after noticing whether the monitor itself stood still."""
        event = self._next_event()
        self._notice_own_gap()
        if not self._lock_lost and not self._store_lost:
            self._handle(event)
        self._turned_at = (time.time(), time.monotonic())

    def _notice_own_gap(self) -> None:
        """A turn much later than the loop's wake-up interval: this process was paused (SIGSTOP, a
        suspended VM, an overloaded login node) or blocked. What happened meanwhile is in the logs
        and in Slurm, not yet in the views: read every log and poll Slurm before any time-based
        verdict, so that the monitor's own pause is never taken for the job's hang.

        Both clocks are asked: the monotonic one runs on through SIGSTOP, the wall clock through a
        suspended machine. Neither is the injectable `self.clock` (a test's virtual time).
        """
        wall, mono = time.time(), time.monotonic()
        gap_s = max(wall - self._turned_at[0], mono - self._turned_at[1])
        if gap_s < OWN_GAP_S:
            return
        self._say(f"the monitor itself stood still for {gap_s:.0f} s (paused, suspended or blocked): "
                  "checking its lock, reading every log and polling Slurm before judging anything")  # fmt: skip
        self._heartbeat(self.clock())  # taken over meanwhile? then stop before acting
        if self._lock_lost or self._store_lost:
            return
        self.store.check_fence()
        if self._tailer is not None:
            self._tailer.rescan()
            self._tailer.sync(CATCH_UP_WAIT_S)
            self._drain_log_events()
        self._poll(self.clock())

    def _intervals(self, poll_s: float) -> dict[str, float]:
        settings = list(self._runtimes.values())
        first = settings[0].settings if settings else None
        return {
            Tick.POLL: poll_s,
            Tick.RESCAN: first.rescan_interval_s if first else 30.0,
            Tick.HEARTBEAT: first.heartbeat_interval_s if first else 10.0,
        }

    def _next_event(self) -> object:
        if self._deferred:
            return self._deferred.pop(0)
        try:
            return self._events.get(timeout=QUEUE_WAIT_S)
        except queue.Empty:
            return None

    def _handle(self, event: object) -> None:
        now = self.clock()
        if event is Tick.POLL:
            self._poll(now)
        elif event is Tick.RESCAN and self._tailer is not None:
            self._tailer.rescan()
        elif event is Tick.HEARTBEAT:
            self._heartbeat(now)
        elif isinstance(event, FollowUp):
            self._follow_up(event.attempt_id, now)
        elif isinstance(event, LogEvent):
            self._on_log(event, now)

    # -- sessions and locks ---------------------------------------------------------------------

    def _lock_sessions(self) -> None:
        stale_after_s = min((rt.settings.lock_stale_after_s for rt in self._runtimes.values()),
                            default=DEFAULT_LOCK_STALE_S)  # fmt: skip
        stale = self._locks.stale_holders(utc(self.clock()), stale_after_s)
        interval_s = self._intervals(DEFAULT_POLL_S)[Tick.HEARTBEAT]
        self._locks.acquire(utc(self.clock()), stale_after_s, interval_s=interval_s)
        for found in stale_found(stale, stale_after_s, self.clock()):
            self._observer.notice(found)

    def _release_sessions(self) -> None:
        self._locks.release()

    def _heartbeat(self, now: float) -> None:
        problem = self.store.file_problem()
        if problem is not None:
            self._stop_store_lost(problem)
            return
        self._submitter.successors.keep_held(list(self._runtimes.values()), now)
        for sid in self._locks.heartbeat(utc(now)):
            # Another monitor took the lock (ours looked stale): deciding beside it could
            # submit jobs twice. Stop; the jobs go on under the new holder.
            self._say(f"session {sid}: the monitor lock was taken over by another monitor; stopping")
            self._lock_lost = True

    def _stop_store_lost(self, problem: str) -> None:
        """The session database is gone (deleted, replaced): writing on would lose every decision."""
        self._say(f"ERROR: {problem}; stopping the monitor. These jobs keep running unmonitored:")
        for live in self._live.values():
            self._say(f"  {self._who(live)}: {live.state.value}, log {live.log_path or '-'}")
        self._say("restore the database (or cancel the jobs), then run autoexp monitor-session again")
        self._store_lost = True

    def _load_runtimes(self) -> None:
        for sid in self.session_ids:
            for job in self.store.jobs_for_session(sid):
                if job.status == JobStatus.ACTIVE.value or self._ended_unseen(job):
                    self._runtimes[job.id] = job_runtime(job, self.state_dir, self._executor_factory)

    def _ended_unseen(self, job: JobInfo) -> bool:
        """A job no longer active whose attempt's end is still to be seen: `autoexp cancel` while no
        monitor ran, or a stop whose scancel (or its queued successor's) failed before the last
        monitor left (cancelled again on resume: daemon/resume.py)."""
        if job.status == JobStatus.CANCELLED_BY_USER.value:
            latest = self.store.latest_attempt(job.id)
            return bool(latest and latest.executor_job_id and latest.ended_at is None)
        watched = watched_attempt(self.store, job.id)  # not a queued successor
        if watched is None or not watched.executor_job_id or watched.ended_at is not None:
            return False
        about = [d for d in self.store.decisions_for_job(job.id) if d.attempt_id == watched.id]
        # A dropped successor is the lowest attempt not ended once the stopped one ended: no decision
        # is about it, only the failing cancel's event.
        return any(d.action != DecisionAction.NONE.value for d in about) or left_failing(about)

    def _finished(self) -> bool:
        # A job stopped from outside (`autoexp cancel`) or by a decision that cancelled it is not
        # finished until its attempt's end is seen: that end is recorded and judged too.
        # Runs after every event: a watched job answers without asking the store.
        if self._live:
            return False
        active = [j for j in self._runtimes if self._job_status(j) == JobStatus.ACTIVE.value]
        done = not active and not self._submitter.has_due() and not self._submitter.fanout.has_open()
        return done and not self._submitter.successors.cancelling()  # a successor may still start

    def _job_status(self, job_id: int) -> str:
        job = self.store.get_job(job_id)
        return job.status if job else JobStatus.STOPPED.value

    def _exit_code(self) -> int:
        statuses = [self._job_status(j) for j in self._runtimes]
        may_run = bool(self._live) or self._submitter.successors.cancelling()
        if may_run or any(s == JobStatus.ACTIVE.value for s in statuses):
            # Stopped on request; the jobs go on and a later monitor resumes them. A stopped job
            # whose attempt or queued successor may still run (its scancel failed) is not ended either.
            return 0
        for sid in self.session_ids:
            self._writes.set_session_status(sid, SessionStatus.COMPLETED.value)
        self._observer.notice(SessionsEnded(tuple(self.session_ids), self.clock()))
        return 0 if all(s == JobStatus.COMPLETED.value for s in statuses) else 1

    # -- submitting -----------------------------------------------------------------------------

    def submit(self, rt: JobRuntime, now: float) -> None:
        """The checks before a resubmission, then the submission (daemon/presubmit.py)."""
        attempt = self._presubmit.next_attempt(rt, now)
        if attempt is not None:
            self.attach(rt, attempt, now)
        self._dirty = True

    def attach(self, rt: JobRuntime, attempt: AttemptInfo, now: float, *, watch: bool = True) -> LiveAttempt:
        log_path = os.path.abspath(attempt.log_path) if attempt.log_path else None
        live = LiveAttempt(rt, attempt, rt.new_view(log_path), log_path, state=attempt.state)
        self._live[attempt.id] = live
        if log_path and watch:
            prime(self.store, live, now, read_all=False)
            self._by_log[log_path] = live
            if self._tailer is not None:
                self._tailer.watch(log_path)
        learn_startup(self.store, live)  # the start-up limit learned from the job's earlier attempts
        return live

    # -- polling Slurm --------------------------------------------------------------------------

    def _poll(self, now: float) -> None:
        self._writes.flush()  # what a full disk held back, in order
        self._reads.save()
        self._cancels.retry_due(now)  # cancels whose scancel failed, successors' too (daemon/cancels.py)
        for job_id, _ in self._submitter.take_due(now):
            if job_id in self._runtimes:
                self.submit(self._runtimes[job_id], now)
        by_executor: dict[str, list[LiveAttempt]] = {name: [] for name in self._submitter.fanout.executors()}
        for live in list(self._live.values()):
            by_executor.setdefault(live.runtime.executor.name, []).append(live)
        executors = {**{v[0].runtime.executor.name: v[0].runtime.executor for v in by_executor.values() if v},
                     **self._submitter.fanout.executors()}  # fmt: skip
        for name, lives in by_executor.items():
            self._poll_executor(executors[name], lives, now)
        self._check_fatal_lines(now)
        self._check_hangs(now)
        self._observer.notice(Polled(tuple(self.session_ids), tuple(self._live.values()), now))
        if self._on_poll is not None:
            self._on_poll()
        if self._dirty and now - self._snapshot_at >= SNAPSHOT_EVERY_S:
            self._write_snapshot()

    def _follow_up(self, attempt_id: int, now: float) -> None:
        """A poll of one attempt after its fatal line (FollowUp): its state, then the fatal checks."""
        live = self._live.get(attempt_id)
        if live is None:
            return  # ended and judged since
        try:
            records = live.runtime.executor.query([live.executor_id])
        except ExecutorError as exc:
            self._say(f"warning: could not query {live.runtime.executor.name}: {exc}; will retry")
            return
        record = records.get(live.executor_id)
        if record is not None:
            self._observe(live, record, now)
        self._check_fatal_lines(now)
        if self._on_poll is not None:
            self._on_poll()

    def _poll_executor(self, executor: Executor, lives: list[LiveAttempt], now: float) -> None:
        racing = self._submitter.fanout.open_ids(executor.name)  # fan-out candidates: the same squeue
        try:
            records, tagged = executor.query_tagged([live.executor_id for live in lives] + racing)
        except ExecutorError as exc:
            # No information this poll. A flaky controller is never a failed job.
            self._say(f"warning: could not query {executor.name}: {exc}; will retry")
            return
        for rt, attempt in self._submitter.fanout.settle(executor.name, records, now):
            lives.append(self.attach(rt, attempt, now))  # the winner, observed in this same poll
        for live in lives:
            record = records.get(live.executor_id)
            if record is not None:
                self._observe(live, record, now)
        self._strays.sweep(executor, tagged, utc(now), watched={live.executor_id for live in lives})

    def _observe(self, live: LiveAttempt, record: JobRecord, now: float) -> None:
        if record.state is JobState.UNKNOWN:
            self._observe_unknown(live, now)
            return
        live.unknown_since_s = None
        if is_requeue(live.state, record.state):
            cause = live.view.cause()
            self._say(f"{self._who(live)}: requeued by Slurm ({cause.error_type if cause else 'no cause in the log'}): "
                      "it runs again under the same id; waiting for it (not a restart, no budget spent)")  # fmt: skip
            live.start_new_run(requeued=True)
        if record.state != live.state or allocation(live.nodes, record) != live.nodes:
            self._store_state(live, record, now)
        if record.state is JobState.RUNNING:
            live.view.mark_running(now)
        if is_terminal(record.state) or (record.state is JobState.PREEMPTED and record.source == "sacct"):
            self.finish(live, record, now)

    def _observe_unknown(self, live: LiveAttempt, now: float) -> None:
        if live.unknown_since_s is None:
            live.unknown_since_s = now
            return
        waited = now - live.unknown_since_s
        if waited < live.runtime.settings.unknown_deadline_s:
            return
        self._say(f"{self._who(live)}: unknown to squeue and sacct for {waited:.0f} s; treating it as lost")
        self._drop(live)
        self._judge(live, Verdict(Trigger.LOST, now, observed=f"unknown for {waited:.0f} s"), now,
                    ended=(JobState.UNKNOWN, None))  # fmt: skip

    def _store_state(self, live: LiveAttempt, record: JobRecord, now: float) -> None:
        first_run = record.state is JobState.RUNNING and live.state is not JobState.RUNNING
        if record.state != live.state:
            self._say(f"{self._who(live)}: {record.state.value}")
        live.state, live.nodes = record.state, allocation(live.nodes, record)
        self._writes.update_attempt_state(live.attempt.id, record.state, exit_code=record.exit_code, nodes=live.nodes or None,
            started_at=utc(now) if first_run else None,
        )  # fmt: skip
        if first_run:  # a queued successor was attached while its predecessor still ran: learn again now
            learn_startup(self.store, live)
        self._dirty = True

    # -- an attempt's end -----------------------------------------------------------------------

    def finish(self, live: LiveAttempt, record: JobRecord, now: float) -> None:
        self._read_last_lines(live)
        self._drop(live)
        ended = (record.state, record.exit_code)
        job = self.store.get_job(live.runtime.job.id)
        judged = job is not None and job.status in (JobStatus.ACTIVE.value, JobStatus.CANCELLED_BY_USER.value)
        if live.cancelled_by_monitor or live.decided_early or not judged:
            # Already decided while it ran (this end is our own doing), or stopped for good.
            self.record_end(live, ended, now)
            return
        self._judge(live, live.view.end_verdict(record, now), now, ended=ended)

    def record_end(self, live: LiveAttempt, ended: tuple[JobState, int | None], now: float) -> None:
        self._record_signals(live, now)
        self._writes.update_attempt_state(live.attempt.id, ended[0], exit_code=ended[1], ended_at=utc(now))
        if live.view.last_iteration is not None:
            self._writes.set_last_iteration(live.attempt.id, live.view.last_iteration)
        self._dirty = True

    def _read_last_lines(self, live: LiveAttempt) -> None:
        """Let the tailer read the log to its end, and classify it, before judging."""
        if self._tailer is None or not live.log_path or live.log_path not in self._by_log:
            return
        self._tailer.flush(live.log_path)
        self._tailer.sync(FLUSH_WAIT_S)
        self._drain_log_events()

    def _drain_log_events(self) -> None:
        """Handle every log event already queued; ticks and follow-ups wait their turn, after."""
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if isinstance(event, LogEvent):
                self._on_log(event, self.clock())
            else:
                self._deferred.append(event)

    def _drop(self, live: LiveAttempt) -> None:
        """Stop watching an attempt that ended (its end is recorded by the caller)."""
        self._reads.save()  # its last reads, and where its log was consumed to
        self._live.pop(live.attempt.id, None)
        self._cancels.ended(live, self.clock())  # a cancel still failing is over
        if live.log_path and self._by_log.get(live.log_path) is live:
            del self._by_log[live.log_path]
            if self._tailer is not None:
                self._tailer.unwatch(live.log_path)
        self._dirty = True

    # -- deciding and acting: the judge step (daemon/judging.py) and what it asks of the loop -------

    def _judge(
        self,
        live: LiveAttempt,
        verdict: Verdict,
        now: float,
        *,
        ended: tuple[JobState, int | None] | None = None,
    ) -> Judgement:
        judgement = judge_attempt(self, live, verdict, now, ended=ended)
        self._dirty = self._dirty or judgement.record
        return judgement

    @property
    def writes(self) -> BufferedStore:
        return self._writes

    def announce(self, live: LiveAttempt, judgement: Judgement, now: float) -> None:
        self._observer.notice(Judged(live, judgement, now))
        self._say(f"{self._who(live)}: {judgement.decision.action.value}: {judgement.decision.reason}")
        self._dirty = True

    def watching(self, live: LiveAttempt) -> bool:
        return live.attempt.id in self._live

    def drop_successor(self, rt: JobRuntime, reason: str, now: float, *, after_attempt_no: int) -> None:
        """A stop: write the job's stop file and cancel its queued successor (daemon/successor.py)."""
        self._submitter.successors.drop(rt, reason, now, after_attempt_no=after_attempt_no)

    def cancel_successor(self, rt: JobRuntime, successor: AttemptInfo, why: str, now: float) -> None:
        """Cancel a queued successor of an active job (daemon/successor.py); no stop file."""
        self._submitter.successors.cancel(rt, successor, why, now)

    def resubmit_after(
        self, rt: JobRuntime, after_s: float, exclude_nodes: tuple[str, ...], now: float
    ) -> None:
        self._submitter.schedule(rt.job.id, after_s, exclude_nodes)
        if after_s <= now:
            for job_id, _ in self._submitter.take_due(now):
                self.submit(self._runtimes[job_id], now)

    def cancel(self, live: LiveAttempt) -> None:
        """scancel the attempt; while scancel fails it is tried again (daemon/cancels.py)."""
        self._cancels.cancel(live, self.clock())
        self._dirty = True

    def _check_fatal_lines(self, now: float) -> None:
        for live in list(self._live.values()):
            if live.decided_early or live.waiting_on_fatal or live.state is JobState.PENDING:
                continue
            verdict = live.view.fatal_verdict(now)
            if verdict is not None:
                self._judge(live, verdict, now)
            for recovery in live.view.take_recoveries():
                self._record_recovery(live, recovery, now)

    def _check_hangs(self, now: float) -> None:
        for live in list(self._live.values()):
            config = live.runtime.settings.hang
            if config is None or live.decided_early or live.state is not JobState.RUNNING:
                continue
            verdict = self._probe.hang_verdict(live, now, config)
            if verdict is not None:
                self._say(f"{self._who(live)}: hang detected: {verdict.hang.detail if verdict.hang else ''}")
                self._judge(live, verdict, now)

    # -- exclusions on queued attempts, in-job recoveries --------------------------------------------

    def exclude_on_queued(self, rt: JobRuntime, now: float) -> None:
        """A successor of the job already queued gets the new list too (`scontrol update`, Slurm only)."""
        queued = [
            v for v in self._live.values() if v.runtime.job.id == rt.job.id and v.state is JobState.PENDING
        ]
        for warning in exclude_on_queued(self.store, rt, [v.executor_id for v in queued], utc(now)):
            self._say(f"warning: {rt.job.name}: {warning}")

    def _record_recovery(self, live: LiveAttempt, recovery: Recovery, now: float) -> None:
        """An in-job restart healed: an event for `autoexp explain` (a `none` row: no budget counts it)."""
        reason = recovery.describe()
        self.store.record_decision(live.runtime.job.id, attempt_id=live.attempt.id,
                                   action=DecisionAction.NONE.value, reason=reason, now=utc(now),
                                   evidence=recovery.evidence().to_json())  # fmt: skip
        self._say(f"{self._who(live)}: {reason}")
        self._dirty = True

    # -- logs -----------------------------------------------------------------------------------

    def _on_log(self, event: LogEvent, now: float) -> None:
        live = self._by_log.get(event.path)
        if not isinstance(event, LogLines):
            if live is not None:
                self._say(f"{self._who(live)}: log {type(event).__name__}: {event.path}")
                if live.requeued and isinstance(event, LogTruncated | LogRotated):
                    live.start_new_run(requeued=False)  # the new run's lines start here
            return
        if live is not None:
            kept = len(live.view.classifier.signals)
            self._classify(live, event.lines, now)
            # The read's time and the tailer's consumed offset, in one commit.
            self._reads.note(live, event, now, has_signal=len(live.view.classifier.signals) > kept)
        elif self._tailer is not None:
            self._tailer.commit(event)

    def _classify(self, live: LiveAttempt, lines: tuple[str, ...], now: float) -> None:
        had_fatal = live.view.first_fatal is not None
        signals = live.view.read(lines, now)
        note_first_iteration(self._writes, live)  # the attempt's start-up, for its job's later attempts
        due = live.view.fatal_due_s()  # what the view says now; recording the signals changes nothing of it
        self._record_signals(live, now)
        if live.decided_early:
            return
        if any(s.is_cause_candidate for s in signals):
            live.waiting_on_fatal = False  # a new cause may change a "wait for the end"
        if had_fatal or due is None or self._ticker is None:
            return
        if live.view.early.in_job_restarts:
            self._say(f"{self._who(live)}: fatal line; the launcher restarts in place: recovery window "
                      f"{due - now:.0f} s for a new best iteration")  # fmt: skip
        # The first fatal line: judge it once the settle window has passed, and look at
        # Slurm soon (the process may exit within seconds) rather than at the next poll.
        settle = max(due - now, 0.0)
        self._ticker.soon(
            FollowUp(live.attempt.id), sorted({*FATAL_FOLLOW_UP_POLLS_S, settle + 0.05, settle + 1.0})
        )

    def _record_signals(self, live: LiveAttempt, now: float) -> None:
        fresh = unrecorded_signals(live, now)
        if fresh:
            self._writes.record_signals(live.attempt.id, fresh)
            self._dirty = True

    # -- output ---------------------------------------------------------------------------------

    def _who(self, live: LiveAttempt) -> str:
        return f"{live.runtime.job.name} attempt {live.attempt.attempt_no} (job {live.executor_id})"

    def _say(self, message: str) -> None:
        self._say_to(stamped_line(message))

    def _write_snapshot(self) -> None:
        try:
            write_snapshot(self.store, self.state_dir / SNAPSHOT_FILENAME, now=utc(self.clock()))
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            return  # stays dirty: written again at a later poll; the buffer warns once a minute
        self._dirty, self._snapshot_at = False, self.clock()


def stamped_line(message: str) -> str:
    """A monitor's output line: the local time, then the message."""
    return f"[{time.strftime('%H:%M:%S')}] {message}"


def _print_line(line: str) -> None:
    print(line, flush=True)
