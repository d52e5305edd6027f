"""`autoexp submit CONFIG [overrides] [--no-monitor]`: plan, record a session, submit every job.

Everything is planned first, so bad input submits nothing. Each first attempt
goes through the monitor's duplicate-safe submission (intent, then sbatch with
a tag). Unless --no-monitor is given, a background monitor takes the session:
a detached process here, or with `--supervisor slurm` (or `monitoring.supervisor:
slurm`) a Slurm job of its own (docs/supervision.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from oellm_autoexp.adapters.fs.state_dir import state_dir
from oellm_autoexp.adapters.store.sqlite_store import SessionInfo, SQLiteStore
from oellm_autoexp.cli._common import add_config_args, load_plans
from oellm_autoexp.cli._metrics import add_metrics_args, check_metrics_args, metrics_argv
from oellm_autoexp.cli._sessions import open_store, resume_command
from oellm_autoexp.cli.monitor_session import add_supervisor_arg, detach
from oellm_autoexp.daemon.session import start_session
from oellm_autoexp.daemon.supervisor import ensure_monitor_job, session_settings
from oellm_autoexp.errors import UserError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("submit", help="submit every job of an experiment")
    add_submit_args(parser)
    parser.add_argument(
        "--no-monitor", action="store_true", help="only submit; `autoexp monitor-session` can take it later"
    )
    add_supervisor_arg(parser)
    add_metrics_args(parser)  # for the background monitor
    parser.set_defaults(func=submit_command)


def add_submit_args(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--dependency", help="sbatch --dependency for the first attempt (e.g. afterany:123)")
    parser.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        help="extra sbatch argument for every attempt, e.g. --exclude=node3",
    )


def submit_session(args: argparse.Namespace) -> tuple[SQLiteStore, SessionInfo, list[str]]:
    """Plan, then create the session and submit; (store, session, jobs whose first sbatch failed)."""
    plans = load_plans(args)
    if args.sbatch_arg:
        plans = [dataclasses.replace(p, sbatch_args=(*p.sbatch_args, *args.sbatch_arg)) for p in plans]
    first_only = [f"--dependency={args.dependency}"] if args.dependency else []
    store, directory = open_store(args)
    try:
        session, failed = start_session(
            store,
            plans,
            config_path=args.config,
            state_dir=directory,
            now_s=time.time(),
            first_only=first_only,
        )
    except BaseException:
        store.close()
        raise
    return store, session, failed


def submit_command(args: argparse.Namespace) -> int:
    check_metrics_args(args)  # before anything is submitted
    if args.no_monitor and metrics_argv(args):
        raise UserError(
            "--metrics-port and --metrics-textfile are the background monitor's: drop --no-monitor, "
            "or give them to `autoexp monitor-session` later"
        )
    store, session, failed = submit_session(args)
    with store:
        total = len(store.jobs_for_session(session.id))
        settings = session_settings(store, session.id)
    directory = state_dir(getattr(args, "state_dir", None))
    if len(failed) == total:
        print(f"nothing could be submitted ({total} job(s) refused)", file=sys.stderr)
        return 1
    if not args.no_monitor and (args.supervisor or settings.supervisor) == "slurm":
        if metrics_argv(args):
            print("note: the metrics flags are not passed to a monitor job", file=sys.stderr)
        ensure_monitor_job(directory, session.id, settings.supervisor_slurm)
        return 1 if failed else 0
    if not args.no_monitor:
        started = detach(directory, [session.id], extra_argv=metrics_argv(args))
        return started or (1 if failed else 0)
    print(f"not monitored; resume with: {resume_command(directory, [session.id])}")
    return 1 if failed else 0
