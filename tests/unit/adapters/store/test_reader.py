"""The sqlite3 reader (adapters/store/reader.py) returns what SQLiteStore returns, method by method,
on one database; it refuses what a read-only SQLiteStore refuses, and creates nothing."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store import schema, sqlite_store, vocab
from oellm_autoexp.adapters.store.candidates import candidates_for_attempt, close_candidate, record_candidate
from oellm_autoexp.adapters.store.reader import StoreReader
from oellm_autoexp.adapters.store.records import NewSignal
from oellm_autoexp.adapters.store.schema import ExclusionRow
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.segments import elapsed_s

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _fill(state: Path) -> SQLiteStore:
    """Two sessions; jobs with attempts, signals, restart and stop decisions, an exclusion, a race."""
    store = SQLiteStore(state)
    store.create_session("old", config_path="a.yaml", config={"x": 1}, now=T0)
    session = store.create_session("new", config_path="b.yaml", config={"y": [1, 2]}, now=T0)
    for j in range(3):
        job = store.add_job(session.id, job_key=f"k{j}", name=f"job{j}", plan={"script": "#!/bin/sh"}, now=T0)
        for no in (1, 2):
            aid = store.record_intent(job.id, no, f"tag-{j}-{no}", now=T0 + timedelta(seconds=no))
            store.confirm_submitted(aid, f"{100 + 10 * j + no}", now=T0, log_path=f"/logs/{j}-{no}.out")
            store.update_attempt_state(aid, JobState.FAILED, exit_code=1, nodes=["n1", "n2"],
                                       started_at=T0, ended_at=T0 + timedelta(minutes=no))  # fmt: skip
            store.record_signals(aid, [NewSignal("cuda_oom", "oom", "cuda", "root", 7, "CUDA out of memory",
                                                 T0, ("before", "after"))])  # fmt: skip
            store.record_decision(job.id, attempt_id=aid, action="restart" if no == 1 else "stop",
                                  reason=f"r{no}", now=T0, budget_before=3, budget_after=2,
                                  evidence={"error_type": "oom", "kind": "oom", "lines": ["x"]})  # fmt: skip
        # Restart counts' causes: error_type, else kind, else "crash" (evidence of any shape).
        for evidence in ({"kind": "hang"}, {"error_type": "", "kind": "timeout"}, {}, ["old", "form"], None):
            store.record_decision(
                job.id, attempt_id=None, action="restart", reason="r", now=T0, evidence=evidence
            )
    with store.writing() as db:
        db.add(ExclusionRow(job_id=1, node="n2", evidence="Xid 79", source="log", created_at=T0,
                            expires_at=T0 + timedelta(hours=1)))  # fmt: skip
    cid = record_candidate(store, 1, 0, "a100", {"name": "a100", "partition": "p", "gpu_type": "a100",
                                                "nodes": 1, "gpus_per_node": 4, "time_min": 60},
                           "ctag", "unknown", now=T0)  # fmt: skip
    close_candidate(store, cid, "won", now=T0 + timedelta(seconds=30), gpu_types="a100")
    return store


def test_reader_returns_what_the_store_returns(tmp_path: Path) -> None:
    """Every read method: the same records, in the same order, on the same file."""
    store = _fill(tmp_path)
    with store, StoreReader(tmp_path) as reader:
        assert reader.list_sessions() == store.list_sessions()
        assert reader.get_session(2) == store.get_session(2)
        assert reader.get_session(9) is None
        assert reader.find_session("old") == store.find_session("old")
        assert reader.find_session("nope") is None
        assert reader.jobs_for_session(2) == store.jobs_for_session(2)
        assert reader.jobs_for_session(2, with_plan=False) == store.jobs_for_session(2, with_plan=False)
        assert reader.jobs_for_session(2)[0].restart_counts == {"oom": 1, "hang": 1, "timeout": 1, "crash": 3}
        for ref in ("k1", "job2", "1", "77", "nope"):
            assert reader.find_job(2, ref) == store.find_job(2, ref)
        assert reader.attempts_for_session(2) == store.attempts_for_session(2)
        for job_id in (1, 2, 3):
            assert reader.attempts_for_job(job_id) == store.attempts_for_job(job_id)
            assert reader.latest_attempt(job_id) == store.latest_attempt(job_id)
            assert reader.decisions_for_job(job_id) == store.decisions_for_job(job_id)
            assert reader.exclusions_for_job(job_id) == store.exclusions_for_job(job_id)
        assert reader.decisions_for_session(2) == store.decisions_for_session(2)
        latest = reader.shown_attempts(2)  # every attempt ended: the latest of each job
        assert latest == {j: store.latest_attempt(j) for j in (1, 2, 3)}
        now = T0 + timedelta(hours=1)
        assert reader.elapsed_by_job(2, now) == {
            j: (
                2,
                pytest.approx(
                    elapsed_s([(a.started_at, a.ended_at) for a in store.attempts_for_job(j)], now)
                ),
            )
            for j in (1, 2, 3)
        }
        # what a status row reads: each job's last decision, its last with a budget, its latest attempt's
        subset = reader.status_decisions(2, [a.id for a in latest.values()])
        for j in (1, 2, 3):
            full = store.decisions_for_job(j)
            mine = [d for d in subset if d.job_id == j]
            assert mine[-1] == full[-1] and all(d in full for d in mine)
            assert [d for d in full if d.attempt_id == latest[j].id] == [
                d for d in mine if d.attempt_id == latest[j].id
            ]
            budgeted = [d for d in full if d.budget_after is not None]
            assert [d for d in mine if d.budget_after is not None][-1] == budgeted[-1]
        from oellm_autoexp.cli.status import rows_of, status_rows

        session = reader.get_session(2)
        assert session is not None
        shown = {a.job_id: a for a in latest.values()}
        signals = {a.id: store.signals_for_attempt(a.id) for a in shown.values()}
        jobs = store.jobs_for_session(2, with_plan=False)
        expected = rows_of(jobs, shown, store.decisions_for_session(2), signals)
        assert status_rows(reader, session) == expected
        assert reader.signals_for_attempts([1, 2, 99]) == {
            1: store.signals_for_attempt(1),
            2: store.signals_for_attempt(2),
            99: [],
        }
        assert reader.exclusions_for_session(2) == [e for j in (1, 2, 3) for e in store.exclusions_for_job(j)]
        for attempt in store.attempts_for_session(2):
            assert reader.signals_for_attempt(attempt.id) == store.signals_for_attempt(attempt.id)
            assert reader.candidates_for_attempt(attempt.id) == candidates_for_attempt(store, attempt.id)
        assert reader.candidates_for_attempt(1)[0].outcome == "won"
        assert reader.won_candidates(2) == {1: candidates_for_attempt(store, 1)[0]}
        assert reader.won_candidates(1) == {}
        assert reader.job_names(2) == {j.id: j.name for j in store.jobs_for_session(2)}


def test_reader_creates_nothing_and_refuses_a_missing_state(tmp_path: Path) -> None:
    """No state dir, no database: one clear line, and nothing is created."""
    missing = tmp_path / "none"
    with pytest.raises(UserError, match="does not exist"):
        StoreReader(missing)
    assert not missing.exists()
    with pytest.raises(UserError, match=r"has no autoexp\.db"):
        StoreReader(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_reader_refuses_another_schema_version_and_a_non_database(tmp_path: Path) -> None:
    """An older database is not upgraded by a reader; a file that is no database is named."""
    _fill(tmp_path).close()
    with sqlite3.connect(tmp_path / "autoexp.db") as db:
        db.execute("PRAGMA user_version = 4")
    with pytest.raises(UserError, match=f"schema v4, this autoexp reads v{vocab.SCHEMA_VERSION}"):
        StoreReader(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "autoexp.db").write_text("not sqlite at all, just text", encoding="utf-8")
    with pytest.raises(UserError, match="not a database"):
        StoreReader(other)


def test_vocab_matches_the_orm_schema() -> None:
    """The reader's schema version and file name are the ORM store's."""
    assert vocab.SCHEMA_VERSION == schema.SCHEMA_VERSION
    assert vocab.DB_FILENAME == sqlite_store.DB_FILENAME


def test_reader_default_cause_is_evidence_default_kind() -> None:
    """Restart counts without a cause count as Evidence's default kind, as the ORM store counts them."""
    from oellm_autoexp.adapters.store import reader
    from oellm_autoexp.core.watch.evidence import Evidence

    assert Evidence().kind == reader.DEFAULT_KIND
