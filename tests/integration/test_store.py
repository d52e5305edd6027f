"""The SQLite state store on real files: the duplicate-safe submission protocol, the monitor
lock, the queries the monitor and the CLI use, two processes at once, and connection hygiene."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store.snapshot import SNAPSHOT_FILENAME, write_snapshot
from oellm_autoexp.adapters.store.sqlite_store import (
    DuplicateAttempt,
    Intent,
    JobStatus,
    LogReadWrite,
    MonitorLockHeld,
    NewSignal,
    SQLiteStore,
    StoreError,
)
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.errors import UserError

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def open_db_fds(root: Path) -> list[str]:
    """Paths of this process's open file descriptors on the store's files under `root`."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the fd of the listing itself is gone by now
            continue
        if target.startswith(str(root)) and "autoexp.db" in target:
            found.append(target)
    return found


@pytest.fixture(autouse=True)
def _no_open_db_connections(tmp_path: Path) -> Iterator[None]:
    """Every test must leave no SQLite file open once its stores are closed."""
    yield
    assert open_db_fds(tmp_path) == []


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / ".oellm_state") as s:
        yield s


def _job(store: SQLiteStore, session: str = "s", key: str = "lr=0.1") -> tuple[int, int]:
    sid = store.create_session(session, config_path="exp.yaml", config={"lr": [0.1]}, now=T0).id
    return sid, store.add_job(
        sid, job_key=key, name=f"{session}-{key}", plan={"script": "a.sbatch"}, now=T0
    ).id


def test_store_creates_state_dir_and_uses_wal_with_foreign_keys(tmp_path: Path) -> None:
    """The state dir is created; the file is in WAL mode; a job for a missing session is refused."""
    state = tmp_path / "deep" / ".oellm_state"
    with SQLiteStore(state) as store:
        assert store.path == state / "autoexp.db"
        with pytest.raises(StoreError):
            store.add_job(999, job_key="k", name="n", plan={}, now=T0)
    with sqlite3.connect(state / "autoexp.db") as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


def test_intent_is_pending_until_confirmed_then_live_until_terminal(store: SQLiteStore) -> None:
    """intended -> (sbatch) -> submitted -> (first squeue sighting) -> confirmed; terminal ends liveness."""
    sid, jid = _job(store)
    aid = store.record_intent(jid, 1, "autoexp-s-1-1", now=T0, log_path="/logs/x.out")
    assert [a.id for a in store.pending_intents(sid)] == [aid]
    assert store.live_attempts() == []  # no executor id yet: nothing to ask squeue about

    store.confirm_submitted(aid, "4242", now=T0)
    assert store.pending_intents(sid) == []
    assert [a.executor_job_id for a in store.live_attempts()] == ["4242"]
    assert store.latest_attempt(jid).intent == Intent.SUBMITTED  # type: ignore[union-attr]

    store.update_attempt_state(aid, JobState.UNKNOWN)
    assert store.latest_attempt(jid).intent == Intent.SUBMITTED  # type: ignore[union-attr]
    store.update_attempt_state(aid, JobState.RUNNING, nodes=["n1", "n2"], started_at=T0)
    running = store.latest_attempt(jid)
    assert running is not None
    assert (running.intent, running.state, running.nodes) == (
        Intent.CONFIRMED,
        JobState.RUNNING,
        ("n1", "n2"),
    )

    store.update_attempt_state(aid, JobState.FAILED, exit_code=1, ended_at=T0 + timedelta(hours=1))
    assert store.live_attempts() == []
    ended = store.latest_attempt(jid)
    assert ended is not None and (ended.exit_code, ended.nodes) == (1, ("n1", "n2"))


def test_the_same_attempt_or_tag_cannot_be_recorded_twice(store: SQLiteStore) -> None:
    """(job, attempt number) and the sbatch tag are unique: two monitors cannot both submit attempt 2."""
    _, jid = _job(store)
    store.record_intent(jid, 1, "tag-a", now=T0)
    with pytest.raises(DuplicateAttempt):
        store.record_intent(jid, 1, "tag-b", now=T0)
    with pytest.raises(DuplicateAttempt):
        store.record_intent(jid, 2, "tag-a", now=T0)
    assert store.next_attempt_no(jid) == 2


def test_a_resumed_monitor_adopts_or_abandons_unconfirmed_intents(store: SQLiteStore) -> None:
    """An intent whose tag Slurm knows is adopted by id; one Slurm never saw is abandoned, not live."""
    sid, jid = _job(store)
    adopted = store.record_intent(jid, 1, "tag-1", now=T0)
    lost = store.record_intent(jid, 2, "tag-2", now=T0)
    assert {a.submit_tag for a in store.pending_intents(sid)} == {"tag-1", "tag-2"}
    store.confirm_submitted(store.find_attempt_by_tag("tag-1").id, "77", now=T0)  # type: ignore[union-attr]
    store.abandon_intent(lost, now=T0)
    assert store.pending_intents(sid) == []
    assert [a.id for a in store.live_attempts()] == [adopted]
    assert store.next_attempt_no(jid) == 3


def test_live_attempts_span_all_sessions(store: SQLiteStore) -> None:
    """One squeue serves every session: live_attempts is not filtered by session."""
    for name in ("a", "b"):
        _, jid = _job(store, session=name)
        aid = store.record_intent(jid, 1, f"tag-{name}", now=T0)
        store.confirm_submitted(aid, f"id-{name}", now=T0)
    assert sorted(a.executor_job_id or "" for a in store.live_attempts()) == ["id-a", "id-b"]


def test_second_monitor_is_refused_with_the_holder_named(store: SQLiteStore) -> None:
    """The error names the pid and host holding the session; the holder itself may re-acquire."""
    sid, _ = _job(store, session="exp1")
    store.acquire_monitor_lock_or_raise(sid, pid=100, host="login1", now=T0, stale_after_s=60)
    assert store.acquire_monitor_lock(sid, pid=100, host="login1", now=T0, stale_after_s=60)
    with pytest.raises(
        MonitorLockHeld, match=r"'exp1' is already monitored by pid 100 on host login1"
    ) as err:
        store.acquire_monitor_lock_or_raise(sid, pid=200, host="login2", now=T0, stale_after_s=60)
    assert isinstance(err.value, UserError)


@pytest.mark.parametrize(
    ("pid", "host", "dead_pid", "age_s", "granted"),
    [
        (200, "login1", None, 59, False),  # fresh heartbeat: held
        (200, "login1", None, 61, True),  # stale heartbeat: taken over
        (200, "login1", 100, 0, True),  # holder checked dead on this host
        (200, "login2", 100, 0, False),  # a pid on another host cannot be checked from here
        (200, "login1", 999, 0, False),  # some other dead pid is not the holder
    ],
)
def test_lock_is_free_when_stale_or_holder_dead(
    store: SQLiteStore, pid: int, host: str, dead_pid: int | None, age_s: float, granted: bool
) -> None:
    """Free means: nobody, a stale heartbeat, or a holder pid the caller found dead on the same host."""
    sid, _ = _job(store)
    assert store.acquire_monitor_lock(sid, pid=100, host="login1", now=T0, stale_after_s=60)
    later = T0 + timedelta(seconds=age_s)
    assert (
        store.acquire_monitor_lock(sid, pid=pid, host=host, now=later, stale_after_s=60, dead_pid=dead_pid)
        is granted
    )


def test_heartbeat_and_release_only_act_for_the_holder(store: SQLiteStore) -> None:
    """A monitor whose lock was taken over learns it from heartbeat() and cannot release the new holder's lock."""
    sid, _ = _job(store)
    store.acquire_monitor_lock(sid, pid=1, host="h", now=T0, stale_after_s=60)
    assert store.heartbeat(sid, pid=1, host="h", now=T0 + timedelta(seconds=30))
    assert not store.acquire_monitor_lock(
        sid, pid=2, host="h", now=T0 + timedelta(seconds=80), stale_after_s=60
    )
    assert store.acquire_monitor_lock(sid, pid=2, host="h", now=T0 + timedelta(seconds=91), stale_after_s=60)
    assert not store.heartbeat(sid, pid=1, host="h", now=T0 + timedelta(seconds=92))
    store.release_monitor_lock(sid, pid=1, host="h")
    assert store.get_session(sid).monitor_pid == 2  # type: ignore[union-attr]
    store.release_monitor_lock(sid, pid=2, host="h")
    assert store.get_session(sid).monitor_pid is None  # type: ignore[union-attr]


def test_naive_and_aware_times_compare_as_utc(store: SQLiteStore) -> None:
    """A naive `now` is UTC: staleness is computed the same either way."""
    sid, _ = _job(store)
    store.acquire_monitor_lock(sid, pid=1, host="h", now=T0, stale_after_s=60)
    naive_later = (T0 + timedelta(seconds=61)).replace(tzinfo=None)
    assert store.acquire_monitor_lock(sid, pid=2, host="h", now=naive_later, stale_after_s=60)
    assert store.get_session(sid).monitor_heartbeat == T0 + timedelta(seconds=61)  # type: ignore[union-attr]


def test_sessions_and_jobs_are_found_by_name_key_or_id(store: SQLiteStore) -> None:
    """What a user types after `autoexp status` (key, name or number) finds the job."""
    sid, jid = _job(store, session="exp", key="lr=0.1")
    with pytest.raises(UserError, match="already exists"):
        store.create_session("exp", config_path="x", config={}, now=T0)
    assert store.find_session("exp").id == sid  # type: ignore[union-attr]
    assert [s.name for s in store.list_sessions()] == ["exp"]
    for ref in ("lr=0.1", "exp-lr=0.1", str(jid)):
        assert store.find_job(sid, ref).id == jid  # type: ignore[union-attr]
    assert store.find_job(sid, "nope") is None
    assert store.get_job(jid).plan == {"script": "a.sbatch"}  # type: ignore[union-attr]
    with pytest.raises(StoreError):
        store.add_job(sid, job_key="lr=0.1", name="dup", plan={}, now=T0)


def _restart(store: SQLiteStore, jid: int, error_type: str | None, kind: str = "crash") -> None:
    evidence = {"rule": "r", "kind": kind, "error_type": error_type}
    store.record_decision(jid, attempt_id=None, action="restart", reason="r", now=T0, evidence=evidence)


def test_job_status_and_restart_counters(store: SQLiteStore) -> None:
    """Restarts are counted from the restart decisions alone, per cause and in total (other actions
    count nothing); a status carries the reason a user reads."""
    sid, jid = _job(store)
    _restart(store, jid, "oom")
    _restart(store, jid, "oom")
    _restart(store, jid, "nccl_timeout")
    _restart(store, jid, None, kind="cancelled")
    store.record_decision(
        jid, attempt_id=None, action="stop", reason="s", now=T0, evidence={"error_type": "oom"}
    )
    store.set_job_status(jid, JobStatus.STOPPED, "oom budget spent: 2/2 restarts")
    job = store.jobs_for_session(sid)[0]
    assert (job.restart_count, job.restart_counts) == (4, {"oom": 2, "nccl_timeout": 1, "cancelled": 1})
    assert store.get_job(jid) == job and store.find_job(sid, job.job_key) == job
    assert (job.status, job.status_reason) == ("stopped", "oom budget spent: 2/2 restarts")
    with pytest.raises(ValueError):
        store.set_job_status(jid, "finished")


def test_signals_and_decisions_round_trip(store: SQLiteStore) -> None:
    """Classified lines and policy decisions come back as recorded, in order."""
    sid, jid = _job(store)
    aid = store.record_intent(jid, 1, "t", now=T0)
    sig = NewSignal(
        "cuda_oom", "oom", "cuda", "root", 120, "torch.OutOfMemoryError: ...", T0, ("before", "after")
    )
    info = NewSignal("iteration", None, "megatron", "progress", 121, "iteration 5/100", T0)
    ids = store.record_signals(aid, [sig, info])
    assert [s.id for s in store.signals_for_attempt(aid)] == ids
    first = store.signals_for_attempt(aid)[0]
    assert (first.error_type, first.line_no, first.evidence) == ("oom", 120, ("before", "after"))
    store.set_last_iteration(aid, 5)
    assert store.latest_attempt(jid).last_iteration == 5  # type: ignore[union-attr]

    store.record_decision(
        jid, attempt_id=aid, action="restart", reason="oom 1/3", now=T0, budget_before=3, budget_after=2,
        evidence={"signal_ids": ids},
    )  # fmt: skip
    store.record_decision(jid, attempt_id=None, action="stop", reason="budget spent", now=T0)
    decisions = store.decisions_for_job(jid)
    assert [(d.action, d.budget_before, d.budget_after) for d in decisions] == [
        ("restart", 3, 2),
        ("stop", None, None),
    ]
    assert decisions[0].evidence == {"signal_ids": ids}
    assert store.decisions_for_session(sid) == decisions


def test_log_offsets_are_saved_per_path(store: SQLiteStore) -> None:
    """The tailer's offsets: one row per path, overwritten, with the inode they belong to."""
    assert store.load_offset("/logs/a") is None
    store.save_offset("/logs/a", 11, 100)
    store.save_offset("/logs/a", 12, 5)
    assert store.load_offset("/logs/a") == (12, 5)


def test_snapshot_file_is_replaced_atomically(store: SQLiteStore, tmp_path: Path) -> None:
    """monitor_state.json is valid JSON with jobs, attempts and reasons; no temp file is left behind."""
    _, jid = _job(store)
    aid = store.record_intent(jid, 1, "t", now=T0)
    store.confirm_submitted(aid, "55", now=T0)
    store.record_decision(jid, attempt_id=aid, action="restart", reason="node failure", now=T0)
    path = tmp_path / ".oellm_state" / SNAPSHOT_FILENAME
    for _ in range(2):  # the second write replaces the first
        write_snapshot(store, path, now=T0)
    job = json.loads(path.read_text())["sessions"][0]["jobs"][0]
    assert job["attempts"][0]["job_id"] == "55"
    assert job["decisions"][0]["reason"] == "node failure"
    assert sorted(p.name for p in path.parent.iterdir() if "monitor_state" in p.name) == [SNAPSHOT_FILENAME]


WRITER = textwrap.dedent(
    """
    import sys
    from datetime import UTC, datetime
    from pathlib import Path
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
    now = datetime.now(UTC)
    with SQLiteStore(Path(sys.argv[1])) as store:
        for i in range(int(sys.argv[3])):
            store.record_decision(int(sys.argv[2]), attempt_id=None, action="wait", reason=str(i), now=now)
    """
)


def test_two_processes_write_and_read_the_same_file(store: SQLiteStore, tmp_path: Path) -> None:
    """WAL + busy timeout: a second process writes while this one reads and writes; nothing is lost."""
    _, jid = _job(store)
    n = 200
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / ".oellm_state"), str(jid), str(n)])
    try:
        reads = 0
        while child.poll() is None:
            store.decisions_for_job(jid)
            _restart(store, jid, "reader")
            reads += 1
    finally:
        assert child.wait(timeout=60) == 0
    assert len(store.decisions_for_job(jid)) == n + reads
    assert store.get_job(jid).restart_count == reads  # type: ignore[union-attr]


RACER = textwrap.dedent(
    """
    import sys, time
    from datetime import UTC, datetime
    from pathlib import Path
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
    with SQLiteStore(Path(sys.argv[1])) as store:
        start = float(sys.argv[3])
        while time.time() < start:
            time.sleep(0.001)
        won = store.acquire_monitor_lock(int(sys.argv[2]), pid=int(sys.argv[4]), host="h",
                                         now=datetime.now(UTC), stale_after_s=600)
    print("won" if won else "lost")
    """
)


def test_only_one_of_many_racing_monitors_gets_the_lock(store: SQLiteStore, tmp_path: Path) -> None:
    """Processes started together all try to take a free lock: exactly one succeeds."""
    import time

    sid, _ = _job(store)
    start = time.time() + 2.0  # every child is up and connected before they race
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RACER,
                str(tmp_path / ".oellm_state"),
                str(sid),
                str(start),
                str(1000 + i),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    results = [c.communicate(timeout=60)[0].strip() for c in children]
    assert sorted(results) == ["lost"] * 5 + ["won"]
    holder = store.get_session(sid)
    assert holder is not None and results[holder.monitor_pid - 1000] == "won"  # type: ignore[operator]


def test_close_releases_every_connection(tmp_path: Path) -> None:
    """After close() no file descriptor points at the database, its WAL or its shared-memory file."""
    store = SQLiteStore(tmp_path / ".oellm_state")
    _job(store)
    store.jobs_for_session(1)
    assert open_db_fds(tmp_path) != []  # the pool keeps a connection while open
    store.close()
    assert open_db_fds(tmp_path) == []


@pytest.mark.parametrize("returning", [True, False], ids=["insert-returning", "sqlite-before-3.35"])
def test_timing_record_rows_are_added_extended_and_read_back_in_order(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, returning: bool
) -> None:
    """`save_log_reads` adds rows, or extends the rows it names, and saves the consumed offset of
    each log's newest read, all in one call; rows come back in read order, with their attempt.
    The same with multi-row INSERT ... RETURNING and without it (older SQLite: a row at a time)."""
    dialect = store._engine.dialect
    monkeypatch.setattr(dialect, "insert_executemany_returning_sort_by_parameter_order", returning)
    _, jid = _job(store)
    aid = store.record_intent(jid, 1, "tag-1", now=T0, log_path="/logs/x.out")
    first, second = store.save_log_reads([
        LogReadWrite(aid, None, 0, 100, T0),
        LogReadWrite(aid, None, 100, 120, T0 + timedelta(seconds=2), consumed=("/logs/x.out", 7)),
    ])  # fmt: skip
    assert second == first + 1
    assert store.load_offset("/logs/x.out") == (7, 120)
    assert store.save_log_reads([
        LogReadWrite(aid, second, 100, 180, T0 + timedelta(seconds=3)),
        LogReadWrite(aid, None, 180, 250, T0 + timedelta(seconds=9), consumed=("/logs/x.out", 7)),
    ]) == [second, second + 1]  # fmt: skip
    assert store.load_offset("/logs/x.out") == (7, 250)
    rows = store.log_reads_for_attempt(aid)
    assert [(r.start_offset, r.end_offset, r.read_at) for r in rows] == [
        (0, 100, T0),
        (100, 180, T0 + timedelta(seconds=2)),  # extending keeps the row's first read time
        (180, 250, T0 + timedelta(seconds=9)),
    ]
    assert store.log_reads_for_attempt(aid + 1) == []
