"""`autoexp run CONFIG [overrides]`: submit, then follow the jobs until they end.

Until the monitor (daemon/) lands, following means polling the executor and
reporting each job's end state; `wait_for_jobs` is the one place to swap for it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from oellm_autoexp.adapters.executor import Executor, ExecutorError
from oellm_autoexp.cli.submit import add_submit_args, submit_all
from oellm_autoexp.core.job_record import JobRecord
from oellm_autoexp.core.job_state import JobState, is_terminal
from oellm_autoexp.core.plan import JobPlan, log_path_for

POLL_S = {"slurm": 5.0, "local": 1.0}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("run", help="submit every job, then wait and report how each ended")
    add_submit_args(parser)
    parser.add_argument("--poll-s", type=float, default=None, help="seconds between polls")
    parser.add_argument("--timeout-s", type=float, default=None, help="stop waiting after this long")
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    executor, submitted = submit_all(args)
    poll_s = args.poll_s or POLL_S.get(executor.name, 5.0)
    final = wait_for_jobs(executor, [job_id for _, job_id in submitted], poll_s, args.timeout_s)
    for plan, job_id in submitted:
        print(describe_end(plan, final[job_id]))
    return 0 if all(r.state is JobState.COMPLETED for r in final.values()) else 1


def wait_for_jobs(
    executor: Executor, job_ids: Sequence[str], poll_s: float, timeout_s: float | None = None
) -> dict[str, JobRecord]:
    """Poll until every job is terminal (or the timeout); print each state change once."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    last: dict[str, JobRecord] = {}
    while True:
        try:
            seen = executor.query(job_ids)
        except ExecutorError as exc:
            # No information this poll; a flaky controller is never a failed job.
            print(f"warning: {exc}; retrying", flush=True)
            seen = {}
        for job_id, record in seen.items():
            if job_id not in last or last[job_id].state != record.state:
                print(f"job {job_id}: {record.state.value}", flush=True)
            last[job_id] = record
        if len(last) == len(job_ids) and all(is_terminal(r.state) for r in last.values()):
            return last
        if deadline is not None and time.monotonic() > deadline:
            return {i: last.get(i) or JobRecord(i, JobState.UNKNOWN, "none") for i in job_ids}
        time.sleep(poll_s)


def describe_end(plan: JobPlan, record: JobRecord) -> str:
    how = f"exit code {record.exit_code}" if record.exit_code is not None else "no exit code"
    if record.signal:
        how += f", signal {record.signal}"
    return f"{plan.name} (job {record.job_id}): {record.state.value}, {how}; log {log_path_for(plan, record.job_id)}"
