"""`autoexp status [SESSION] [--json]`: a session's jobs, one row each.

It only reads: the store through sqlite3 (adapters/store/reader.py), no ORM, no config models
(`sessions` and `explain` have modules of their own, so that each builds only its own parser).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from oellm_autoexp.adapters.store.vocab import SessionStatus
from oellm_autoexp.cli._sessions import find_session, latest_session, open_reader, resume_command
from oellm_autoexp.cli._views import exclusion_lines, job_row, pick_signal, render_table
from oellm_autoexp.core.jobs.job_status import jobs_by_status, session_word

if TYPE_CHECKING:
    from oellm_autoexp.adapters.store.reader import StoreReader
    from oellm_autoexp.adapters.store.records import (
        AttemptInfo,
        DecisionInfo,
        JobInfo,
        SessionInfo,
        SignalInfo,
    )
    from oellm_autoexp.daemon.session_lock import Liveness

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


def status_rows(store: StoreReader, session: SessionInfo) -> list[dict[str, object]]:
    """One row per job (`status`, and `autoexp run`'s live view), in four queries for the whole
    session, whatever its size: each job's shown attempt, the decisions its row reads, those
    attempts' signals, the jobs."""
    shown = store.shown_attempts(session.id)
    ids = [a.id for a in shown.values()]
    decisions = store.status_decisions(session.id, ids)
    signals = store.signals_for_attempts(ids)
    return rows_of(store.jobs_for_session(session.id, with_plan=False), shown, decisions, signals)


def rows_of(
    jobs: Sequence[JobInfo],
    shown: Mapping[int, AttemptInfo],
    decisions: Sequence[DecisionInfo],
    signals: Mapping[int, Sequence[SignalInfo]],
) -> list[dict[str, object]]:
    """The rows: per job, the attempt shown (job id ->), its signals (attempt id ->) and the job's
    decisions (at least those `job_row` reads: its last, its last with a budget, those about the
    attempt shown)."""
    by_job: dict[int, list[DecisionInfo]] = {}
    for decision in decisions:
        by_job.setdefault(decision.job_id, []).append(decision)
    rows = []
    for job in jobs:
        last = shown.get(job.id)
        signal = pick_signal(signals.get(last.id, ())) if last else None
        rows.append(job_row(job, last, signal, by_job.get(job.id, [])))
    return rows


def status_command(args: argparse.Namespace) -> int:
    # Here, not at the top: `sessions` and `explain` (same module) start without them.
    from oellm_autoexp.cli._attempt_views import ATTEMPT_COLUMNS, attempt_strategy_rows, elapsed_lines
    from oellm_autoexp.daemon.session_lock import monitor_liveness

    store, state = open_reader(args)
    with store:
        session = find_session(store, args.session) if args.session else latest_session(store)
        rows = status_rows(store, session)
        word = session_word(session.status, (str(r["status"]) for r in rows))
        live = monitor_liveness(session, datetime.now(UTC))
        resume = resume_command(state, [session.id])
        now = datetime.now(UTC)
        excluded = [e for e in store.exclusions_for_session(session.id) if e.is_active(now)]
        if args.json:
            since = live.unsupervised_since.isoformat() if live.unsupervised_since else None
            monitor = {"alive": live.alive, "detail": live.detail, "heartbeat_age_s": live.heartbeat_age_s,
                       "host": session.monitor_host, "slurm_job": session.monitor_job,
                       "heartbeat_interval_s": session.monitor_interval_s, "unsupervised_since": since}  # fmt: skip
            print(json.dumps({"session": session.id, "name": session.name, "status": word,
                              "monitor": monitor, "jobs": rows,
                              "exclusions": [e.to_record() for e in excluded]}, indent=2))  # fmt: skip
        else:
            counts = jobs_by_status(str(r["status"]) for r in rows)
            print(f"session {session.id} ({session.name}): {word}" + (f" (jobs: {counts})" if counts else ""))
            print(monitor_line(session, live, resume))
            print(render_table(rows, STATUS_COLUMNS))
            strategy_rows = attempt_strategy_rows(store, session.id)
            if strategy_rows:
                print("allocation strategies:")
                print(render_table(strategy_rows, ATTEMPT_COLUMNS))
            for line in elapsed_lines(store, session.id, now):
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
