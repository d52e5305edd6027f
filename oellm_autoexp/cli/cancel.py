"""`autoexp cancel [JOB...] [--session S]`: stop jobs for good (a plain scancel is restarted)."""

from __future__ import annotations

import argparse

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.store.sqlite_store import JobStatus
from oellm_autoexp.cli._sessions import find_job, find_session, latest_session, open_store
from oellm_autoexp.daemon.session import job_runtime


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("cancel", help="cancel jobs for good: the monitor will not restart them")
    parser.add_argument("jobs", nargs="*", help="job names, keys or ids (default: every job of the session)")
    parser.add_argument("--session", help="session id or name (default: the latest)")
    parser.set_defaults(func=cancel_command, trailing="jobs")


def cancel_command(args: argparse.Namespace) -> int:
    store, state = open_store(args)
    with store:
        session = find_session(store, args.session) if args.session else latest_session(store)
        jobs = store.jobs_for_session(session.id)
        if args.jobs:
            jobs = [find_job(store, session, ref) for ref in args.jobs]
        for job in jobs:
            # The status is written first: a monitor that sees the CANCELLED end reads it and stops.
            store.set_job_status(
                job.id, JobStatus.CANCELLED_BY_USER.value, "Cancelled by user (autoexp cancel)"
            )
            latest = store.latest_attempt(job.id)
            if latest and latest.executor_job_id and latest.ended_at is None:
                try:
                    job_runtime(job, state).executor.cancel(latest.executor_job_id)
                except ExecutorError as exc:
                    print(f"warning: cancelling job {latest.executor_job_id} failed: {exc}")
            print(f"cancelled {job.name}" + (f" (job {latest.executor_job_id})" if latest else ""))
    return 0
