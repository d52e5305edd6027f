"""Who runs the monitor: a login-node process (the default) or a Slurm job of its own.

`ensure_monitor_job` makes sure a session's monitor job is queued or running (what
`--supervisor slurm` and the scrontab entry call). `run_monitor_job` is that job's body: it
queues its successor, runs the monitor until the session ends, a signal arrives (USR1 before
the time limit, TERM from scancel) or the lock is lost, and waits as a standby while another
monitor holds the session. Its log lines say when it started, took over and stopped.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.executors.monitor_job import (
    cancel_queued,
    monitor_jobs,
    queue_successor,
    submit_monitor_job,
    write_monitor_script,
)
from oellm_autoexp.adapters.store.sqlite_store import MonitorLockHeld, SessionStatus, SQLiteStore
from oellm_autoexp.config.monitoring import MonitorSettings, SupervisorSlurmSettings, split_monitoring
from oellm_autoexp.daemon.session import plan_from_dict
from oellm_autoexp.daemon.session_lock import STALE_AFTER_S, SessionLocks
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.monitor_job import MonitorJobSpec, monitor_job_name

STANDBY_S = 30.0  # a monitor job that found the session held by another monitor tries again this often
SCRIPT_NAME = "monitor-{session}.sbatch"  # in the state dir
OUTPUT_NAME = "monitor-{session}.slurm.out"  # in the state dir: every monitor job of the session appends

Say = Callable[[str], None]


def session_settings(store: SQLiteStore, session_id: int) -> MonitorSettings:
    """The monitoring settings of the session's first job (the supervisor is per session)."""
    jobs = store.jobs_for_session(session_id)
    if not jobs:
        return MonitorSettings()
    plan = plan_from_dict(jobs[0].plan)
    settings, _ = split_monitoring(plan.config.monitoring, f"job {jobs[0].name}")
    return settings


def monitor_job_spec(state: Path, session_id: int, config: SupervisorSlurmSettings) -> MonitorJobSpec:
    """The session's monitor job, run from here (this directory, this Python)."""
    state_abs = str(state.absolute())
    return MonitorJobSpec(
        name=monitor_job_name(state_abs, session_id), session_id=session_id, state_dir=state_abs,
        workdir=os.getcwd(), python=sys.executable,
        output=str(state.absolute() / OUTPUT_NAME.format(session=session_id)),
        time_min=config.time_min, handover_margin_s=config.handover_margin_s, mem=config.mem,
        partition=config.partition, qos=config.qos, account=config.account,
    )  # fmt: skip


def ensure_monitor_job(
    state: Path, session_id: int, config: SupervisorSlurmSettings, say: Say = print
) -> str:
    """The id of the session's monitor job: the one queued or running, else one submitted now."""
    spec = monitor_job_spec(state, session_id, config)
    try:
        return _ensure(spec, state, say)
    except ExecutorError as exc:
        raise UserError(
            f"session {session_id}: cannot submit its monitor job ({exc}); its jobs run unmonitored: check "
            "monitoring.supervisor_slurm (partition, qos, account), or run `autoexp monitor-session` here"
        ) from None


def _ensure(spec: MonitorJobSpec, state: Path, say: Say) -> str:
    session_id = spec.session_id
    live = monitor_jobs(spec.name)
    if live:
        listed = ", ".join(f"{j.job_id} ({j.state})" for j in live)
        say(f"session {session_id} is supervised by Slurm: job {listed}, name {spec.name}")
        return live[0].job_id
    script = write_monitor_script(spec, state / SCRIPT_NAME.format(session=session_id))
    job_id = submit_monitor_job(script)
    say(f"session {session_id}: monitor submitted as Slurm job {job_id} (name {spec.name}, log {spec.output});"
        f" stop it with: scancel --name={spec.name}")  # fmt: skip
    return job_id


def takeover_lines(store: SQLiteStore, session_ids: Sequence[int], now: datetime) -> list[str]:
    """One line per session whose previous monitor stopped beating or died: this monitor takes it."""
    stale_after = min(
        (session_settings(store, sid).lock_stale_after_s for sid in session_ids), default=STALE_AFTER_S
    )
    lines = []
    for held in SessionLocks(store, session_ids).stale_holders(now, stale_after):
        age = (
            f"{(now - held.monitor_heartbeat).total_seconds():.0f} s ago"
            if held.monitor_heartbeat
            else "never"
        )
        lines.append(f"taking over session {held.id} from pid {held.monitor_pid} on {held.monitor_host} "
                     f"(last heartbeat {age})")  # fmt: skip
    return lines


def run_monitor_job(
    state: Path, session_id: int, run_monitor: Callable[[SQLiteStore, threading.Event], int], say: Say
) -> int:
    """The monitor job's body (module docstring); `run_monitor` runs the monitor loop until `stop`."""
    own = os.environ.get("SLURM_JOB_ID")
    stop = threading.Event()
    _listen(stop, say)
    say(f"monitor job {own} started: pid {os.getpid()} on {socket.gethostname()}, session {session_id}")
    with SQLiteStore(state) as store:
        config = session_settings(store, session_id).supervisor_slurm
        spec = monitor_job_spec(state, session_id, config)
        if _is_active(store, session_id):
            _queue_successor(spec, state / SCRIPT_NAME.format(session=session_id), own, say)
        while not stop.is_set() and _is_active(store, session_id):
            for line in takeover_lines(store, [session_id], datetime.now(UTC)):
                say(line)
            try:
                code = run_monitor(store, stop)
            except MonitorLockHeld as exc:
                say(f"standby: {exc}; trying again in {STANDBY_S:g} s")
                stop.wait(STANDBY_S)
                continue
            except Exception as exc:
                # Exiting would start the successor at once, which would fail the same way: a loop of
                # jobs seconds apart. Stay, and try again at the standby pace.
                say(f"the monitor failed: {type(exc).__name__}: {exc}; trying again in {STANDBY_S:g} s")
                stop.wait(STANDBY_S)
                continue
            say(f"monitor loop ended (exit {code})")
            if code != 0 and _is_active(store, session_id):
                stop.wait(STANDBY_S)  # the lock went to another monitor: stand by for it
                continue
            break
        ended = not _is_active(store, session_id)
    if ended:
        try:
            cancel_queued(spec.name)
            say(f"session {session_id} ended: cancelled the queued successor ({spec.name})")
        except ExecutorError as exc:
            say(f"warning: session {session_id} ended, but cancelling its queued successor failed: {exc}")
    say(f"monitor job {own} stopped")
    return 0


def _is_active(store: SQLiteStore, session_id: int) -> bool:
    session = store.get_session(session_id)
    return session is not None and session.status == SessionStatus.ACTIVE.value


def _queue_successor(spec: MonitorJobSpec, script: Path, own: str | None, say: Say) -> None:
    """Queue the next monitor job now: it starts the moment this one ends, however it ends."""
    if not script.exists():
        write_monitor_script(spec, script)
    try:
        queued = queue_successor(spec.name, script, own)
    except ExecutorError as exc:
        say(f"warning: could not queue the successor monitor job: {exc}")
        return
    say(f"successor monitor job {queued} queued (singleton)" if queued else "a successor is queued already")


def _listen(stop: threading.Event, say: Say) -> None:
    """USR1 (the time limit is near) and TERM/INT (scancel) stop the monitor; HUP is logged and ignored."""

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGUSR1:
            say("got SIGUSR1: the time limit is near; handing over to the queued successor")
        else:
            say(f"got signal {signum}; stopping (the jobs keep running)")
        stop.set()

    def on_hup(_signum: int, _frame: FrameType | None) -> None:
        say("got SIGHUP; ignored: the monitor keeps running")

    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_stop)
    signal.signal(signal.SIGHUP, on_hup)
