"""`autoexp cancel [JOB...] [--session S]`: stop jobs for good (a plain scancel is restarted)."""

from __future__ import annotations

import argparse

from oellm_autoexp.adapters.executors.base import Executor, ExecutorError
from oellm_autoexp.adapters.store.sqlite_store import JobStatus
from oellm_autoexp.cli._sessions import find_job, find_session, latest_session, open_store
from oellm_autoexp.core.jobs.job_state import is_alive
from oellm_autoexp.core.jobs.strays import attempt_tag
from oellm_autoexp.daemon.session import job_runtime
from oellm_autoexp.daemon.successor import unended, write_stop_file


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
            # Then its stop file: a queued successor that Slurm starts anyway exits without training.
            write_stop_file(state, job.id, "Cancelled by user (autoexp cancel)")
            executor = job_runtime(job, state).executor
            # The running attempt and its queued successor, then every other live job carrying one
            # of the job's recorded tags (a fenced-off monitor's submission, a stray the monitor did not see).
            ids = [a.executor_job_id for a in unended(store, job.id) if a.executor_job_id]
            tags = {a.submit_tag for a in store.attempts_for_job(job.id)}
            ids += [i for i in tagged_jobs_of(executor, tags) if i not in ids]
            for job_id in ids:
                try:
                    executor.cancel(job_id)
                except ExecutorError as exc:
                    print(f"warning: cancelling job {job_id} failed: {exc}")
            shown = ", ".join(f"job {i}" for i in ids)
            print(f"cancelled {job.name}" + (f" ({shown})" if ids else ""))
    return 0


def tagged_jobs_of(executor: Executor, tags: set[str]) -> list[str]:
    """Every live job in the queue that carries one of `tags` (a job's recorded submit tags), whatever
    attempt: a job submitted by a monitor that was then fenced off (its intent, with the tag, is
    recorded before its sbatch), a stray the monitor did not see.

    Only recorded tags, as for the monitor's stray net (core/jobs/strays.py): session and job numbers
    are per state dir, so a queued `autoexp-1-1-...` may be another experiment's; matching the numbers
    cancelled the running jobs of every other state dir's session 1 job 1 of the user.
    """
    try:
        _, tagged = executor.query_tagged([])
    except ExecutorError as exc:
        print(f"warning: could not list the session's jobs in the queue: {exc}")
        return []
    return [t.executor_id for t in tagged if is_alive(t.state) and attempt_tag(t.tag) in tags]
