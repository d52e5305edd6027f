"""`autoexp sessions [--json]`: every session of the state dir, with who watches it.

It only reads, through sqlite3 (adapters/store/reader.py), as `status` does.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from oellm_autoexp.adapters.store.vocab import SessionStatus
from oellm_autoexp.cli._sessions import open_reader
from oellm_autoexp.cli._views import render_table
from oellm_autoexp.core.jobs.job_status import session_word

if TYPE_CHECKING:
    from oellm_autoexp.adapters.store.records import SessionInfo
    from oellm_autoexp.daemon.session_lock import Liveness


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sessions = subparsers.add_parser("sessions", help="list sessions")
    sessions.add_argument("--json", action="store_true")
    sessions.set_defaults(func=sessions_command)


def monitor_word(session: SessionInfo, live: Liveness) -> str:
    """One cell: `alive (...)`, or for an active session nobody watches, since when."""
    if live.alive:
        return f"alive ({live.detail})"
    if session.status != SessionStatus.ACTIVE.value:
        return "-"
    return f"NOT RUNNING ({live.detail})"


def sessions_command(args: argparse.Namespace) -> int:
    from oellm_autoexp.daemon.session_lock import monitor_liveness

    store, _ = open_reader(args)
    now = datetime.now(UTC)
    with store:
        rows = [
            {"id": s.id, "name": s.name, "status": session_word(s.status, [j.status for j in jobs]),
             "created": f"{s.created_at:%Y-%m-%d %H:%M:%S}", "jobs": len(jobs), "monitor_pid": s.monitor_pid,
             "monitor": monitor_word(s, monitor_liveness(s, now))}
            for s in store.list_sessions()
            for jobs in [store.jobs_for_session(s.id, with_plan=False)]
        ]  # fmt: skip
    print(
        json.dumps(rows, indent=2)
        if args.json
        else render_table(rows, ("id", "name", "status", "created", "jobs", "monitor_pid", "monitor"))
    )
    return 0
