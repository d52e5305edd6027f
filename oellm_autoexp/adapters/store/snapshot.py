"""`.oellm_state/monitor_state.json`: what the monitor knows, for `jq` and for humans.

`build_snapshot` is pure (records in, dict out); `write_snapshot` reads the
store and replaces the file atomically, so a reader never sees half a file:
write a temp file in the same directory, fsync it, os.replace, fsync the dir.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from oellm_autoexp.adapters.fs.atomic_file import write_json_atomic
from oellm_autoexp.adapters.store.sqlite_store import (
    AttemptInfo,
    DecisionInfo,
    JobInfo,
    SessionInfo,
    SQLiteStore,
)

SNAPSHOT_FILENAME = "monitor_state.json"
SNAPSHOT_FORMAT = 1  # bump when a key is renamed or removed
MAX_DECISIONS_PER_JOB = 50  # the newest ones; older ones stay in the database


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _attempt(a: AttemptInfo) -> dict[str, Any]:
    return {
        "id": a.id,
        "attempt": a.attempt_no,
        "job_id": a.executor_job_id,
        "tag": a.submit_tag,
        "intent": a.intent,
        "state": a.state.value,
        "exit_code": a.exit_code,
        "nodes": list(a.nodes),
        "submitted_at": _iso(a.submitted_at),
        "started_at": _iso(a.started_at),
        "ended_at": _iso(a.ended_at),
        "log": a.log_path,
        "last_iteration": a.last_iteration,
    }


def _decision(d: DecisionInfo) -> dict[str, Any]:
    return {
        "at": _iso(d.decided_at),
        "action": d.action,
        "reason": d.reason,
        "budget_before": d.budget_before,
        "budget_after": d.budget_after,
        "attempt_id": d.attempt_id,
    }


def _job(j: JobInfo, attempts: Sequence[AttemptInfo], decisions: Sequence[DecisionInfo]) -> dict[str, Any]:
    kept = decisions[-MAX_DECISIONS_PER_JOB:]
    return {
        "id": j.id,
        "key": j.job_key,
        "name": j.name,
        "status": j.status,
        "status_reason": j.status_reason,
        "restarts": j.restart_count,
        "restarts_by_reason": dict(j.restart_counts),
        "attempts": [_attempt(a) for a in attempts],
        "decisions": [_decision(d) for d in kept],
        "decisions_omitted": len(decisions) - len(kept),
    }


def _monitor(s: SessionInfo) -> dict[str, Any] | None:
    if s.monitor_pid is None:
        return None
    return {"pid": s.monitor_pid, "host": s.monitor_host, "heartbeat": _iso(s.monitor_heartbeat)}


def _by(items: Iterable[Any], key: str) -> dict[int, list[Any]]:
    grouped: dict[int, list[Any]] = defaultdict(list)
    for item in items:
        grouped[getattr(item, key)].append(item)
    return grouped


def build_snapshot(
    sessions: Sequence[SessionInfo],
    jobs: Sequence[JobInfo],
    attempts: Sequence[AttemptInfo],
    decisions: Sequence[DecisionInfo],
    *,
    now: datetime,
) -> dict[str, Any]:
    """Nest sessions > jobs > attempts and decisions, in id order, as plain JSON types."""
    jobs_by_session = _by(sorted(jobs, key=lambda j: j.id), "session_id")
    attempts_by_job = _by(sorted(attempts, key=lambda a: (a.attempt_no, a.id)), "job_id")
    decisions_by_job = _by(sorted(decisions, key=lambda d: d.id), "job_id")
    return {
        "format": SNAPSHOT_FORMAT,
        "written_at": now.isoformat(),
        "sessions": [
            {
                "id": s.id,
                "name": s.name,
                "status": s.status,
                "config": s.config_path,
                "created_at": _iso(s.created_at),
                "monitor": _monitor(s),
                "jobs": [
                    _job(j, attempts_by_job[j.id], decisions_by_job[j.id]) for j in jobs_by_session[s.id]
                ],
            }
            for s in sorted(sessions, key=lambda s: s.id)
        ],
    }


def write_snapshot(store: SQLiteStore, path: Path, *, now: datetime) -> dict[str, Any]:
    """Read every session from the store and write the snapshot to `path`; returns it."""
    sessions = store.list_sessions()
    jobs, attempts, decisions = [], [], []
    for s in sessions:
        jobs += store.jobs_for_session(s.id, with_plan=False)  # the snapshot shows no plan
        attempts += store.attempts_for_session(s.id)
        decisions += store.decisions_for_session(s.id)
    snapshot = build_snapshot(sessions, jobs, attempts, decisions, now=now)
    # One line: with 1,000 jobs the indented form took the pure-Python encoder ~0.2 s per write,
    # every few seconds while jobs change state (`jq .` shows it indented).
    write_json_atomic(path, snapshot, indent=None)
    return snapshot
