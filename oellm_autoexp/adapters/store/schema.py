"""The SQLite tables of the state store, and the migrations between schema versions.

A fresh database is created from these models and stamped with SCHEMA_VERSION
(PRAGMA user_version). An older database is upgraded in place by running
MIGRATIONS[v - 1], MIGRATIONS[v], ... in order, each in its own transaction that
also bumps user_version, so a crash mid-upgrade leaves a consistent version.

Migrations are raw SQL on purpose: they must keep describing the OLD shape even
after the models below change again. tests/integration/test_store_migrations.py
checks that an upgraded v1 database has exactly the columns of a fresh one.

Times are stored as fixed-width UTC ISO-8601 text, so that SQL comparisons
(stale heartbeats) are plain string comparisons and `sqlite3` shows them readably.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Their home is vocab.py (no ORM there); re-exported for the store and its callers.
from oellm_autoexp.adapters.store.vocab import Intent as Intent
from oellm_autoexp.adapters.store.vocab import SessionStatus as SessionStatus
from oellm_autoexp.errors import UserError


class StoreError(Exception):
    """The store was asked for something that does not exist or cannot be."""


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime stored as `2025-01-02T03:04:05.000006+00:00`.

    Naive datetimes are taken to be UTC already (the core passes `now` in UTC).
    """

    impl = String(32)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return aware.isoformat(timespec="microseconds")

    def process_result_value(self, value: str | None, dialect: Dialect) -> datetime | None:
        return None if value is None else datetime.fromisoformat(value)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


class SessionRow(Base):
    """One `autoexp run`: a composed config and the jobs it planned."""

    __tablename__ = "sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # surrogate key
    name: Mapped[str] = mapped_column(String(200), unique=True)  # user-facing session name
    config_path: Mapped[str] = mapped_column(Text)  # the top-level YAML the user passed
    config_json: Mapped[dict[str, Any]] = mapped_column()  # the fully composed config, as run
    created_at: Mapped[datetime] = mapped_column()  # when the session was created (UTC)
    status: Mapped[str] = mapped_column(String(32))  # SessionStatus: active|stopped|completed
    monitor_pid: Mapped[int | None] = mapped_column()  # pid of the monitor holding the lock; NULL = free
    monitor_host: Mapped[str | None] = mapped_column(String(255))  # host that pid runs on
    monitor_heartbeat: Mapped[datetime | None] = mapped_column()  # the lock holder's last sign of life
    # The fencing token: +1 each time a monitor takes the lock. A write of a monitor whose generation is
    # no longer the session's is refused in its own transaction (a paused monitor that woke up).
    monitor_generation: Mapped[int] = mapped_column(default=0)
    monitor_interval_s: Mapped[float | None] = mapped_column()  # the holder's heartbeat interval
    monitor_job: Mapped[str | None] = mapped_column(
        String(64)
    )  # the holder's Slurm job id, when it runs as one
    monitor_left_at: Mapped[datetime | None] = (
        mapped_column()
    )  # when the last holder let go: unsupervised since


class JobRow(Base):
    """One sweep point of a session: the unit that is restarted until done."""

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("session_id", "job_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # surrogate key
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))  # owner
    job_key: Mapped[str] = mapped_column(String(200))  # stable id of the sweep point within the session
    name: Mapped[str] = mapped_column(String(200))  # human-readable job name (Slurm --job-name)
    plan_json: Mapped[dict[str, Any]] = mapped_column()  # what the planner produced: script path, sbatch args
    status: Mapped[str] = mapped_column(String(32))  # JobStatus: active|stopped|completed|cancelled_by_user
    status_reason: Mapped[str] = mapped_column(Text, default="")  # why it is in that status (budget numbers)
    # Not read any more: restart counts are counted from the restart decisions
    # (their one source of truth). Kept so that older databases and readers stay valid.
    restart_count: Mapped[int] = mapped_column(default=0)
    restart_counts_json: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column()  # when the job was planned (UTC)


class AttemptRow(Base):
    """One submission of a job to the executor (one Slurm job id)."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "attempt_no"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # surrogate key
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))  # owner
    attempt_no: Mapped[int] = mapped_column()  # 1 for the first submission, then 2, 3...
    submit_tag: Mapped[str] = mapped_column(String(200), unique=True)  # sbatch --comment; finds the job
    intent: Mapped[str] = mapped_column(String(16))  # Intent: intended -> submitted -> confirmed | abandoned
    executor_job_id: Mapped[str | None] = mapped_column(String(64))  # Slurm job id; NULL before sbatch
    nodes_json: Mapped[list[Any]] = mapped_column()  # expanded host names it ran on
    intended_at: Mapped[datetime] = mapped_column()  # when the intent was recorded, before sbatch
    submitted_at: Mapped[datetime | None] = mapped_column()  # when sbatch returned the id
    started_at: Mapped[datetime | None] = mapped_column()  # when Slurm says it started
    ended_at: Mapped[datetime | None] = mapped_column()  # when it ended; NULL while live
    state: Mapped[str] = mapped_column(String(32))  # last observed JobState
    exit_code: Mapped[int | None] = mapped_column()  # process exit status once ended
    log_path: Mapped[str | None] = mapped_column(Text)  # the attempt's stdout/stderr log
    last_iteration: Mapped[int | None] = mapped_column()  # newest training iteration seen in its log (v2)
    # When its first iteration line was read (v7): first_iteration_at - started_at is its start-up, which
    # the job's later attempts learn their start-up limit from (core/watch/startup.py). NULL: none seen
    # (yet), or first seen by a monitor catching up on the log, which cannot say when it was written.
    first_iteration_at: Mapped[datetime | None] = mapped_column()


class SignalRow(Base):
    """One classified log line of an attempt."""

    __tablename__ = "signals"
    __table_args__ = (Index("ix_signals_attempt_id", "attempt_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # surrogate key
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))  # whose log line
    pattern: Mapped[str] = mapped_column(String(200))  # name of the signal pattern that matched
    error_type: Mapped[str | None] = mapped_column(String(64))  # error class ("oom"); NULL for info
    subsystem: Mapped[str] = mapped_column(String(64))  # where it came from ("cuda", "nccl", "slurm")
    role: Mapped[str] = mapped_column(
        String(32)
    )  # root | cascade | progress | info (core/classify/signals.py Role)
    line_no: Mapped[int] = mapped_column()  # 1-based line number in the log
    line: Mapped[str] = mapped_column(Text)  # the matched line
    evidence_json: Mapped[list[Any]] = mapped_column()  # surrounding lines kept as evidence
    observed_at: Mapped[datetime] = mapped_column()  # when the monitor read the line (UTC)


class DecisionRow(Base):
    """One decision of the restart policy, with the numbers it was based on."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # surrogate key
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)  # owner
    attempt_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id", ondelete="SET NULL"))  # judged
    action: Mapped[str] = mapped_column(String(32))  # what was decided: restart, stop, wait...
    reason: Mapped[str] = mapped_column(Text)  # one line a user can read, with numbers
    budget_before: Mapped[int | None] = mapped_column()  # restarts left before this decision
    budget_after: Mapped[int | None] = mapped_column()  # restarts left after it
    evidence_json: Mapped[Any] = mapped_column(JSON)  # signals/lines/state the decision rests on
    decided_at: Mapped[datetime] = mapped_column()  # when it was decided (UTC)


class LogOffsetRow(Base):
    """How far the log tailer has consumed a file (added in v2)."""

    __tablename__ = "log_offsets"

    path: Mapped[str] = mapped_column(Text, primary_key=True)  # absolute log path
    inode: Mapped[int] = mapped_column()  # inode the offset belongs to; another inode = a new file
    offset: Mapped[int] = mapped_column()  # bytes consumed: the end of the last complete line handled
    updated_at: Mapped[datetime] = mapped_column()  # when the offset was last saved (UTC)


class LogReadRow(Base):
    """When the monitor read a stretch of an attempt's log (added in v3), for `autoexp replay --session`.

    One row per batch of lines the tailer handed over; a batch read within
    core/replay/read_times.py COALESCE_S of the row before it, right after it in the
    file and with no signal but progress, extends that row instead (see there).
    """

    __tablename__ = "log_reads"
    __table_args__ = (Index("ix_log_reads_attempt_id", "attempt_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # surrogate key; rows in read order
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))  # whose log
    start_offset: Mapped[int] = mapped_column()  # byte offset of the first line read
    end_offset: Mapped[int] = mapped_column()  # byte offset just past the last line read
    read_at: Mapped[datetime] = mapped_column()  # when the monitor read the row's first batch (UTC)


class ExclusionRow(Base):
    """A node kept off a job's attempts until it expires (added in v4; core/decide/exclusions.py)."""

    __tablename__ = "exclusions"
    __table_args__ = (Index("ix_exclusions_job_id", "job_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # surrogate key
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))  # whose attempts avoid it
    node: Mapped[str] = mapped_column(String(255))  # the Slurm node name
    evidence: Mapped[str] = mapped_column(Text)  # the line (or Slurm fact) that singled the node out
    source: Mapped[str] = mapped_column(String(32))  # log | slurm_state | sacct_duplicates
    created_at: Mapped[datetime] = mapped_column()  # when it was blamed (UTC)
    expires_at: Mapped[datetime] = mapped_column()  # after this the node may be used again (UTC)


class CandidateRow(Base):
    """One queued submission of a fanned-out attempt (added in v5; daemon/fanout.py).

    An attempt with strategies is submitted as its best K candidates at once; the first to run
    becomes the attempt's job (attempts.executor_job_id), the others are cancelled.
    """

    __tablename__ = "candidates"
    __table_args__ = (Index("ix_candidates_attempt_id", "attempt_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # surrogate key
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))  # whose race
    rank: Mapped[int] = mapped_column()  # 0 = best-ranked (plan/strategies.py rank)
    strategy: Mapped[str] = mapped_column(String(200))  # the strategy's label (name, /segNm if segmented)
    strategy_json: Mapped[dict[str, Any]] = mapped_column()  # its shape and the sbatch args it was sent with
    submit_tag: Mapped[str] = mapped_column(String(200), unique=True)  # its sbatch --comment
    intent: Mapped[str] = mapped_column(String(16))  # Intent: intended -> submitted | abandoned
    executor_job_id: Mapped[str | None] = mapped_column(String(64))  # Slurm job id; NULL before sbatch
    estimate: Mapped[str] = mapped_column(Text, default="")  # --test-only's start (ISO) or "unknown (...)"
    intended_at: Mapped[datetime] = mapped_column()  # recorded before its sbatch (UTC)
    submitted_at: Mapped[datetime | None] = mapped_column()  # when sbatch returned its id
    closed_at: Mapped[datetime | None] = mapped_column()  # when it won, was cancelled or dropped out
    outcome: Mapped[str] = mapped_column(String(16))  # queued | won | cancelled | out | abandoned
    gpu_types: Mapped[str | None] = mapped_column(String(200))  # GPU types Slurm allocated (the winner)


def _v1_to_v2(conn: Connection) -> None:
    """v2: attempts remember training progress; the log tailer persists its offsets."""
    conn.exec_driver_sql("ALTER TABLE attempts ADD COLUMN last_iteration INTEGER")
    conn.exec_driver_sql(
        "CREATE TABLE log_offsets ("
        " path TEXT NOT NULL,"
        " inode INTEGER NOT NULL,"
        ' "offset" INTEGER NOT NULL,'
        " updated_at VARCHAR(32) NOT NULL,"
        " PRIMARY KEY (path))"
    )


def _v2_to_v3(conn: Connection) -> None:
    """v3: when the monitor read each stretch of an attempt's log (`autoexp replay --session`)."""
    conn.exec_driver_sql(
        "CREATE TABLE log_reads ("
        " id INTEGER NOT NULL,"
        " attempt_id INTEGER NOT NULL,"
        " start_offset INTEGER NOT NULL,"
        " end_offset INTEGER NOT NULL,"
        " read_at VARCHAR(32) NOT NULL,"
        " PRIMARY KEY (id),"
        " FOREIGN KEY(attempt_id) REFERENCES attempts (id) ON DELETE CASCADE)"
    )
    conn.exec_driver_sql("CREATE INDEX ix_log_reads_attempt_id ON log_reads (attempt_id)")


def _v3_to_v4(conn: Connection) -> None:
    """v4: nodes blamed for a failure, kept off the job's attempts until they expire."""
    conn.exec_driver_sql(
        "CREATE TABLE exclusions ("
        " id INTEGER NOT NULL,"
        " job_id INTEGER NOT NULL,"
        " node VARCHAR(255) NOT NULL,"
        " evidence TEXT NOT NULL,"
        " source VARCHAR(32) NOT NULL,"
        " created_at VARCHAR(32) NOT NULL,"
        " expires_at VARCHAR(32) NOT NULL,"
        " PRIMARY KEY (id),"
        " FOREIGN KEY(job_id) REFERENCES jobs (id) ON DELETE CASCADE)"
    )
    conn.exec_driver_sql("CREATE INDEX ix_exclusions_job_id ON exclusions (job_id)")


def _v4_to_v5(conn: Connection) -> None:
    """v5: the candidates of fanned-out attempts (allocation strategies, docs/strategies.md)."""
    conn.exec_driver_sql(
        "CREATE TABLE candidates ("
        " id INTEGER NOT NULL,"
        " attempt_id INTEGER NOT NULL,"
        " rank INTEGER NOT NULL,"
        " strategy VARCHAR(200) NOT NULL,"
        " strategy_json JSON NOT NULL,"
        " submit_tag VARCHAR(200) NOT NULL,"
        " intent VARCHAR(16) NOT NULL,"
        " executor_job_id VARCHAR(64),"
        " estimate TEXT NOT NULL,"
        " intended_at VARCHAR(32) NOT NULL,"
        " submitted_at VARCHAR(32),"
        " closed_at VARCHAR(32),"
        " outcome VARCHAR(16) NOT NULL,"
        " gpu_types VARCHAR(200),"
        " PRIMARY KEY (id),"
        " UNIQUE (submit_tag),"
        " FOREIGN KEY(attempt_id) REFERENCES attempts (id) ON DELETE CASCADE)"
    )
    conn.exec_driver_sql("CREATE INDEX ix_candidates_attempt_id ON candidates (attempt_id)")


def _v5_to_v6(conn: Connection) -> None:
    """v6: the monitor lock's fencing generation, heartbeat interval, Slurm job and when it was let go."""
    conn.exec_driver_sql("ALTER TABLE sessions ADD COLUMN monitor_generation INTEGER NOT NULL DEFAULT 0")
    conn.exec_driver_sql("ALTER TABLE sessions ADD COLUMN monitor_interval_s DOUBLE")
    conn.exec_driver_sql("ALTER TABLE sessions ADD COLUMN monitor_job VARCHAR(64)")
    conn.exec_driver_sql("ALTER TABLE sessions ADD COLUMN monitor_left_at VARCHAR(32)")


def _v6_to_v7(conn: Connection) -> None:
    """v7: when each attempt's first iteration was read (its start-up, for the learned start-up limit)."""
    conn.exec_driver_sql("ALTER TABLE attempts ADD COLUMN first_iteration_at VARCHAR(32)")


# MIGRATIONS[i] upgrades a database from version i + 1 to version i + 2.
MIGRATIONS: tuple[Callable[[Connection], None], ...] = (
    _v1_to_v2, _v2_to_v3, _v3_to_v4, _v4_to_v5, _v5_to_v6, _v6_to_v7,
)  # fmt: skip
SCHEMA_VERSION = 1 + len(MIGRATIONS)  # vocab.SCHEMA_VERSION says the same for the sqlite3 reader


def check_schema(engine: Engine) -> None:
    """For a read-only open: StoreError unless the file is at this code's schema version."""
    with engine.connect() as conn:
        version = conn.exec_driver_sql("PRAGMA user_version").scalar_one()
    if version != SCHEMA_VERSION:
        raise UserError(
            f"the state database is schema v{version}, this autoexp reads v{SCHEMA_VERSION}; "
            "run a command that writes (e.g. `autoexp monitor-session`) to upgrade it"
            if version < SCHEMA_VERSION
            else f"the state database is schema v{version}, newer than this autoexp (v{SCHEMA_VERSION}); upgrade autoexp"
        )


def upgrade_schema(engine: Engine) -> None:
    """Create a fresh schema, or run the pending migrations one transaction at a time.

    The version is re-read inside every write transaction, so two processes
    opening an old database at once cannot both run the same migration.
    """
    with engine.connect().execution_options(begin_immediate=True) as conn:
        while True:
            with conn.begin():
                version = conn.exec_driver_sql("PRAGMA user_version").scalar_one()
                if version == SCHEMA_VERSION:
                    return
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"the state database is schema v{version}, newer than this autoexp "
                        f"(v{SCHEMA_VERSION}); upgrade autoexp"
                    )
                if version == 0:
                    Base.metadata.create_all(conn)
                else:
                    MIGRATIONS[version - 1](conn)
                new_version = SCHEMA_VERSION if version == 0 else version + 1
                conn.exec_driver_sql(f"PRAGMA user_version = {new_version}")
