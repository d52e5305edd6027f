"""Schema versions: a v1 database written by raw SQL is upgraded in place to the current schema."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect

from oellm_autoexp.adapters.store.schema import MIGRATIONS, SCHEMA_VERSION
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore, StoreError

# The schema as version 1 shipped it: no attempts.last_iteration, no log_offsets.
V1_DDL = """
CREATE TABLE sessions (
    id INTEGER NOT NULL, name VARCHAR(200) NOT NULL, config_path TEXT NOT NULL, config_json JSON NOT NULL,
    created_at VARCHAR(32) NOT NULL, status VARCHAR(32) NOT NULL, monitor_pid INTEGER,
    monitor_host VARCHAR(255), monitor_heartbeat VARCHAR(32), PRIMARY KEY (id), UNIQUE (name));
CREATE TABLE jobs (
    id INTEGER NOT NULL, session_id INTEGER NOT NULL, job_key VARCHAR(200) NOT NULL, name VARCHAR(200) NOT NULL,
    plan_json JSON NOT NULL, status VARCHAR(32) NOT NULL, status_reason TEXT NOT NULL,
    restart_count INTEGER NOT NULL, restart_counts_json JSON NOT NULL, created_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (id), UNIQUE (session_id, job_key),
    FOREIGN KEY(session_id) REFERENCES sessions (id) ON DELETE CASCADE);
CREATE TABLE attempts (
    id INTEGER NOT NULL, job_id INTEGER NOT NULL, attempt_no INTEGER NOT NULL, submit_tag VARCHAR(200) NOT NULL,
    intent VARCHAR(16) NOT NULL, executor_job_id VARCHAR(64), nodes_json JSON NOT NULL,
    intended_at VARCHAR(32) NOT NULL, submitted_at VARCHAR(32), started_at VARCHAR(32), ended_at VARCHAR(32),
    state VARCHAR(32) NOT NULL, exit_code INTEGER, log_path TEXT, PRIMARY KEY (id), UNIQUE (job_id, attempt_no),
    FOREIGN KEY(job_id) REFERENCES jobs (id) ON DELETE CASCADE, UNIQUE (submit_tag));
CREATE TABLE decisions (
    id INTEGER NOT NULL, job_id INTEGER NOT NULL, attempt_id INTEGER, action VARCHAR(32) NOT NULL,
    reason TEXT NOT NULL, budget_before INTEGER, budget_after INTEGER, evidence_json JSON NOT NULL,
    decided_at VARCHAR(32) NOT NULL, PRIMARY KEY (id),
    FOREIGN KEY(job_id) REFERENCES jobs (id) ON DELETE CASCADE,
    FOREIGN KEY(attempt_id) REFERENCES attempts (id) ON DELETE SET NULL);
CREATE INDEX ix_decisions_job_id ON decisions (job_id);
CREATE TABLE signals (
    id INTEGER NOT NULL, attempt_id INTEGER NOT NULL, pattern VARCHAR(200) NOT NULL, error_type VARCHAR(64),
    subsystem VARCHAR(64) NOT NULL, role VARCHAR(32) NOT NULL, line_no INTEGER NOT NULL, line TEXT NOT NULL,
    evidence_json JSON NOT NULL, observed_at VARCHAR(32) NOT NULL, PRIMARY KEY (id),
    FOREIGN KEY(attempt_id) REFERENCES attempts (id) ON DELETE CASCADE);
CREATE INDEX ix_signals_attempt_id ON signals (attempt_id);
PRAGMA user_version = 1;
"""

V1_ROWS = """
INSERT INTO sessions VALUES (1, 'old', 'exp.yaml', '{"lr": 0.1}', '2024-01-01T00:00:00.000000+00:00', 'active',
                             NULL, NULL, NULL);
INSERT INTO jobs VALUES (1, 1, 'k', 'old-k', '{"script": "a.sbatch"}', 'active', '', 1, '{"oom": 1}',
                         '2024-01-01T00:00:00.000000+00:00');
INSERT INTO attempts VALUES (1, 1, 1, 'tag-1', 'confirmed', '123', '["n1"]', '2024-01-01T00:00:00.000000+00:00',
                             NULL, NULL, NULL, 'RUNNING', NULL, '/logs/1.out');
"""


def _raw_db(state_dir: Path, script: str) -> None:
    state_dir.mkdir(parents=True)
    raw = sqlite3.connect(state_dir / "autoexp.db")
    raw.executescript(script)
    raw.close()


def _schema(db: Path) -> dict[str, Any]:
    """Columns (name, type, nullable, pk), unique constraints, foreign keys and indexes of every table."""
    engine = create_engine(f"sqlite:///{db}")
    try:
        insp = inspect(engine)
        return {
            table: {
                "columns": sorted(
                    (c["name"], str(c["type"]), c["nullable"], c["primary_key"])
                    for c in insp.get_columns(table)
                ),
                "unique": sorted(tuple(u["column_names"]) for u in insp.get_unique_constraints(table)),
                "fks": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"])
                    for f in insp.get_foreign_keys(table)
                ),
                "indexes": sorted(i["name"] or "" for i in insp.get_indexes(table)),
            }
            for table in insp.get_table_names()
        }
    finally:
        engine.dispose()


@pytest.fixture(autouse=True)
def _no_open_db_files(tmp_path: Path) -> Iterator[None]:
    """No test leaves the database open."""
    yield
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    assert [t for t in targets if t.startswith(str(tmp_path)) and "autoexp.db" in t] == []


def test_v1_database_is_upgraded_to_the_current_schema(tmp_path: Path) -> None:
    """Opening a v1 file runs the migrations: its tables then match a freshly created database exactly."""
    _raw_db(tmp_path / "old", V1_DDL)
    SQLiteStore(tmp_path / "old").close()
    SQLiteStore(tmp_path / "new").close()
    assert _schema(tmp_path / "old" / "autoexp.db") == _schema(tmp_path / "new" / "autoexp.db")


def test_upgrade_keeps_the_rows_and_stamps_the_version(tmp_path: Path) -> None:
    """Sessions, jobs and attempts survive the upgrade; the new column is empty, the new table usable."""
    _raw_db(tmp_path / "s", V1_DDL + V1_ROWS)
    with SQLiteStore(tmp_path / "s") as store:
        assert store.schema_version() == SCHEMA_VERSION
        job = store.find_job(1, "k")
        assert job is not None and (job.name, job.status) == ("old-k", "active")
        attempt = store.latest_attempt(job.id)
        assert attempt is not None
        assert (attempt.executor_job_id, attempt.nodes, attempt.last_iteration) == ("123", ("n1",), None)
        assert [a.id for a in store.live_attempts()] == [1]
        store.save_offset("/logs/1.out", 5, 10)
    with SQLiteStore(tmp_path / "s") as reopened:  # a current database is left alone
        assert reopened.load_offset("/logs/1.out") == (5, 10)


def test_a_database_from_a_newer_autoexp_is_refused(tmp_path: Path) -> None:
    """An older autoexp must not write into a schema it does not know."""
    _raw_db(tmp_path / "s", f"PRAGMA user_version = {SCHEMA_VERSION + 1};")
    with pytest.raises(StoreError, match=f"schema v{SCHEMA_VERSION + 1}, newer"):
        SQLiteStore(tmp_path / "s")


def test_v6_database_gains_the_first_iteration_column(tmp_path: Path) -> None:
    """A v6 file (the previous version) is upgraded to v7: attempts keep their rows, the start-up column is
    NULL for them and writable, and the tables match a fresh database."""
    _raw_db(tmp_path / "v6", V1_DDL + V1_ROWS)
    engine = create_engine(f"sqlite:///{tmp_path / 'v6' / 'autoexp.db'}")
    try:
        with engine.begin() as conn:  # v1 -> v6 exactly as an older autoexp would have left it
            for migrate in MIGRATIONS[:5]:
                migrate(conn)
            conn.exec_driver_sql("PRAGMA user_version = 6")
    finally:
        engine.dispose()
    raw = sqlite3.connect(tmp_path / "v6" / "autoexp.db")
    v6_columns = {row[1] for row in raw.execute("PRAGMA table_info(attempts)")}
    raw.close()
    assert "last_iteration" in v6_columns and "first_iteration_at" not in v6_columns
    with SQLiteStore(tmp_path / "v6") as store:
        assert store.schema_version() == 7
        attempt = store.latest_attempt(1)
        assert attempt is not None and attempt.first_iteration_at is None
        at = datetime(2026, 11, 26, 3, 0, 5, tzinfo=UTC)
        store.set_first_iteration(1, at)
        assert store.attempts_for_job(1)[0].first_iteration_at == at
    SQLiteStore(tmp_path / "new").close()
    assert _schema(tmp_path / "v6" / "autoexp.db") == _schema(tmp_path / "new" / "autoexp.db")
