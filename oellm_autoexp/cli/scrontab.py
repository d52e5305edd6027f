"""`autoexp scrontab [--session-id ID | --all] [--install]`: a scrontab entry that keeps a monitor job.

Prints, for each session, an entry that every few minutes runs `autoexp monitor-session
--session-id ID --supervisor slurm` (which submits the session's monitor job unless one is
queued or running). `--install` puts the entries into the user's scrontab (`scrontab -l`, then
`scrontab -`), replacing our earlier entries for the same sessions: installing twice changes
nothing. Where the Slurm client has no `scrontab`, it says so (docs/supervision.md).
"""

from __future__ import annotations

import argparse
import os
import sys

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.executors.monitor_job import (
    MISSING_SCRONTAB,
    has_scrontab,
    read_scrontab,
    write_scrontab,
)
from oellm_autoexp.cli._sessions import active_sessions, find_session, latest_session, open_store
from oellm_autoexp.daemon.supervisor import monitor_job_spec, session_settings
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.monitor_job import merge_scrontab, scrontab_block

# Set on the scrontab line when set here: a scron job does not get the login shell's environment.
PASSED_ENV = ("PYTHONPATH", "SLURM_CONF", "AUTOEXP_CONFIG_DIR", "AUTOEXP_SLURM_TIMEOUT_S")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "scrontab", help="print (or --install) a scrontab entry that keeps each session's monitor job queued"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--session-id", help="session id or name (default: the latest)")
    which.add_argument("--all", action="store_true", help="every active session")
    parser.add_argument(
        "--install", action="store_true", help="add the entries to your scrontab (idempotent)"
    )
    parser.set_defaults(func=scrontab_command)


def scrontab_command(args: argparse.Namespace) -> int:
    store, state = open_store(args, read_only=True)
    with store:
        if args.all:
            sessions = active_sessions(store)
        else:
            sessions = [find_session(store, args.session_id) if args.session_id else latest_session(store)]
        env = {key: os.environ[key] for key in PASSED_ENV if os.environ.get(key)}
        blocks = []
        for session in sessions:
            config = session_settings(store, session.id).supervisor_slurm
            spec = monitor_job_spec(state, session.id, config)
            ensure = [spec.python, "-m", "oellm_autoexp", "--state-dir", spec.state_dir, "monitor-session",
                      "--session-id", str(session.id), "--supervisor", "slurm"]  # fmt: skip
            blocks.append((spec.name, scrontab_block(ensure, spec, config.scrontab_every_min, env)))
    if not blocks:
        print("no active sessions")
        return 0
    if not args.install:
        print("\n".join(block for _, block in blocks))
        if not has_scrontab():
            print(
                f"note: {MISSING_SCRONTAB}; `--supervisor slurm` alone keeps a successor queued",
                file=sys.stderr,
            )
        return 0
    if not has_scrontab():
        raise UserError(
            f"cannot install: {MISSING_SCRONTAB}. Without it, `autoexp monitor-session --supervisor slurm` "
            "keeps a monitor job (and its queued successor) running; the printed line also works in a "
            "login node's crontab (drop the #SCRON line)"
        )
    try:
        table = read_scrontab()
        for name, block in blocks:
            table = merge_scrontab(table, block, name)
        write_scrontab(table)
    except ExecutorError as exc:
        raise UserError(f"scrontab refused the entry: {exc} (is ScronParameters=enable set?)") from None
    print(
        f"installed {len(blocks)} entr{'y' if len(blocks) == 1 else 'ies'} in your scrontab (`scrontab -l`)"
    )
    return 0
