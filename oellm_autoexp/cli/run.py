"""`autoexp run CONFIG [overrides]`: submit every job, then monitor them in the foreground.

The monitor restarts and stops jobs by the experiment's restart policy and
prints one line per event; the exit code is 0 when every job completed.
Ctrl-C (or SIGTERM) stops monitoring, not the jobs: resume with
`autoexp monitor-session --session-id ID`. With `--supervisor slurm` (or
`monitoring.supervisor: slurm`) the monitor is a Slurm job of its own
(docs/supervision.md), and this command waits for the session to end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from oellm_autoexp.adapters.fs.state_dir import state_dir
from oellm_autoexp.adapters.store.reader import StoreReader
from oellm_autoexp.adapters.store.sqlite_store import JobStatus, SessionStatus, SQLiteStore
from oellm_autoexp.cli._live import LiveView
from oellm_autoexp.cli._metrics import add_metrics_args, metrics_observer
from oellm_autoexp.cli._views import cause_lines, render_table
from oellm_autoexp.cli.monitor_session import add_supervisor_arg, monitor_in_foreground
from oellm_autoexp.cli.status import STATUS_COLUMNS, status_rows
from oellm_autoexp.cli.submit import add_submit_args, submit_session
from oellm_autoexp.daemon.supervisor import ensure_monitor_job, session_settings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from oellm_autoexp.adapters.store.records import AttemptInfo, DecisionInfo, JobInfo
    from oellm_autoexp.daemon.metrics import MonitorMetrics  # optional dependency

TAIL_LINES = 5  # of each job's log, shown when the run ends
HEAD_LINES = 4  # of a restarted job's last attempt: how it resumed
WAIT_POLL_S = 2.0  # how often `run --supervisor slurm` reads the session's status


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run", help="submit every job, then monitor and restart them until they end"
    )
    add_submit_args(parser)
    add_supervisor_arg(parser)
    add_metrics_args(parser)
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """0 when every job completed; 1 when one did not, or its first submission was refused."""
    metrics = metrics_observer(args, None)  # listening (or refused) before anything is submitted
    try:
        return _submit_and_monitor(args, metrics)
    finally:
        if metrics is not None:
            metrics.close()


def _submit_and_monitor(args: argparse.Namespace, metrics: MonitorMetrics | None) -> int:
    store, session, failed = submit_session(args)
    if metrics is not None:
        metrics.store = store
    # The status table reads through the reader, as `autoexp status` does: one rule for the
    # attempt each row shows (StoreReader.shown_attempts).
    with store, StoreReader.beside(store) as reader:
        if len(failed) == len(store.jobs_for_session(session.id)):
            print(
                f"nothing could be submitted ({len(failed)} job(s) refused); not monitoring", file=sys.stderr
            )
            return 1
        settings = session_settings(store, session.id)
        if (args.supervisor or settings.supervisor) == "slurm":
            directory = state_dir(getattr(args, "state_dir", None))
            ensure_monitor_job(directory, session.id, settings.supervisor_slurm)
            code = wait_for_session(store, session.id)
            print(
                render_table(status_rows(reader, reader.get_session(session.id) or session), STATUS_COLUMNS)
            )
            return max(code, 1) if failed else code
        view = LiveView(lambda: render_table(status_rows(reader, session), STATUS_COLUMNS))
        code = monitor_in_foreground(
            store,
            state_dir(getattr(args, "state_dir", None)),
            [session.id],
            say=view.say,
            on_poll=view.redraw,
            observers=[metrics] if metrics else [],
        )
        print(render_table(status_rows(reader, reader.get_session(session.id) or session), STATUS_COLUMNS))
        for block in end_summary(reader, session.id):
            print(block)
        print(look_closer(session.id, [job.name for job in store.jobs_for_session(session.id)]))
    return max(code, 1) if failed else code


def wait_for_session(store: SQLiteStore, session_id: int) -> int:
    """Wait while the session is active (its monitor runs elsewhere); 0 if every job completed."""
    print(f"waiting for session {session_id} to end (Ctrl-C stops waiting; the monitor job goes on)")
    while (found := store.get_session(session_id)) is not None and found.status == SessionStatus.ACTIVE.value:
        time.sleep(WAIT_POLL_S)
    jobs = store.jobs_for_session(session_id, with_plan=False)
    return 0 if jobs and all(j.status == JobStatus.COMPLETED.value for j in jobs) else 1


def end_summary(reader: StoreReader, session_id: int) -> list[str]:
    """One block per job: `end_lines` of the attempt the status table shows (the reader's one
    rule, StoreReader.shown_attempts: the one watched, else the last that was not a dropped
    successor), never a queued successor that was cancelled when the job stopped."""
    shown = reader.shown_attempts(session_id)
    return [
        "\n".join(end_lines(job, shown[job.id], reader.decisions_for_job(job.id)))
        for job in reader.jobs_for_session(session_id, with_plan=False)
        if job.id in shown
    ]


def end_lines(job: JobInfo, latest: AttemptInfo, decisions: Sequence[DecisionInfo]) -> list[str]:
    """What the end of the run shows of one job's last attempt: how a restarted one began (where it
    resumed from); then, for a job that did not complete, the line its last decision rests on
    (the log's tail is then the launcher's teardown traceback, not why it stopped), else the tail."""
    if not latest.log_path:
        return []
    lines = []
    if latest.attempt_no > 1:
        lines.append(f"--- {job.name} attempt {latest.attempt_no}: first lines of {latest.log_path}")
        lines += head_lines(Path(latest.log_path), HEAD_LINES)
    stopped_on = [] if job.status == JobStatus.COMPLETED.value else cause_lines(job.name, latest, decisions)
    if stopped_on:
        return lines + stopped_on
    return [
        *lines,
        f"--- {job.name}: last lines of {latest.log_path}",
        *tail_lines(Path(latest.log_path), TAIL_LINES),
    ]


def look_closer(session_id: int, job_names: list[str]) -> str:
    """The commands that show why each restart or stop happened."""
    job = job_names[0] if len(job_names) == 1 else "JOB"
    return (
        f"Look closer: `autoexp explain {job}` (every decision and the log lines it rests on), "
        f"`autoexp report {session_id} --html report-{session_id}.html` (timeline, iterations, lost time)"
    )


def head_lines(path: Path, count: int) -> list[str]:
    try:
        with path.open("rb") as handle:
            return handle.read(64 * 1024).decode("utf-8", errors="replace").splitlines()[:count]
    except OSError as exc:
        return [f"(cannot read: {exc})"]


def tail_lines(path: Path, count: int) -> list[str]:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 64 * 1024))
            return handle.read().decode("utf-8", errors="replace").splitlines()[-count:]
    except OSError as exc:
        return [f"(cannot read: {exc})"]
