"""`autoexp monitor-session --session-id ID | --all [--detach]`: resume monitoring.

Re-attaches to live jobs by their stored ids, judges jobs that ended while no
monitor watched, and never submits a duplicate (see daemon/submitter.py).
`--detach` runs the same command as a daemon with a pid file and a log;
SIGTERM stops a monitor cleanly (the jobs keep running); SIGHUP (a session reaper,
a closed terminal) is logged and ignored. `--supervisor slurm` makes sure the session's
monitor runs as a Slurm job instead (daemon/supervisor.py, docs/supervision.md); that job
runs this command with `--in-slurm-job`.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.executors.factory import state_dir
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.cli._metrics import add_metrics_args, check_metrics_args, metrics_argv, metrics_observer
from oellm_autoexp.cli._sessions import active_sessions, find_session, open_store, resume_command
from oellm_autoexp.daemon.events import MonitorObserver
from oellm_autoexp.daemon.monitor import Monitor, stamped_line
from oellm_autoexp.daemon.notify import Notifier
from oellm_autoexp.daemon.session_lock import MONITOR_JOB_ENV
from oellm_autoexp.daemon.supervisor import (
    ensure_monitor_job,
    run_monitor_job,
    session_settings,
    takeover_lines,
)
from oellm_autoexp.errors import UserError

DETACH_WAIT_S = 30.0  # how long --detach waits for the daemon to take its sessions' locks


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("monitor-session", help="resume monitoring a session (or all active ones)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--session-id", help="session id or name")
    which.add_argument("--all", action="store_true", help="every active session")
    parser.add_argument("--detach", action="store_true", help="run in the background (pid file + log)")
    add_supervisor_arg(parser)
    parser.add_argument(
        "--in-slurm-job", action="store_true", help=argparse.SUPPRESS
    )  # the monitor job's body
    add_metrics_args(parser)
    parser.set_defaults(func=monitor_session_command)


def add_supervisor_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--supervisor",
        choices=("login", "slurm"),
        help="where the monitor runs: here (login, the default) or as a Slurm job of its own "
        "(slurm; default for run/submit: monitoring.supervisor)",
    )


def monitor_session_command(args: argparse.Namespace) -> int:
    check_metrics_args(args)
    if args.in_slurm_job:
        return _in_slurm_job(args)
    if args.supervisor == "slurm":
        return _ensure_slurm_monitors(args)
    store, state = open_store(args)
    try:
        sessions = active_sessions(store) if args.all else [find_session(store, args.session_id)]
        if not sessions:
            print("no active sessions to monitor")
            return 0
        ids = [s.id for s in sessions]
        if args.detach:
            return detach(state, ids, store, extra_argv=metrics_argv(args))
        metrics = metrics_observer(args, store)
        print(f"monitor started: pid {os.getpid()} on {socket.gethostname()}, sessions {ids}", flush=True)
        for line in takeover_lines(store, ids, datetime.now(UTC)):
            print(line, flush=True)
        code = monitor_in_foreground(store, state, ids, observers=[metrics] if metrics else [])
        print(f"monitor stopped (exit {code})", flush=True)
        return code
    finally:
        store.close()


def _ensure_slurm_monitors(args: argparse.Namespace) -> int:
    """`--supervisor slurm`: a monitor job queued or running for each session (idempotent)."""
    if args.detach or metrics_argv(args):
        raise UserError("--detach and the metrics flags are for a monitor run here; drop --supervisor slurm")
    store, state = open_store(args, read_only=True)
    with store:
        sessions = active_sessions(store) if args.all else [find_session(store, args.session_id)]
        for session in sessions:
            ensure_monitor_job(state, session.id, session_settings(store, session.id).supervisor_slurm)
    if not sessions:
        print("no active sessions to monitor")
    return 0


def _in_slurm_job(args: argparse.Namespace) -> int:
    """The monitor job's body (daemon/supervisor.py): one session, stopped by USR1/TERM."""
    if args.all or args.session_id is None or not args.session_id.isdigit():
        raise UserError("--in-slurm-job runs one session: give --session-id with its number")
    state = state_dir(getattr(args, "state_dir", None))
    # The lock records the job that holds it: `status` shows "Slurm job N" as the monitor.
    os.environ[MONITOR_JOB_ENV] = os.environ.get("SLURM_JOB_ID", "")

    def run(store: SQLiteStore, stop: threading.Event) -> int:
        notifier = Notifier(store, state, lambda message: _print_line(stamped_line(message)))
        monitor = Monitor(store, [int(args.session_id)], state_dir=state, say=None, observers=[notifier])
        try:
            return monitor.run(stop)
        finally:
            notifier.close()

    return run_monitor_job(state, int(args.session_id), run, _print_now)


def _print_now(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def monitor_in_foreground(
    store: SQLiteStore,
    state: Path,
    session_ids: list[int],
    *,
    say: Callable[[str], None] | None = None,
    on_poll: Callable[[], None] | None = None,
    observers: Sequence[MonitorObserver] = (),
) -> int:
    """Run the monitor here until the sessions finish or SIGTERM/SIGINT arrives.

    `observers` (metrics) are closed when it returns, whatever happened.
    """
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        print(f"monitor: got signal {signum}; stopping (jobs keep running)", flush=True)
        print(f"resume with: {resume_command(state, session_ids)}", flush=True)
        stop.set()

    def on_hangup(_signum: int, _frame: object) -> None:
        # A session reaper or a closed terminal: the monitor goes on. A terminal that is gone would
        # fail every later print, so the output goes to the state dir's log from now on.
        if sys.stdout.isatty():
            _output_to(state / f"monitor-{'-'.join(str(i) for i in session_ids)}.log")
        print("monitor: got SIGHUP; ignored: the monitor keeps running", flush=True)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
    say_line = say or _print_line
    # The notifier always listens (it sends nothing without webhooks); metrics when asked.
    notifier = Notifier(store, state, lambda message: say_line(stamped_line(message)))
    observers = [notifier, *observers]
    try:
        monitor = Monitor(store, session_ids, state_dir=state, say=say, on_poll=on_poll, observers=observers)
        return monitor.run(stop)
    finally:
        for observer in observers:
            observer.close()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _output_to(log: Path) -> None:
    """Point this process's stdout and stderr at `log` (appended)."""
    sys.stdout.flush()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def detach(
    state: Path, session_ids: list[int], store: SQLiteStore | None = None, *, extra_argv: Sequence[str] = ()
) -> int:
    """Start `autoexp monitor-session` for the sessions as a background daemon (`extra_argv`: its flags).

    Waits until the daemon holds every session's lock (0), or it exits first: then its
    refusal (another monitor holds a session...) is shown here with its exit code.
    """
    label = "-".join(str(i) for i in session_ids)
    log = state / f"monitor-{label}.log"
    pid_file = state / f"monitor-{label}.pid"
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(state), "monitor-session"]
    argv += ["--session-id", str(session_ids[0])] if len(session_ids) == 1 else ["--all"]
    argv += extra_argv
    start = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    code = _wait_for_locks(proc, state, session_ids, store)
    if code is not None:
        with open(log, "rb") as handle:
            handle.seek(start)
            said = handle.read().decode("utf-8", errors="replace").strip()
        print(said or f"the background monitor exited at once ({code}); see {log}", file=sys.stderr)
        return code or 1
    pid_file.write_text(f"{proc.pid}\n", encoding="utf-8")
    print(f"monitor started in the background: pid {proc.pid}, log {log}, pid file {pid_file}")
    return 0


def _wait_for_locks(
    proc: subprocess.Popen[bytes], state: Path, session_ids: list[int], store: SQLiteStore | None
) -> int | None:
    """None once `proc` holds every session's lock; its exit code if it ended first."""
    reader = store or SQLiteStore(state)
    deadline = time.monotonic() + DETACH_WAIT_S
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return proc.returncode
            held = [reader.get_session(sid) for sid in session_ids]
            if all(s is not None and s.monitor_pid == proc.pid for s in held):
                return None
            time.sleep(0.1)
        return None  # still starting (a slow machine): it reports into its log
    finally:
        if store is None:
            reader.close()


def _print_line(line: str) -> None:
    print(line, flush=True)
