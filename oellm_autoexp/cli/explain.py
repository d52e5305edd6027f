"""`autoexp explain JOB [--session S]`: every decision about a job, with the log lines it rested on.

It only reads, through sqlite3 (adapters/store/reader.py), as `status` does.
"""

from __future__ import annotations

import argparse

from oellm_autoexp.cli._sessions import find_job, find_session, latest_session, open_reader
from oellm_autoexp.cli._views import explain_lines


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    explain = subparsers.add_parser("explain", help="every decision about a job, with its evidence")
    explain.add_argument("job", help="job name, key or id")
    explain.add_argument("--session", help="session id or name (default: the latest)")
    explain.set_defaults(func=explain_command)


def explain_command(args: argparse.Namespace) -> int:
    store, _ = open_reader(args)
    with store:
        session = find_session(store, args.session) if args.session else latest_session(store)
        job = find_job(store, session, args.job)
        print("\n".join(explain_lines(job, store.attempts_for_job(job.id), store.decisions_for_job(job.id))))
    return 0
