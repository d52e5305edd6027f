"""`autoexp status [SESSION] [--json]`, `autoexp sessions`, `autoexp explain JOB`."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from oellm_autoexp.adapters.store.sqlite_store import SessionInfo, SessionStatus, SQLiteStore
from oellm_autoexp.cli._sessions import find_job, find_session, latest_session, open_store, resume_command
from oellm_autoexp.cli._strategy_views import ATTEMPT_COLUMNS, attempt_strategy_rows, elapsed_lines
from oellm_autoexp.cli._views import exclusion_lines, explain_lines, job_row, render_table
from oellm_autoexp.daemon.session_lock import Liveness, monitor_liveness
from oellm_autoexp.daemon.successor import shown_attempt

STATUS_COLUMNS = (
    "job",
    "status",
    "attempt",
    "slurm_id",
    "state",
    "last_signal",
    "budget_left",
    "last_decision",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = subparsers.add_parser("status", help="jobs of a session: attempt, state, last signal, budget")
    status.add_argument("session", nargs="?", help="session id or name (default: the latest)")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=status_command)
    sessions = subparsers.add_parser("sessions", help="list sessions")
    sessions.add_argument("--json", action="store_true")
    sessions.set_defaults(func=sessions_command)
    explain = subparsers.add_parser("explain", help="every decision about a job, with its evidence")
    explain.add_argument("job", help="job name, key or id")
    explain.add_argument("--session", help="session id or name (default: the latest)")
    explain.set_defaults(func=explain_command)


def status_rows(store: SQLiteStore, session: SessionInfo) -> list[dict[str, object]]:
    rows = []
    for job in store.jobs_for_session(session.id):
        decisions = store.decisions_for_job(job.id)
        latest = shown_attempt(store, job.id, decisions)  # not its queued successor
        signals = store.signals_for_attempt(latest.id) if latest else []
        causes = [s for s in signals if s.role in ("root", "cascade")]
        last_signal = (causes or signals)[-1] if (causes or signals) else None
        rows.append(job_row(job, latest, last_signal, decisions))
    return rows


def status_command(args: argparse.Namespace) -> int:
    store, state = open_store(args, read_only=True)
    with store:
        session = find_session(store, args.session) if args.session else latest_session(store)
        rows = status_rows(store, session)
        live = monitor_liveness(session, datetime.now(UTC))
        resume = resume_command(state, [session.id])
        now = datetime.now(UTC)
        excluded = [e for job in store.jobs_for_session(session.id) for e in store.exclusions_for_job(job.id)
                    if e.is_active(now)]  # fmt: skip
        if args.json:
            since = live.unsupervised_since.isoformat() if live.unsupervised_since else None
            monitor = {"alive": live.alive, "detail": live.detail, "heartbeat_age_s": live.heartbeat_age_s,
                       "host": session.monitor_host, "slurm_job": session.monitor_job,
                       "heartbeat_interval_s": session.monitor_interval_s, "unsupervised_since": since}  # fmt: skip
            print(json.dumps({"session": session.id, "name": session.name, "status": session.status,
                              "monitor": monitor, "jobs": rows,
                              "exclusions": [e.to_record() for e in excluded]}, indent=2))  # fmt: skip
        else:
            print(f"session {session.id} ({session.name}): {session.status}")
            print(monitor_line(session, live, resume))
            print(render_table(rows, STATUS_COLUMNS))
            strategy_rows = attempt_strategy_rows(store, session.id)
            if strategy_rows:
                print("allocation strategies:")
                print(render_table(strategy_rows, ATTEMPT_COLUMNS))
            for line in elapsed_lines(store, session.id):
                print(line)
            if excluded:
                print("excluded nodes:")
                print("\n".join(exclusion_lines(excluded, now)))
    return 0


def monitor_line(session: SessionInfo, live: Liveness, resume: str) -> str:
    """`monitor: alive (...)`, or for an active session nobody watches, the command that resumes it."""
    if live.alive:
        return f"monitor: alive ({live.detail})"
    if session.status != SessionStatus.ACTIVE.value:
        return f"monitor: not running ({live.detail})"
    return f"monitor: NOT RUNNING ({live.detail}); its jobs are not watched. Resume with: {resume}"


def monitor_word(session: SessionInfo, live: Liveness) -> str:
    """One cell: `alive (...)`, or for an active session nobody watches, since when."""
    if live.alive:
        return f"alive ({live.detail})"
    if session.status != SessionStatus.ACTIVE.value:
        return "-"
    return f"NOT RUNNING ({live.detail})"


def sessions_command(args: argparse.Namespace) -> int:
    store, _ = open_store(args, read_only=True)
    with store:
        now = datetime.now(UTC)
        rows = [
            {"id": s.id, "name": s.name, "status": s.status, "created": f"{s.created_at:%Y-%m-%d %H:%M:%S}",
             "jobs": len(store.jobs_for_session(s.id)), "monitor_pid": s.monitor_pid,
             "monitor": monitor_word(s, monitor_liveness(s, now))}
            for s in store.list_sessions()
        ]  # fmt: skip
    print(
        json.dumps(rows, indent=2)
        if args.json
        else render_table(rows, ("id", "name", "status", "created", "jobs", "monitor_pid", "monitor"))
    )
    return 0


def explain_command(args: argparse.Namespace) -> int:
    store, _ = open_store(args, read_only=True)
    with store:
        session = find_session(store, args.session) if args.session else latest_session(store)
        job = find_job(store, session, args.job)
        print("\n".join(explain_lines(job, store.attempts_for_job(job.id), store.decisions_for_job(job.id))))
    return 0
