"""`StoreReader.shown_attempts` answers in one query what `autoexp status` used to find by reading
a job's attempts and decisions again whenever its latest attempt was open or cancelled: the
attempt watched, else the last that was not a dropped successor (core/jobs/attempt_pick.py).
Compared with the pure pick on every attempt and decision of sessions of many shapes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from oellm_autoexp.adapters.store.reader import StoreReader
from oellm_autoexp.adapters.store.schema import AttemptRow, DecisionRow, JobRow, SignalRow
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.cli.status import rows_of, status_rows
from oellm_autoexp.core.jobs.attempt_pick import DROPPED_PREFIX, shown_attempt_of
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.plan.segments import elapsed_s

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

T0 = datetime(2026, 11, 25, 8, 0, tzinfo=UTC)


def _attempt(db: Session, job_id: int, no: int, shape: str) -> int:
    """One attempt: `ended` (FAILED), `open` (RUNNING), `cancelled`, `unsubmitted` (no Slurm id
    yet), `abandoned` (the submission never happened), `blank_id` (an empty Slurm id)."""
    at = T0 + timedelta(minutes=no)
    intent = {"unsubmitted": "intended", "abandoned": "abandoned"}.get(shape, "submitted")
    slurm_id = None if intent != "submitted" else "" if shape == "blank_id" else str(1000 * job_id + no)
    state = {"ended": JobState.FAILED, "cancelled": JobState.CANCELLED, "open": JobState.RUNNING}
    row = AttemptRow(job_id=job_id, attempt_no=no, submit_tag=f"tag-{job_id}-{no}", intent=intent,
                     executor_job_id=slurm_id, nodes_json=[], intended_at=at,
                     submitted_at=at if slurm_id is not None else None,
                     state=state.get(shape, JobState.PENDING).value,
                     started_at=at if shape in ("ended", "open") else None,
                     ended_at=at + timedelta(seconds=17 * no) if shape in ("ended", "cancelled") else None)  # fmt: skip
    db.add(row)
    db.flush()
    db.add(SignalRow(attempt_id=row.id, pattern=f"p{no}", error_type="oom", subsystem="cuda", role="root",
                     line_no=no, line="line", evidence_json=[], observed_at=at))  # fmt: skip
    return row.id


def _decide(db: Session, job_id: int, aid: int, kind: str) -> None:
    reason = {"restart": "crash: restart", "dropped": f"{DROPPED_PREFIX}{aid} cancelled: the job ended",
              "none": "cancelled by the user", "stop": "oom: stop"}[kind]  # fmt: skip
    db.add(DecisionRow(job_id=job_id, attempt_id=aid, action={"dropped": "none"}.get(kind, kind), reason=reason,
                       budget_before=3, budget_after=2, evidence_json={"error_type": "oom"}, decided_at=T0))  # fmt: skip


def _job(db: Session, session_id: int, key: str, layout: list[tuple[str, str | None]]) -> None:
    job = JobRow(session_id=session_id, job_key=key, name=key, plan_json={}, status="active",
                 restart_counts_json={}, created_at=T0)  # fmt: skip
    db.add(job)
    db.flush()
    for no, (shape, decision) in enumerate(layout, start=1):
        aid = _attempt(db, job.id, no, shape)
        if decision:
            _decide(db, job.id, aid, decision)


SHAPES = ("ended", "open", "cancelled", "unsubmitted", "abandoned", "blank_id")
NAMED = {  # the cases the queued successor makes, each by name
    "watched_with_successor_queued": [("ended", "restart"), ("open", None), ("open", None)],
    "successor_dropped_at_completion": [("ended", "restart"), ("ended", "stop"), ("cancelled", "dropped")],
    "cancelled_by_the_user": [("ended", "restart"), ("cancelled", "none")],
    "restart_decided_on_the_open_one": [("ended", "restart"), ("open", "restart"), ("open", None)],
    "only_successors_dropped": [("cancelled", "dropped"), ("cancelled", "dropped")],
    "first_attempt_open": [("open", None)],
    "latest_ended_earlier_left_open": [("open", None), ("ended", "stop")],
    "blank_slurm_id_and_abandoned": [("ended", "restart"), ("blank_id", None), ("abandoned", None)],
}


def _fill(store: SQLiteStore, seed: int, random_jobs: int) -> int:
    """A session of the NAMED jobs (job0, job1...), then `random_jobs` of random shapes, then one
    with no attempt; another session beside it, whose jobs must not leak in."""
    rng = random.Random(seed)
    store.create_session("other", config_path="x.yaml", config={}, now=T0)
    session = store.create_session("s", config_path="e.yaml", config={}, now=T0)
    layouts = list(NAMED.values()) + [
        [(rng.choice(SHAPES), rng.choice([None, None, "restart", "dropped", "none", "stop"]))
         for _ in range(rng.randint(1, 5))]
        for _ in range(random_jobs)
    ]  # fmt: skip
    with store.writing() as db:
        _job(db, 1, "other", [("open", "restart"), ("open", None)])
        for j, layout in enumerate(layouts):
            _job(db, session.id, f"job{j}", layout)
        _job(db, session.id, "no-attempt", [])
    return session.id


def _old_pick(store: SQLiteStore, session_id: int) -> dict[int, object]:
    """What `status` showed before: the latest, re-read and picked where it was open or cancelled."""
    latest: dict[int, object] = {}
    for attempt in store.attempts_for_session(session_id):
        latest[attempt.job_id] = attempt
    for job_id, last in list(latest.items()):
        if last.attempt_no > 1 and (last.ended_at is None or last.state.value == "CANCELLED"):  # type: ignore[attr-defined]
            latest[job_id] = shown_attempt_of(store.attempts_for_job(job_id), store.decisions_for_job(job_id))
    return latest


def test_the_named_cases_show_the_attempt_watched_or_the_last_kept(tmp_path: Path) -> None:
    """Queued successor behind the watched attempt: the watched one; a successor dropped when the
    job ended: the attempt before it; a user's scancel of the latest: that attempt."""
    with SQLiteStore(tmp_path) as store:
        session_id = _fill(store, seed=0, random_jobs=0)
    with StoreReader(tmp_path) as reader:
        shown = reader.shown_attempts(session_id)
        names = {j.id: j.name for j in reader.jobs_for_session(session_id)}
    picked = {names[job_id]: a.attempt_no for job_id, a in shown.items()}
    assert picked == {"job0": 2, "job1": 2, "job2": 2, "job3": 3, "job4": 2, "job5": 1, "job6": 2, "job7": 3}


def test_one_query_gives_what_the_rereads_gave_on_many_shapes(tmp_path: Path) -> None:
    """On 120 jobs of random attempt and decision shapes (and another session beside), the SQL pick
    and the pure per-job pick agree, and so do the status rows built on each."""
    with SQLiteStore(tmp_path) as store:
        session_id = _fill(store, seed=28, random_jobs=120)
        old = _old_pick(store, session_id)
        latest = {a.job_id: a for a in store.attempts_for_session(session_id)}
        session = store.get_session(session_id)
        assert session is not None
        signals = {a.id: store.signals_for_attempt(a.id) for a in old.values()}  # type: ignore[attr-defined]
        jobs = store.jobs_for_session(session_id, with_plan=False)
        oracle_rows = rows_of(jobs, old, store.decisions_for_session(session_id), signals)  # type: ignore[arg-type]
    with StoreReader(tmp_path) as reader:
        shown = reader.shown_attempts(session_id)
        assert status_rows(reader, session) == oracle_rows
    assert shown == old
    with SQLiteStore(tmp_path) as store, StoreReader(tmp_path) as reader:
        now = T0 + timedelta(hours=2)  # open attempts run to now; unsubmitted ones never started
        spans: dict[int, list[tuple[datetime | None, datetime | None]]] = {}
        for a in store.attempts_for_session(session_id):
            spans.setdefault(a.job_id, []).append((a.started_at, a.ended_at))
        expected = {j: (len(s), pytest.approx(elapsed_s(s, now), abs=1e-3)) for j, s in spans.items()}
        assert reader.elapsed_by_job(session_id, now) == expected
    assert sum(a != latest[j] for j, a in old.items()) >= 10  # the shapes exercise the pick


def test_status_reads_a_fixed_number_of_queries_whatever_the_jobs(tmp_path: Path) -> None:
    """No query per job: a session of 4 jobs and one of 60, each job with a queued successor or a
    dropped one, cost `status` the same statements."""
    counts = []
    for jobs in (4, 60):
        state = tmp_path / str(jobs)
        with SQLiteStore(state) as store:
            session = store.create_session("s", config_path="e.yaml", config={}, now=T0)
            with store.writing() as db:
                for j in range(jobs):
                    _job(db, session.id, f"k{j}", NAMED["watched_with_successor_queued" if j % 2
                                                          else "successor_dropped_at_completion"])  # fmt: skip
        with StoreReader(state) as reader:
            statements: list[str] = []
            reader._db.set_trace_callback(statements.append)
            status_rows(reader, session)
            counts.append(len(statements))
    assert counts[0] == counts[1] <= 6, counts
