"""Building monitor_state.json from store records: pure, no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from oellm_autoexp.adapters.store.snapshot import MAX_DECISIONS_PER_JOB, build_snapshot
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, DecisionInfo, JobInfo, SessionInfo
from oellm_autoexp.core.jobs.job_state import JobState

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _session(sid: int, name: str, pid: int | None = None) -> SessionInfo:
    return SessionInfo(
        sid,
        name,
        f"{name}.yaml",
        {"big": "config"},
        T0,
        "active",
        pid,
        "login1" if pid else None,
        T0 if pid else None,
    )


def _job(jid: int, sid: int, restarts: dict[str, int] | None = None) -> JobInfo:
    counts = restarts or {}
    return JobInfo(
        jid,
        sid,
        f"k{jid}",
        f"job{jid}",
        {"script": "x.sbatch"},
        "active",
        "",
        sum(counts.values()),
        counts,
        T0,
    )


def _attempt(aid: int, jid: int, no: int, state: JobState) -> AttemptInfo:
    return AttemptInfo(
        aid,
        jid,
        no,
        f"tag{aid}",
        "confirmed",
        str(1000 + aid),
        ("n1",),
        T0,
        T0,
        T0,
        None,
        state,
        None,
        f"/logs/{aid}.out",
        42,
    )


def _decision(did: int, jid: int, reason: str) -> DecisionInfo:
    return DecisionInfo(did, jid, None, "restart", reason, 3, 2, ["line"], T0 + timedelta(minutes=did))


def test_snapshot_nests_jobs_attempts_and_restart_reasons_under_sessions() -> None:
    """Each session lists its jobs; each job its attempts (by number) and its decisions with reasons."""
    snap = build_snapshot(
        [_session(2, "b"), _session(1, "a", pid=77)],
        [_job(10, 1, {"oom": 1}), _job(20, 2)],
        [_attempt(101, 10, 2, JobState.RUNNING), _attempt(100, 10, 1, JobState.OUT_OF_MEMORY)],
        [_decision(1, 10, "oom: restart 1 of 3")],
        now=T0,
    )
    assert [s["name"] for s in snap["sessions"]] == ["a", "b"]
    a = snap["sessions"][0]
    assert a["monitor"] == {"pid": 77, "host": "login1", "heartbeat": T0.isoformat()}
    job = a["jobs"][0]
    assert [(x["attempt"], x["state"]) for x in job["attempts"]] == [(1, "OUT_OF_MEMORY"), (2, "RUNNING")]
    assert job["restarts_by_reason"] == {"oom": 1}
    assert job["decisions"][0]["reason"] == "oom: restart 1 of 3"
    assert snap["sessions"][1]["jobs"][0]["attempts"] == []
    assert snap["sessions"][1]["monitor"] is None


def test_snapshot_is_plain_json_without_the_composed_config() -> None:
    """Everything serialises with json.dumps; the (large) composed config stays in the database."""
    snap = build_snapshot(
        [_session(1, "a")], [_job(10, 1)], [_attempt(100, 10, 1, JobState.PENDING)], [], now=T0
    )
    text = json.dumps(snap)
    assert "big" not in text
    assert json.loads(text)["written_at"] == T0.isoformat()


def test_only_the_newest_decisions_are_kept_and_the_rest_counted() -> None:
    """A job restarted hundreds of times keeps the snapshot small; the count says what was left out."""
    decisions = [_decision(i, 10, f"r{i}") for i in range(1, MAX_DECISIONS_PER_JOB + 6)]
    job = build_snapshot([_session(1, "a")], [_job(10, 1)], [], decisions, now=T0)["sessions"][0]["jobs"][0]
    assert len(job["decisions"]) == MAX_DECISIONS_PER_JOB
    assert job["decisions"][-1]["reason"] == f"r{MAX_DECISIONS_PER_JOB + 5}"
    assert job["decisions_omitted"] == 5
