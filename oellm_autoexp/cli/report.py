"""`autoexp report [SESSION] [--html FILE]`: a session's restarts and progress as one HTML page."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.fs.atomic_file import write_text_atomic
from oellm_autoexp.adapters.store.sqlite_store import SessionInfo
from oellm_autoexp.cli._sessions import find_session, latest_session, open_store
from oellm_autoexp.core.report.report import JobReport, build_report
from oellm_autoexp.core.report.report_html import format_duration, render_report_html
from oellm_autoexp.daemon.report_data import session_data

REPORTS_DIR = "reports"  # in the state dir: where a report without --html is written


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "report", help="one self-contained HTML page: attempts, decisions, iterations, lost time"
    )
    parser.add_argument("session", nargs="?", help="session id or name (default: the latest)")
    parser.add_argument(
        "--html",
        type=Path,
        help="write the page here (default: <state dir>/reports/report-<session id>.html)",
    )
    parser.set_defaults(func=report_command)


def report_command(args: argparse.Namespace) -> int:
    store, directory = open_store(args)
    with store:
        session = find_session(store, args.session) if args.session else latest_session(store)
        report = build_report(session_data(store, session, time.time()))
    # Without --html the page goes beside the session's records, never into the working directory.
    target = args.html or directory / REPORTS_DIR / f"report-{session.id}.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, render_report_html(report))
    target.chmod(0o644)  # a page to share, not a secret (the atomic write creates it 0600)
    summary = report.summary
    print(_monitor_said(session, directory))
    goodput = "-" if summary.goodput is None else f"{summary.goodput:.0%}"
    restarts = sum(n for _, n in summary.restarts_by_cause)
    print(f"session {session.id} ({session.name}): {len(report.jobs)} job(s), {restarts} restart(s), "
          f"goodput {goodput} ({format_duration(summary.useful_s)} useful of "
          f"{format_duration(summary.allocation_s)} allocated)")  # fmt: skip
    for job in report.jobs:
        _print_preflight(job)
    print(f"wrote {target}")
    return 0


def _monitor_said(session: SessionInfo, state: Path) -> str:
    """Who watches the session now: its monitor's host or Slurm job and heartbeat, or since when nobody."""
    from oellm_autoexp.cli._sessions import resume_command
    from oellm_autoexp.cli.status import monitor_line
    from oellm_autoexp.daemon.session_lock import monitor_liveness

    return monitor_line(
        session, monitor_liveness(session, datetime.now(UTC)), resume_command(state, [session.id])
    )


def _print_preflight(job: JobReport) -> None:
    """One line per job that ran pre-flight checks; one more per node they kept off an attempt."""
    if not job.preflight:
        return
    nodes = sorted({r.node for r in job.preflight})
    failed = sum(1 for r in job.preflight if r.verdict != "pass")
    print(f"{job.name}: pre-flight checked {', '.join(nodes)} ({len(job.preflight)} node check(s), "
          f"{failed} failed, {format_duration(job.preflight_s)} in all)")  # fmt: skip
    for row in job.preflight:
        if row.excluded:
            print(f"  {row.node} (attempt {row.attempt_no}: gemm {row.gemm}): {row.excluded}")
