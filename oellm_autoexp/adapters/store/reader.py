"""The state store read through the standard library's sqlite3: what `status`, `sessions` and
`explain` use.

Those commands are typed in loops (`watch autoexp status`) and run by scripts; importing
SQLAlchemy and building its engine cost them most of their time. This reader opens the same
file read-only (creating nothing, as sqlite_store.py's `read_only=True` does), checks the same
schema version, and returns the same frozen records as `SQLiteStore` (adapters/store/records.py),
with the same queries and orderings. tests/unit/adapters/store/test_reader.py compares the two
method by method on one database.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oellm_autoexp.adapters.store.open_checks import (
    check_is_database,
    check_readable_state,
    opening_error,
    read_only_uri,
)
from oellm_autoexp.adapters.store.records import (
    AttemptInfo,
    CandidateInfo,
    DecisionInfo,
    JobInfo,
    SessionInfo,
    SignalInfo,
)
from oellm_autoexp.adapters.store.vocab import DB_FILENAME, SCHEMA_VERSION
from oellm_autoexp.core.jobs.attempt_pick import (
    ABANDONED_INTENT,
    CANCELLED_STATE,
    DROPPED_PREFIX,
    NONE_ACTION,
    RESTART_ACTION,
)
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.errors import UserError

if TYPE_CHECKING:
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
    from oellm_autoexp.core.decide.exclusions import Exclusion

BUSY_TIMEOUT_S = 30.0  # as a writer's: a read waits out a writer's transaction
MAX_PARAMS = 900  # bound parameters per query: under the 999 of SQLite builds before 3.32
DEFAULT_KIND = "crash"  # Evidence.kind's default (core/watch/evidence.py; not imported: start-up time)

_ATTEMPT_COLUMNS = (
    "id, job_id, attempt_no, submit_tag, intent, executor_job_id, nodes_json, intended_at, submitted_at, "
    "started_at, ended_at, state, exit_code, log_path, last_iteration, first_iteration_at"
)
_ATTEMPT_COLUMNS_OF_A = ", ".join(f"a.{c.strip()}" for c in _ATTEMPT_COLUMNS.split(","))
_JOB_COLUMNS = "id, session_id, job_key, name, plan_json, status, status_reason, created_at"
_SESSION_COLUMNS = (
    "id, name, config_path, config_json, created_at, status, monitor_pid, monitor_host, monitor_heartbeat, "
    "monitor_generation, monitor_interval_s, monitor_job, monitor_left_at"
)
_LAST_DECISIONS = (  # a session's job ids (`j`) and its jobs' last decisions (`last`), for status_decisions
    "WITH j AS (SELECT id FROM jobs WHERE session_id = ?), last AS (SELECT MAX(e.id) AS id FROM j "
    "JOIN decisions e ON e.job_id = j.id GROUP BY j.id UNION SELECT MAX(e.id) FROM j JOIN decisions e "
    "ON e.job_id = j.id WHERE e.budget_after IS NOT NULL GROUP BY j.id) "
)


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _when(value: str) -> datetime:
    """A NOT NULL time column."""
    return datetime.fromisoformat(value)


def _json(value: str | None) -> Any:
    return None if value is None else json.loads(value)


class StoreReader:
    """A read-only view of the state store; the read methods of `SQLiteStore`, nothing that writes."""

    def __init__(
        self, state_dir: Path, *, busy_timeout_s: float = BUSY_TIMEOUT_S, checked: bool = False
    ) -> None:
        """Open `state_dir`'s database read-only; UserError when there is none or it cannot be read.
        `checked`: a writer of this process opened it (`beside`): the file is not checked again."""
        self.path = state_dir / DB_FILENAME
        if not checked:
            check_readable_state(state_dir, self.path)
            check_is_database(self.path)
        try:
            self._db = sqlite3.connect(
                read_only_uri(self.path), uri=True, timeout=busy_timeout_s, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise opening_error(self.path, exc) from None
        try:
            self._check_schema()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise opening_error(self.path, exc) from None
        except BaseException:
            self._db.close()
            raise

    @classmethod
    def beside(cls, store: SQLiteStore) -> StoreReader:
        """A reader in the process that holds `store` open (`autoexp run`'s live view). The writer
        checked the file already; checking it again would open and close it here, and POSIX then
        drops every lock this process holds on it, SQLite's included: another process that closes
        its last connection would checkpoint and delete the WAL while the writer still writes into it
        (tests/unit/adapters/store/test_reader_beside_writer.py)."""
        return cls(store.path.parent, checked=True)

    def _check_schema(self) -> None:
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version == SCHEMA_VERSION:
            return
        raise UserError(
            f"the state database is schema v{version}, this autoexp reads v{SCHEMA_VERSION}; "
            "run a command that writes (e.g. `autoexp monitor-session`) to upgrade it"
            if version < SCHEMA_VERSION
            else f"the state database is schema v{version}, newer than this autoexp (v{SCHEMA_VERSION}); upgrade autoexp"
        )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        # One read transaction per call, as the store's `_read()`: a consistent snapshot.
        return self._db.execute(sql, params).fetchall()

    # -- sessions ---------------------------------------------------------------------------------

    def get_session(self, session_id: int) -> SessionInfo | None:
        found = self._sessions("WHERE id = ?", (session_id,))
        return found[0] if found else None

    def find_session(self, name: str) -> SessionInfo | None:
        found = self._sessions("WHERE name = ?", (name,))
        return found[0] if found else None

    def list_sessions(self) -> list[SessionInfo]:
        return self._sessions("", ())

    def _sessions(self, where: str, params: Sequence[Any]) -> list[SessionInfo]:
        rows = self._rows(f"SELECT {_SESSION_COLUMNS} FROM sessions {where} ORDER BY id", params)
        return [
            SessionInfo(
                r[0],
                r[1],
                r[2],
                _json(r[3]),
                _when(r[4]),
                r[5],
                r[6],
                r[7],
                _time(r[8]),
                r[9] or 0,
                r[10],
                r[11],
                _time(r[12]),
            )
            for r in rows
        ]

    # -- jobs ---------------------------------------------------------------------------------------

    def find_job(self, session_id: int, ref: str) -> JobInfo | None:
        """A job of the session by key, then by name, then by numeric id (what a user types)."""
        for column in ("job_key", "name"):
            found = self._jobs(f"WHERE session_id = ? AND {column} = ?", (session_id, ref), limit=1)
            if found:
                return found[0]
        if ref.isdigit():
            found = self._jobs("WHERE session_id = ? AND id = ?", (session_id, int(ref)))
            return found[0] if found else None
        return None

    def jobs_for_session(self, session_id: int, *, with_plan: bool = True) -> list[JobInfo]:
        return self._jobs("WHERE session_id = ?", (session_id,), with_plan=with_plan)

    def _jobs(
        self, where: str, params: Sequence[Any], *, with_plan: bool = True, limit: int | None = None
    ) -> list[JobInfo]:
        columns = _JOB_COLUMNS if with_plan else _JOB_COLUMNS.replace("plan_json", "NULL")
        tail = "" if limit is None else f" LIMIT {int(limit)}"
        rows = self._rows(f"SELECT {columns} FROM jobs {where} ORDER BY id{tail}", params)
        counts = self._restart_counts([r[0] for r in rows])
        return [_job(r, counts[r[0]], with_plan=with_plan) for r in rows]

    def _restart_counts(self, job_ids: Sequence[int]) -> dict[int, dict[str, int]]:
        """Per job, its restarts by cause, counted from its restart decisions (their one source of truth).

        The cause is Evidence's `error_type or kind` (kind "crash" when absent), read by SQLite's
        JSON functions: parsing every decision's evidence in Python was most of `status`'s time.
        """
        counts: dict[int, dict[str, int]] = {i: {} for i in job_ids}
        if not job_ids:
            return counts
        marks = ",".join("?" * len(job_ids))
        sql = (
            "SELECT job_id, CASE WHEN json_type(evidence_json) = 'object' THEN COALESCE("
            f"NULLIF(json_extract(evidence_json, '$.error_type'), ''), json_extract(evidence_json, '$.kind'), "
            f"'{DEFAULT_KIND}') ELSE '{DEFAULT_KIND}' END AS cause, COUNT(*) FROM decisions "
            f"WHERE action = ? AND job_id IN ({marks}) GROUP BY job_id, cause"
        )
        for job_id, cause, n in self._rows(sql, (RESTART_ACTION, *job_ids)):
            counts[job_id][cause] = n
        return counts

    def job_names(self, session_id: int) -> dict[int, str]:
        """The session's jobs' names by id (no plans, no counts)."""
        return dict(self._rows("SELECT id, name FROM jobs WHERE session_id = ? ORDER BY id", (session_id,)))

    # -- attempts -----------------------------------------------------------------------------------

    def latest_attempt(self, job_id: int) -> AttemptInfo | None:
        found = self._attempts("WHERE job_id = ? ORDER BY attempt_no DESC LIMIT 1", (job_id,))
        return found[0] if found else None

    def attempts_for_job(self, job_id: int) -> list[AttemptInfo]:
        return self._attempts("WHERE job_id = ? ORDER BY attempt_no", (job_id,))

    def attempts_for_session(self, session_id: int) -> list[AttemptInfo]:
        where = "WHERE job_id IN (SELECT id FROM jobs WHERE session_id = ?) ORDER BY job_id, attempt_no"
        return self._attempts(where, (session_id,))

    def shown_attempts(self, session_id: int) -> dict[int, AttemptInfo]:
        """Per job of the session, the attempt `status` and `autoexp run`'s live view show, in one
        query (the one place this rule is written for a session): its latest, or where that is
        open or cancelled (a successor may be queued behind it, or was dropped), the pick of
        core/jobs/attempt_pick.py `shown_attempt_of` on the job's attempts and decisions: the one
        watched (the lowest open attempt past the last restart decision), else the last that was
        not a dropped successor (tests/unit/adapters/store/test_reader_shown.py compares them)."""
        sql = (
            "WITH latest AS (SELECT a.job_id, MAX(a.attempt_no) AS no FROM jobs j JOIN attempts a "
            "ON a.job_id = j.id WHERE j.session_id = ? GROUP BY a.job_id), "
            # the attempt shown: the latest, unless it is open or cancelled; then
            "shown AS (SELECT l.job_id, CASE WHEN l.no > 1 AND (la.ended_at IS NULL OR la.state = ?) THEN COALESCE("
            # the lowest open one (reached Slurm, not ended, not abandoned) past the last restart,
            "(SELECT MIN(o.attempt_no) FROM attempts o WHERE o.job_id = l.job_id AND o.executor_job_id IS NOT NULL "
            "AND o.executor_job_id != '' AND o.ended_at IS NULL AND o.intent != ? AND o.attempt_no > COALESCE("
            "(SELECT MAX(r.attempt_no) FROM decisions d JOIN attempts r ON r.id = d.attempt_id "
            "AND r.job_id = d.job_id WHERE d.job_id = l.job_id AND d.action = ?), 0)), "
            # else the last that was not a dropped successor, else the latest
            "(SELECT MAX(k.attempt_no) FROM attempts k WHERE k.job_id = l.job_id AND NOT EXISTS (SELECT 1 "
            "FROM decisions x WHERE x.job_id = k.job_id AND x.attempt_id = k.id AND x.action = ? "
            "AND substr(x.reason, 1, ?) = ?)), l.no) ELSE l.no END AS no "
            "FROM latest l JOIN attempts la ON la.job_id = l.job_id AND la.attempt_no = l.no) "
            f"SELECT {_ATTEMPT_COLUMNS_OF_A} FROM shown JOIN attempts a "
            "ON a.job_id = shown.job_id AND a.attempt_no = shown.no ORDER BY a.job_id"
        )
        params = (session_id, CANCELLED_STATE, ABANDONED_INTENT, RESTART_ACTION, NONE_ACTION,
                  len(DROPPED_PREFIX), DROPPED_PREFIX)  # fmt: skip
        return {a.job_id: a for a in map(_attempt, self._rows(sql, params))}

    def elapsed_by_job(self, session_id: int, now: datetime) -> dict[int, tuple[int, float]]:
        """Per job, (its attempts, the seconds they ran): each started attempt from its start to its
        end (a running one to `now`), as plan/segments.py `elapsed_s` adds them, summed by SQLite
        (julianday: within a millisecond) instead of a thousand timestamps parsed in Python."""
        sql = (
            "SELECT a.job_id, COUNT(*), COALESCE(SUM(MAX(0.0, julianday(COALESCE(a.ended_at, ?)) - "
            "julianday(a.started_at))), 0.0) * 86400.0 FROM jobs j JOIN attempts a ON a.job_id = j.id "
            "WHERE j.session_id = ? GROUP BY a.job_id ORDER BY a.job_id"
        )
        return {job_id: (n, seconds) for job_id, n, seconds in self._rows(sql, (now.isoformat(), session_id))}

    def status_decisions(self, session_id: int, shown_attempt_ids: Sequence[int]) -> list[DecisionInfo]:
        """The decisions a job's status row reads, in id order: each job's last one, its last with a
        budget, and every one about the attempt it shows (not the whole history of a long run)."""
        marks = ",".join("?" * len(shown_attempt_ids)) or "NULL"
        where = (  # `last`: per job, the ids of its last decision and of its last with a budget
            f"WHERE job_id IN (SELECT id FROM j) AND (id IN (SELECT id FROM last) OR attempt_id IN ({marks}))"
        )
        return self._decisions(where, (session_id, *shown_attempt_ids), with_sql=_LAST_DECISIONS)

    def _attempts(self, where_order: str, params: Sequence[Any]) -> list[AttemptInfo]:
        rows = self._rows(f"SELECT {_ATTEMPT_COLUMNS} FROM attempts {where_order}", params)
        return [_attempt(r) for r in rows]

    # -- signals, decisions, exclusions, candidates --------------------------------------------------

    def signals_for_attempt(self, attempt_id: int) -> list[SignalInfo]:
        return self._signals("WHERE attempt_id = ?", (attempt_id,))

    def signals_for_attempts(self, attempt_ids: Sequence[int]) -> dict[int, list[SignalInfo]]:
        """`signals_for_attempt` for several attempts in one query: attempt id -> its signals."""
        found: dict[int, list[SignalInfo]] = {i: [] for i in attempt_ids}
        for start in range(0, len(attempt_ids), MAX_PARAMS):
            chunk = attempt_ids[start : start + MAX_PARAMS]
            where = f"WHERE attempt_id IN ({','.join('?' * len(chunk))})"
            for signal in self._signals(where, chunk):
                found[signal.attempt_id].append(signal)
        return found

    def _signals(self, where: str, params: Sequence[Any]) -> list[SignalInfo]:
        rows = self._rows(
            "SELECT id, attempt_id, pattern, error_type, subsystem, role, line_no, line, evidence_json, "
            f"observed_at FROM signals {where} ORDER BY id",
            params,
        )
        return [
            SignalInfo(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], tuple(_json(r[8]) or ()), _when(r[9]))
            for r in rows
        ]

    def decisions_for_job(self, job_id: int) -> list[DecisionInfo]:
        return self._decisions("WHERE job_id = ?", (job_id,))

    def decisions_for_session(self, session_id: int) -> list[DecisionInfo]:
        return self._decisions("WHERE job_id IN (SELECT id FROM jobs WHERE session_id = ?)", (session_id,))

    def _decisions(self, where: str, params: Sequence[Any], *, with_sql: str = "") -> list[DecisionInfo]:
        rows = self._rows(
            f"{with_sql}SELECT id, job_id, attempt_id, action, reason, budget_before, budget_after, evidence_json, "
            f"decided_at FROM decisions {where} ORDER BY id",
            params,
        )
        return [
            DecisionInfo(r[0], r[1], r[2], r[3], r[4], r[5], r[6], _json(r[7]), _when(r[8])) for r in rows
        ]

    def exclusions_for_job(self, job_id: int) -> list[Exclusion]:
        """Every node exclusion recorded for a job, expired ones too (callers filter by `now`)."""
        return self._exclusions("e.job_id = ?", job_id)

    def exclusions_for_session(self, session_id: int) -> list[Exclusion]:
        """The same for every job of a session, in job then record order."""
        return self._exclusions("jobs.session_id = ?", session_id)

    def _exclusions(self, where: str, param: int) -> list[Exclusion]:
        rows = self._rows(
            "SELECT jobs.name, e.node, e.evidence, e.source, e.created_at, e.expires_at FROM exclusions e "
            f"JOIN jobs ON e.job_id = jobs.id WHERE {where} ORDER BY e.job_id, e.id",
            (param,),
        )
        if not rows:
            return []
        from oellm_autoexp.core.decide.exclusions import Exclusion  # only when there are some

        return [Exclusion(r[0], r[1], r[2], r[3], _when(r[4]), _when(r[5])) for r in rows]

    def won_candidates(self, session_id: int) -> dict[int, CandidateInfo]:
        """Per attempt of the session that went through the strategies, its winning candidate."""
        rows = self._rows(
            "SELECT c.id, c.attempt_id, c.rank, c.strategy, c.strategy_json, c.submit_tag, c.intent, "
            "c.executor_job_id, c.estimate, c.intended_at, c.submitted_at, c.closed_at, c.outcome, c.gpu_types "
            "FROM candidates c JOIN attempts a ON c.attempt_id = a.id JOIN jobs j ON a.job_id = j.id "
            "WHERE j.session_id = ? AND c.outcome = 'won' ORDER BY c.attempt_id, c.rank DESC",
            (session_id,),
        )
        return {r[1]: _candidate(r) for r in rows}  # the best-ranked winner last, so it stays

    def candidates_for_attempt(self, attempt_id: int) -> list[CandidateInfo]:
        rows = self._rows(
            "SELECT id, attempt_id, rank, strategy, strategy_json, submit_tag, intent, executor_job_id, "
            "estimate, intended_at, submitted_at, closed_at, outcome, gpu_types FROM candidates "
            "WHERE attempt_id = ? ORDER BY rank",
            (attempt_id,),
        )
        return [_candidate(r) for r in rows]


# Rows (in the column orders of the SELECTs above) to the store's records.


def _job(r: tuple[Any, ...], counts: dict[str, int], *, with_plan: bool) -> JobInfo:
    plan = _json(r[4]) if with_plan else {}
    return JobInfo(r[0], r[1], r[2], r[3], plan, r[5], r[6], sum(counts.values()), counts, _when(r[7]))


def _attempt(r: tuple[Any, ...]) -> AttemptInfo:
    return AttemptInfo(
        r[0], r[1], r[2], r[3], r[4], r[5], tuple(_json(r[6]) or ()), _when(r[7]),
        _time(r[8]), _time(r[9]), _time(r[10]), JobState(r[11]), r[12], r[13], r[14], _time(r[15]),
    )  # fmt: skip


def _candidate(r: tuple[Any, ...]) -> CandidateInfo:
    return CandidateInfo(
        r[0], r[1], r[2], r[3], dict(_json(r[4]) or {}), r[5], r[6], r[7], r[8], _when(r[9]),
        _time(r[10]), _time(r[11]), r[12], r[13],
    )  # fmt: skip
