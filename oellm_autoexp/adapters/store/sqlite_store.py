"""The state store: sessions, jobs, attempts, signals, decisions and log offsets in SQLite.

Everything the monitor must remember across restarts lives here, in one file
(`<state dir>/autoexp.db`, default state dir `.oellm_state`). Tables and
migrations are in store_schema.py; docs/state_store.md describes both and the
duplicate-safe submission protocol.

- WAL mode on a local disk, so a CLI reading the store never blocks the monitor
  writing it; the rollback journal on NFS/Lustre/GPFS/BeeGFS, where WAL's shared
  memory cannot work across hosts (adapters/store/open_checks.py). A busy timeout, so
  two writers wait for each other instead of failing.
- Every write transaction starts with BEGIN IMMEDIATE: it takes the write lock
  up front, so a read-then-write (a restart counter) cannot be interleaved with
  another writer and never fails half-way with SQLITE_BUSY.
- Methods return frozen dataclasses, never ORM objects: nothing outside this
  module holds a database session.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from sqlalchemy import (
    URL,
    CursorResult,
    Engine,
    bindparam,
    create_engine,
    event,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DatabaseError, IntegrityError
from sqlalchemy.orm import Session, defer, sessionmaker

from oellm_autoexp.adapters.store.open_checks import (
    check_is_database,
    check_readable_state,
    file_identity,
    identity_problem,
    journal_mode_for,
    opening_error,
    prepare_writable_state,
    read_only_uri,
)
from oellm_autoexp.adapters.store.records import (
    AttemptInfo,
    DecisionInfo,
    JobInfo,
    JudgeRecords,
    LogReadInfo,
    LogReadWrite,
    NewSignal,
    SessionInfo,
    SignalInfo,
    attempt_info,
    decision_info,
    job_info,
    session_info,
    signal_info,
)
from oellm_autoexp.adapters.store.schema import (
    AttemptRow,
    DecisionRow,
    ExclusionRow,
    Intent,
    JobRow,
    LogOffsetRow,
    LogReadRow,
    SessionRow,
    SessionStatus,
    SignalRow,
    StoreError,
    check_schema,
    upgrade_schema,
)
from oellm_autoexp.core.decide.exclusions import Exclusion
from oellm_autoexp.core.decide.judge import Judgement, PastDecision, restart_counts
from oellm_autoexp.core.decide.policy import DecisionAction
from oellm_autoexp.core.jobs.job_state import JobState, is_terminal
from oellm_autoexp.core.jobs.job_status import JobStatus
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.errors import UserError

DEFAULT_STATE_DIR = Path(".oellm_state")
DB_FILENAME = "autoexp.db"
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another before SQLITE_BUSY
_TERMINAL_STATES = [s.value for s in JobState if is_terminal(s)]

__all__ = [
    "AttemptInfo",
    "DecisionInfo",
    "DuplicateAttempt",
    "Intent",
    "JobInfo",
    "JobStatus",
    "LogReadInfo",
    "MonitorLockHeld",
    "NewSignal",
    "SQLiteStore",
    "SessionInfo",
    "SessionStatus",
    "SignalInfo",
    "StoreError",
]


class DuplicateAttempt(StoreError):
    """An attempt with this number (or tag) is already recorded for the job."""


class Fenced(Exception):
    """This monitor's lock generation is no longer the session's: another monitor took over."""

    def __init__(self, session_id: int, ours: int, current: int) -> None:
        super().__init__(
            f"session {session_id}: this monitor (lock generation {ours}) was fenced off: another monitor "
            f"took the session over (generation {current}) while this one was paused or cut off; it "
            "writes, submits and cancels nothing more and exits"
        )
        self.session_id, self.ours, self.current = session_id, ours, current


class MonitorLockHeld(UserError):
    """Another monitor holds the session; the message names its pid and host."""


def _make_engine(
    db_path: Path, busy_timeout_s: float, *, journal_mode: str | None, uri: str | None
) -> Engine:
    """An engine whose connections use `journal_mode` (None: leave it), are foreign-keyed, and
    begin as we say. `uri`: a SQLite URI to open instead of the plain path (read-only)."""
    if uri is None:
        engine = create_engine(URL.create("sqlite", database=str(db_path)))  # no escaping issues
    else:
        engine = create_engine(URL.create("sqlite", database=uri, query={"uri": "true"}))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the sqlite3 module, emit BEGIN (see _on_begin).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if journal_mode is not None:
            cursor.execute(f"PRAGMA journal_mode = {journal_mode}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get("begin_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class SQLiteStore:
    """The monitor's memory. Thread-safe: each call uses its own short transaction."""

    def __init__(
        self,
        state_dir: Path = DEFAULT_STATE_DIR,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        read_only: bool = False,
    ) -> None:
        """Open (a writer: create) the store in `state_dir`; UserError if that cannot be done.

        `read_only`: create nothing, write nothing (status, sessions, explain); the journal
        mode is then left as the writers set it (see adapters/store/open_checks.py).
        """
        self.path = state_dir / DB_FILENAME
        self.read_only = read_only
        if read_only:
            check_readable_state(state_dir, self.path)
        else:
            prepare_writable_state(state_dir, self.path)
        check_is_database(self.path)
        self.journal_mode = None if read_only else journal_mode_for(state_dir)
        uri = read_only_uri(self.path) if read_only else None
        self._engine = _make_engine(self.path, busy_timeout_s, journal_mode=self.journal_mode, uri=uri)
        self._read_sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(
            self._engine.execution_options(begin_immediate=True), expire_on_commit=False
        )
        try:
            check_schema(self._engine) if read_only else upgrade_schema(self._engine)
        except DatabaseError as exc:
            self._engine.dispose()
            raise opening_error(self.path, exc) from None
        except BaseException:
            self._engine.dispose()
            raise
        self._identity = file_identity(self.path)  # is_intact() compares against it
        self._fence: dict[int, int] = {}  # session id -> the lock generation this store's monitor holds

    def close(self) -> None:
        """Close every pooled connection (and with them the WAL/shm file handles)."""
        self._engine.dispose()

    # -- the database file itself (issue 13 D10) -------------------------------------------------

    def is_intact(self) -> bool:
        """False once autoexp.db was deleted or replaced since this store opened it."""
        return self.file_problem() is None

    def file_problem(self) -> str | None:
        """Why the file is no longer the one opened (one line naming it); None while it is."""
        return identity_problem(self.path, self._identity)

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with self._read_sessions() as db, db.begin():
            yield db

    @contextmanager
    def _write(self, *, fenced: bool = True) -> Iterator[Session]:
        """A write transaction (BEGIN IMMEDIATE: the write lock is ours from its first statement).

        While this store holds monitor locks (`hold_fence`), every write first checks, inside
        the same transaction, that each held session's generation is still ours: a monitor
        that was paused while another took over is refused before it writes anything.
        """
        with self._write_sessions() as db, db.begin():
            if fenced and self._fence:
                self._check_fence(db)
            yield db

    def _check_fence(self, db: Session) -> None:
        rows = db.execute(
            select(SessionRow.id, SessionRow.monitor_generation).where(SessionRow.id.in_(list(self._fence)))
        )
        for session_id, generation in rows:
            ours = self._fence[session_id]
            if generation != ours:
                raise Fenced(session_id, ours, generation)

    def hold_fence(self, session_id: int, generation: int) -> None:
        """From now on, every write of this store requires the session's generation to be `generation`."""
        self._fence[session_id] = generation

    def fence_generation(self, session_id: int) -> int | None:
        """The lock generation this store holds for the session (None: it holds no lock on it)."""
        return self._fence.get(session_id)

    def check_fence(self) -> None:
        """Raise Fenced when a held session was taken over: call before sbatch and scancel."""
        if self._fence:
            with self._read() as db:
                self._check_fence(db)

    # The store's companion modules (store_candidates.py) use these for their own tables.
    reading = _read
    writing = _write

    def schema_version(self) -> int:
        """The database's PRAGMA user_version (SCHEMA_VERSION once opened)."""
        with self._read() as db:
            return int(db.execute(text("PRAGMA user_version")).scalar_one())

    # -- sessions -------------------------------------------------------------------------------

    def create_session(
        self, name: str, *, config_path: str, config: Mapping[str, Any], now: datetime
    ) -> SessionInfo:
        """Create an ACTIVE session; a name already in use is a UserError."""
        row = SessionRow(
            name=name, config_path=config_path, config_json=dict(config), created_at=now,
            status=SessionStatus.ACTIVE.value,
        )  # fmt: skip
        try:
            with self._write() as db:
                db.add(row)
        except IntegrityError as exc:
            raise UserError(f"a session named {name!r} already exists in {self.path}") from exc
        return session_info(row)

    def get_session(self, session_id: int) -> SessionInfo | None:
        with self._read() as db:
            row = db.get(SessionRow, session_id)
            return session_info(row) if row else None

    def find_session(self, name: str) -> SessionInfo | None:
        with self._read() as db:
            row = db.scalar(select(SessionRow).where(SessionRow.name == name))
            return session_info(row) if row else None

    def list_sessions(self) -> list[SessionInfo]:
        with self._read() as db:
            return [session_info(r) for r in db.scalars(select(SessionRow).order_by(SessionRow.id))]

    def set_session_status(self, session_id: int, status: str) -> None:
        self._update_one(SessionRow, session_id, status=SessionStatus(status).value)

    def _update_one(self, model: Any, row_id: int, **values: Any) -> None:
        with self._write() as db:
            matched = _rowcount(db.execute(update(model).where(model.id == row_id).values(**values)))
        if matched != 1:
            raise StoreError(f"no {model.__tablename__} row with id {row_id}")

    # -- the monitor lock -----------------------------------------------------------------------

    def acquire_monitor_lock(
        self,
        session_id: int,
        *,
        pid: int,
        host: str,
        now: datetime,
        stale_after_s: float,
        dead_pid: int | None = None,
        interval_s: float | None = None,
        job: str | None = None,
    ) -> bool:
        """Take the session's monitor lock in one UPDATE; False if someone else holds it.

        Taking it bumps the session's generation (the fencing token) and this store holds it
        from then on: every later write checks it (`_write`). `interval_s` is our heartbeat
        interval (`status` calls a holder stale after a few missed beats), `job` our Slurm job id.

        The lock is free when nobody holds it, when the holder's heartbeat is
        older than `stale_after_s`, when we already hold it (same pid and host),
        or when it is held by `dead_pid` on our own host: a pid the caller has
        checked is no longer running (liveness can only be checked locally).
        """
        cutoff = now - timedelta(seconds=stale_after_s)
        free = [
            SessionRow.monitor_pid.is_(None),
            SessionRow.monitor_heartbeat < cutoff,
            (SessionRow.monitor_pid == pid) & (SessionRow.monitor_host == host),
        ]
        if dead_pid is not None:
            free.append((SessionRow.monitor_pid == dead_pid) & (SessionRow.monitor_host == host))
        stmt = (
            update(SessionRow)
            .where(SessionRow.id == session_id, or_(*free))
            .values(
                monitor_pid=pid, monitor_host=host, monitor_heartbeat=now,
                monitor_generation=SessionRow.monitor_generation + 1, monitor_interval_s=interval_s,
                monitor_job=job, monitor_left_at=None,
            )
        )  # fmt: skip
        with self._write(fenced=False) as db:
            if _rowcount(db.execute(stmt)) != 1:
                return False
            generation = db.scalar(select(SessionRow.monitor_generation).where(SessionRow.id == session_id))
        self.hold_fence(session_id, int(generation or 0))
        return True

    def acquire_monitor_lock_or_raise(
        self,
        session_id: int,
        *,
        pid: int,
        host: str,
        now: datetime,
        stale_after_s: float,
        dead_pid: int | None = None,
        interval_s: float | None = None,
        job: str | None = None,
    ) -> None:
        """acquire_monitor_lock, raising MonitorLockHeld (naming the holder) when refused."""
        if self.acquire_monitor_lock(
            session_id, pid=pid, host=host, now=now, stale_after_s=stale_after_s, dead_pid=dead_pid,
            interval_s=interval_s, job=job,
        ):  # fmt: skip
            return
        held = self.get_session(session_id)
        if held is None:
            raise StoreError(f"no session with id {session_id}")
        raise MonitorLockHeld(_lock_held_message(held, now, stale_after_s))

    def heartbeat(self, session_id: int, *, pid: int, host: str, now: datetime) -> bool:
        """Refresh our heartbeat; False means the lock was taken from us: stop monitoring."""
        stmt = (
            update(SessionRow)
            .where(SessionRow.id == session_id, *self._holder(session_id, pid, host))
            .values(monitor_heartbeat=now)
        )
        with self._write(fenced=False) as db:
            return _rowcount(db.execute(stmt)) == 1

    def _holder(self, session_id: int, pid: int, host: str) -> list[Any]:
        """WHERE terms that match the session row only while we hold its lock."""
        terms = [SessionRow.monitor_pid == pid, SessionRow.monitor_host == host]
        if session_id in self._fence:
            terms.append(SessionRow.monitor_generation == self._fence[session_id])
        return terms

    def release_monitor_lock(
        self, session_id: int, *, pid: int, host: str, now: datetime | None = None
    ) -> None:
        """Free the lock if we hold it; a lock someone else took over is left alone.

        `monitor_left_at` records when: from then on the session is unsupervised.
        """
        stmt = (
            update(SessionRow)
            .where(SessionRow.id == session_id, *self._holder(session_id, pid, host))
            .values(monitor_pid=None, monitor_host=None, monitor_heartbeat=None, monitor_job=None,
                    monitor_left_at=now or datetime.now(UTC))
        )  # fmt: skip
        with self._write(fenced=False) as db:
            db.execute(stmt)
        self._fence.pop(session_id, None)

    # -- jobs -----------------------------------------------------------------------------------

    def add_job(
        self, session_id: int, *, job_key: str, name: str, plan: Mapping[str, Any], now: datetime
    ) -> JobInfo:
        """Add an ACTIVE job; a job_key already in the session raises StoreError."""
        row = JobRow(
            session_id=session_id, job_key=job_key, name=name, plan_json=dict(plan),
            status=JobStatus.ACTIVE.value, status_reason="", restart_count=0,
            restart_counts_json={}, created_at=now,
        )  # fmt: skip
        try:
            with self._write() as db:
                db.add(row)
        except IntegrityError as exc:
            raise StoreError(
                f"session {session_id} has no such session or already a job {job_key!r}"
            ) from exc
        return job_info(row, {})

    def get_job(self, job_id: int) -> JobInfo | None:
        with self._read() as db:
            row = db.get(JobRow, job_id)
            return _with_counts(db, [row])[0] if row else None

    def find_job(self, session_id: int, ref: str) -> JobInfo | None:
        """A job of the session by key, then by name, then by numeric id (what a user types)."""
        in_session = select(JobRow).where(JobRow.session_id == session_id)
        with self._read() as db:
            for cond in (JobRow.job_key == ref, JobRow.name == ref):
                row = db.scalars(in_session.where(cond).order_by(JobRow.id)).first()
                if row:
                    return _with_counts(db, [row])[0]
            row = db.scalar(in_session.where(JobRow.id == int(ref))) if ref.isdigit() else None
            return _with_counts(db, [row])[0] if row else None

    def jobs_for_session(self, session_id: int, *, with_plan: bool = True) -> list[JobInfo]:
        """The session's jobs in id order. `with_plan=False` leaves each `plan` empty: decoding
        the plans (each holds its rendered script) was most of what monitor_state.json cost."""
        stmt = select(JobRow).where(JobRow.session_id == session_id).order_by(JobRow.id)
        if not with_plan:
            stmt = stmt.options(defer(JobRow.plan_json, raiseload=True))
        with self._read() as db:
            return _with_counts(db, list(db.scalars(stmt)), with_plan=with_plan)

    def set_job_status(self, job_id: int, status: str, reason: str = "") -> None:
        """Set the job's JobStatus with a readable reason ("oom budget spent: 3/3")."""
        self._update_one(JobRow, job_id, status=JobStatus(status).value, status_reason=reason)

    # -- attempts -------------------------------------------------------------------------------

    def record_intent(
        self, job_id: int, attempt_no: int, tag: str, *, now: datetime, log_path: str | None = None
    ) -> int:
        """Record that we are about to submit attempt `attempt_no`; call BEFORE sbatch.

        `tag` must be unique; the monitor passes it to sbatch (`--comment`), so a
        monitor that died between this call and confirm_submitted can find the
        job in Slurm by its tag instead of submitting it twice. Raises
        DuplicateAttempt if the attempt number or the tag is already recorded.
        """
        row = AttemptRow(
            job_id=job_id, attempt_no=attempt_no, submit_tag=tag, intent=Intent.INTENDED.value,
            nodes_json=[], intended_at=now, state=JobState.UNKNOWN.value, log_path=log_path,
        )  # fmt: skip
        try:
            with self._write() as db:
                db.add(row)
        except IntegrityError as exc:
            raise DuplicateAttempt(f"job {job_id} already has attempt {attempt_no} or tag {tag!r}") from exc
        return row.id

    def confirm_submitted(
        self, attempt_id: int, executor_job_id: str, *, now: datetime, log_path: str | None = None
    ) -> None:
        """sbatch answered (or the job was found by its tag): remember its executor id."""
        values: dict[str, Any] = {
            "executor_job_id": executor_job_id, "intent": Intent.SUBMITTED.value, "submitted_at": now,
        }  # fmt: skip
        if log_path is not None:
            values["log_path"] = log_path
        self._update_one(AttemptRow, attempt_id, **values)

    def abandon_intent(self, attempt_id: int, *, now: datetime) -> None:
        """The tag is not known to the executor: the submission never happened."""
        self._update_one(AttemptRow, attempt_id, intent=Intent.ABANDONED.value, ended_at=now)

    def pending_intents(self, session_id: int) -> list[AttemptInfo]:
        """Attempts of the session recorded as intended but never confirmed submitted."""
        stmt = (
            select(AttemptRow)
            .join(JobRow, AttemptRow.job_id == JobRow.id)
            .where(JobRow.session_id == session_id, AttemptRow.intent == Intent.INTENDED.value)
            .order_by(AttemptRow.id)
        )
        return self._attempts(stmt)

    def live_attempts(self) -> list[AttemptInfo]:
        """Attempts of ALL sessions that have an executor id and have not ended (one squeue)."""
        stmt = (
            select(AttemptRow)
            .where(
                AttemptRow.executor_job_id.is_not(None),
                AttemptRow.ended_at.is_(None),
                AttemptRow.state.not_in(_TERMINAL_STATES),
            )
            .order_by(AttemptRow.id)
        )
        return self._attempts(stmt)

    def latest_attempt(self, job_id: int) -> AttemptInfo | None:
        stmt = select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.attempt_no.desc())
        found = self._attempts(stmt.limit(1))
        return found[0] if found else None

    def next_attempt_no(self, job_id: int) -> int:
        """1 + the highest attempt number recorded for the job (abandoned ones included)."""
        with self._read() as db:
            top = db.scalar(select(func.max(AttemptRow.attempt_no)).where(AttemptRow.job_id == job_id))
        return (top or 0) + 1

    def attempts_for_job(self, job_id: int) -> list[AttemptInfo]:
        return self._attempts(
            select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.attempt_no)
        )

    def attempts_for_session(self, session_id: int) -> list[AttemptInfo]:
        stmt = (
            select(AttemptRow)
            .join(JobRow, AttemptRow.job_id == JobRow.id)
            .where(JobRow.session_id == session_id)
            .order_by(AttemptRow.job_id, AttemptRow.attempt_no)
        )
        return self._attempts(stmt)

    def find_attempt_by_tag(self, tag: str) -> AttemptInfo | None:
        found = self._attempts(select(AttemptRow).where(AttemptRow.submit_tag == tag))
        return found[0] if found else None

    def _attempts(self, stmt: Any) -> list[AttemptInfo]:
        with self._read() as db:
            return [attempt_info(r) for r in db.scalars(stmt)]

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
        """Record an observation; None leaves a field as it was.

        A SUBMITTED attempt becomes CONFIRMED on its first known state: the
        executor has seen it. UNKNOWN is stored but confirms nothing.
        """
        with self._write() as db:
            row = db.get(AttemptRow, attempt_id)
            if row is None:
                raise StoreError(f"no attempt with id {attempt_id}")
            row.state = JobState(state).value
            if state is not JobState.UNKNOWN and row.intent == Intent.SUBMITTED.value:
                row.intent = Intent.CONFIRMED.value
            _set_if_given(row, exit_code=exit_code, started_at=started_at, ended_at=ended_at)
            if nodes is not None:
                row.nodes_json = list(nodes)

    def set_last_iteration(self, attempt_id: int, iteration: int) -> None:
        self._update_one(AttemptRow, attempt_id, last_iteration=iteration)

    def set_first_iteration(self, attempt_id: int, at: datetime) -> None:
        """When the attempt's first iteration line was read (its start-up ends there)."""
        self._update_one(AttemptRow, attempt_id, first_iteration_at=at)

    # -- signals and decisions ------------------------------------------------------------------

    def record_signal(self, attempt_id: int, signal: NewSignal) -> int:
        return self.record_signals(attempt_id, [signal])[0]

    def record_signals(self, attempt_id: int, signals: Iterable[NewSignal]) -> list[int]:
        """Record classified lines of an attempt in one transaction; returns their ids."""
        rows = _signal_rows(attempt_id, signals)
        with self._write() as db:
            db.add_all(rows)
        return [r.id for r in rows]

    def signals_for_attempt(self, attempt_id: int) -> list[SignalInfo]:
        stmt = select(SignalRow).where(SignalRow.attempt_id == attempt_id).order_by(SignalRow.id)
        with self._read() as db:
            return [signal_info(r) for r in db.scalars(stmt)]

    def record_decision(
        self,
        job_id: int,
        *,
        attempt_id: int | None,
        action: str,
        reason: str,
        now: datetime,
        budget_before: int | None = None,
        budget_after: int | None = None,
        evidence: Any = (),
        job_status: str | None = None,
    ) -> int:
        """Record one policy decision (and, given `job_status`, the job's new status in the same
        transaction); `evidence` must be JSON-serialisable."""
        row = DecisionRow(
            job_id=job_id, attempt_id=attempt_id, action=action, reason=reason,
            budget_before=budget_before, budget_after=budget_after,
            evidence_json=list(evidence) if isinstance(evidence, tuple) else evidence, decided_at=now,
        )  # fmt: skip
        with self._write() as db:
            db.add(row)
            if job_status is not None:
                job = db.get(JobRow, job_id)
                if job is None:
                    raise StoreError(f"no job with id {job_id}")
                job.status, job.status_reason = JobStatus(job_status).value, reason
        return row.id

    def decisions_for_job(self, job_id: int) -> list[DecisionInfo]:
        stmt = select(DecisionRow).where(DecisionRow.job_id == job_id).order_by(DecisionRow.id)
        with self._read() as db:
            return [decision_info(r) for r in db.scalars(stmt)]

    def decisions_for_session(self, session_id: int) -> list[DecisionInfo]:
        stmt = (
            select(DecisionRow)
            .join(JobRow, DecisionRow.job_id == JobRow.id)
            .where(JobRow.session_id == session_id)
            .order_by(DecisionRow.id)
        )
        with self._read() as db:
            return [decision_info(r) for r in db.scalars(stmt)]

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
    ) -> int:
        """Record one judged attempt in ONE transaction; returns the decision's id.

        Everything the judgement rests on and decides is written together: the
        attempt's last signals, its end (`ended`: state and exit code) and highest
        iteration, the decision with its typed evidence, the nodes it blamed
        (`exclusions`), and the job's new status. A monitor that dies before or after this leaves either none or all of it.
        """
        decision = judgement.decision
        row = DecisionRow(
            job_id=job_id, attempt_id=attempt_id, action=decision.action.value, reason=decision.reason,
            budget_before=decision.budget_before, budget_after=decision.budget_after,
            evidence_json=judgement.evidence.to_json(), decided_at=now,
        )  # fmt: skip
        with self._write() as db:
            db.add_all(_signal_rows(attempt_id, signals))
            attempt = db.get(AttemptRow, attempt_id)
            if attempt is None:
                raise StoreError(f"no attempt with id {attempt_id}")
            if ended is not None:
                attempt.state = JobState(ended[0]).value
                _set_if_given(attempt, exit_code=ended[1], ended_at=now)
            if iteration is not None:
                attempt.last_iteration = iteration
            status = judgement.effects.job_status
            if status is not None:
                job = db.get(JobRow, job_id)
                if job is None:
                    raise StoreError(f"no job with id {job_id}")
                job.status, job.status_reason = status.value, decision.reason
            db.add_all(_exclusion_rows(job_id, exclusions))
            db.add(row)
        return row.id

    # -- node exclusions (core/decide/exclusions.py) ----------------------------------------------------

    def exclusions_for_job(self, job_id: int) -> list[Exclusion]:
        """Every node exclusion recorded for a job, expired ones too (callers filter by `now`)."""
        with self._read() as db:
            return _exclusions(db, job_id)

    def lift_exclusions(
        self, job_id: int, lifted: Sequence[tuple[str, str]], *, attempt_id: int | None, now: datetime
    ) -> None:
        """End exclusions before their upper bound, in ONE transaction: each (node, why) ends the
        node's rows still in force at `now` and leaves a decision (action `none`: it decides no
        restart) whose reason `autoexp explain` shows."""
        with self._write() as db:
            for node, why in lifted:
                rows = select(ExclusionRow).where(ExclusionRow.job_id == job_id, ExclusionRow.node == node)
                for row in db.scalars(rows):
                    if _as_utc(row.expires_at) > _as_utc(now):
                        row.expires_at = now
                db.add(DecisionRow(job_id=job_id, attempt_id=attempt_id, action=DecisionAction.NONE.value,
                                   reason=f"exclusion lifted: {why}", evidence_json=[], decided_at=now))  # fmt: skip

    def judge_records(self, job_id: int) -> JudgeRecords:
        """What judging an attempt of the job reads, in one transaction (daemon/judging.py `gather`)."""
        with self._read() as db:
            row = db.get(JobRow, job_id)
            decisions = select(DecisionRow).where(DecisionRow.job_id == job_id).order_by(DecisionRow.id)
            attempts = select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.attempt_no)
            exclusions = _exclusions(db, job_id)
            return JudgeRecords(
                decisions=[decision_info(r) for r in db.scalars(decisions)],
                exclusions=exclusions,
                attempts=[attempt_info(r) for r in db.scalars(attempts)],
                job=_with_counts(db, [row])[0] if row else None,
            )

    # -- log offsets (the log tailer's OffsetStore) ---------------------------------------------

    def load_offset(self, path: str) -> tuple[int, int] | None:
        """(inode, offset) saved for a log path, or None."""
        with self._read() as db:
            row = db.get(LogOffsetRow, path)
            return (row.inode, row.offset) if row else None

    def save_offset(self, path: str, inode: int, offset: int) -> None:
        with self._write() as db:
            db.merge(LogOffsetRow(path=path, inode=inode, offset=offset, updated_at=_utcnow()))

    # -- the timing record (`autoexp replay --session`; core/replay/read_times.py) ---------------------

    def save_log_reads(self, reads: Sequence[LogReadWrite]) -> list[int]:
        """Save timing-record rows and the consumed offsets they carry, all in one transaction.

        The monitor saves a poll's reads of every log at once: a commit per read (an fsync
        each) was most of its CPU with 1,000 growing logs. Returns each row's id, in order.
        """
        offsets: dict[str, dict[str, Any]] = {}
        now = _utcnow()
        # Statements built once and run with plain parameters: building one per row (its
        # cache key, its coercions) cost more than SQLite's own work.
        add = insert(LogReadRow)
        grow = (
            update(LogReadRow).where(LogReadRow.id == bindparam("row_id")).values(end_offset=bindparam("end"))
        )
        with self._write() as db:
            conn = db.connection()
            grown, new_rows = [], []
            for r in reads:
                if r.row_id is None:
                    new_rows.append({"attempt_id": r.attempt_id, "start_offset": r.start_offset,
                                     "end_offset": r.end_offset, "read_at": r.read_at})  # fmt: skip
                else:
                    grown.append({"row_id": r.row_id, "end": r.end_offset})
                if r.consumed is not None:  # the newest read of a log decides its offset
                    offsets[r.consumed[0]] = {"path": r.consumed[0], "inode": r.consumed[1],
                                              "offset": r.end_offset, "updated_at": now}  # fmt: skip
            added = iter(self._insert_log_reads(conn, add, new_rows))  # their ids, in order
            ids = [r.row_id if r.row_id is not None else next(added) for r in reads]
            if grown:
                conn.execute(grow, grown)
            if offsets:
                upsert = sqlite_insert(LogOffsetRow)
                conn.execute(upsert.on_conflict_do_update(
                    index_elements=[LogOffsetRow.path],
                    set_={"inode": upsert.excluded.inode, "offset": upsert.excluded.offset,
                          "updated_at": upsert.excluded.updated_at}),
                    list(offsets.values()))  # fmt: skip
        return ids

    @staticmethod
    def _insert_log_reads(conn: Any, add: Any, rows: list[dict[str, Any]]) -> list[int]:
        """Insert rows and return their ids in order: a few multi-row INSERT ... RETURNING
        statements where SQLite has RETURNING (3.35+), else one INSERT per row."""
        if not rows:
            return []
        if conn.dialect.insert_executemany_returning_sort_by_parameter_order:
            returning = add.returning(LogReadRow.id, sort_by_parameter_order=True)
            return list(conn.execute(returning, rows).scalars())
        return [conn.execute(add, row).lastrowid for row in rows]

    def log_reads_for_attempt(self, attempt_id: int) -> list[LogReadInfo]:
        """The attempt's timing record, in read order."""
        stmt = select(LogReadRow).where(LogReadRow.attempt_id == attempt_id).order_by(LogReadRow.id)
        with self._read() as db:
            return [LogReadInfo(r.id, r.attempt_id, r.start_offset, r.end_offset, r.read_at)
                    for r in db.scalars(stmt)]  # fmt: skip


def _with_counts(db: Session, rows: Sequence[JobRow], *, with_plan: bool = True) -> list[JobInfo]:
    """JobInfos with restart counts taken from the restart decisions: their one source of truth."""
    ids = [r.id for r in rows]
    stmt = select(DecisionRow.job_id, DecisionRow.evidence_json).where(
        DecisionRow.job_id.in_(ids), DecisionRow.action == DecisionAction.RESTART.value
    )
    restarts: dict[int, list[PastDecision]] = {i: [] for i in ids}
    for job_id, evidence in db.execute(stmt):
        restarts[job_id].append(PastDecision(DecisionAction.RESTART.value, 0.0, Evidence.from_json(evidence)))
    return [job_info(r, restart_counts(restarts[r.id]), with_plan=with_plan) for r in rows]


def _exclusions(db: Session, job_id: int) -> list[Exclusion]:
    stmt = (
        select(ExclusionRow, JobRow.name)
        .join(JobRow, ExclusionRow.job_id == JobRow.id)
        .where(ExclusionRow.job_id == job_id)
        .order_by(ExclusionRow.id)
    )
    return [
        Exclusion(name, r.node, r.evidence, r.source, r.created_at, r.expires_at)
        for r, name in db.execute(stmt)
    ]


def _signal_rows(attempt_id: int, signals: Iterable[NewSignal]) -> list[SignalRow]:
    return [
        SignalRow(
            attempt_id=attempt_id, pattern=s.pattern, error_type=s.error_type, subsystem=s.subsystem,
            role=s.role, line_no=s.line_no, line=s.line, evidence_json=list(s.evidence),
            observed_at=s.observed_at,
        )
        for s in signals
    ]  # fmt: skip


def _exclusion_rows(job_id: int, exclusions: Iterable[Exclusion]) -> list[ExclusionRow]:
    return [
        ExclusionRow(job_id=job_id, node=e.node, evidence=e.evidence, source=e.source,
                     created_at=e.created_at, expires_at=e.expires_at)
        for e in exclusions
    ]  # fmt: skip


def _set_if_given(row: Any, **values: Any) -> None:
    for name, value in values.items():
        if value is not None:
            setattr(row, name, value)


def _utcnow() -> datetime:
    # Offsets are bookkeeping, not decisions: wall-clock time is fine here.
    return datetime.now(UTC)


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _rowcount(result: Any) -> int:
    """Rows matched by an UPDATE (Session.execute is typed as a plain Result)."""
    return int(cast(CursorResult[Any], result).rowcount)


def _lock_held_message(held: SessionInfo, now: datetime, stale_after_s: float) -> str:
    age = (_as_utc(now) - held.monitor_heartbeat).total_seconds() if held.monitor_heartbeat else float("nan")
    return (
        f"session {held.name!r} is already monitored by pid {held.monitor_pid} on host "
        f"{held.monitor_host} (last heartbeat {age:.0f} s ago); stop that monitor first, "
        f"or wait until its heartbeat is {stale_after_s:.0f} s old"
    )
