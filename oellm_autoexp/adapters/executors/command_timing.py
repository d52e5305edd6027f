"""How long each Slurm command took and how it failed, for whoever listens (daemon/metrics.py).

adapters/executors/slurm.py `run_slurm_command`, the one place Slurm commands run, reports
every run here. Listeners are called on the caller's thread; one that raises is dropped
from the call, never passed on: measuring a command must not fail it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class CommandFailure(StrEnum):
    MISSING = "missing"  # the program is not installed (not on PATH)
    TIMEOUT = "timeout"  # it did not answer within its timeout (a busy or dead controller)
    EXIT_STATUS = "exit_status"  # it exited non-zero


@dataclass(frozen=True)
class CommandRun:
    """One finished Slurm command."""

    command: str  # argv[0]: sbatch, squeue, sacct, scancel, scontrol
    seconds: float  # wall time, including a timeout's full wait
    failure: CommandFailure | None  # None: it succeeded


CommandListener = Callable[[CommandRun], None]
_listeners: list[CommandListener] = []
_lock = threading.Lock()


def add_listener(listener: CommandListener) -> None:
    with _lock:
        _listeners.append(listener)


def remove_listener(listener: CommandListener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def report_since(command: str, started_s: float, failure: CommandFailure | None) -> None:
    """Report a command started at `started_s` (time.monotonic) that just finished."""
    report(CommandRun(command, time.monotonic() - started_s, failure))


def report(run: CommandRun) -> None:
    """Tell every listener about a finished command."""
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(run)
        except Exception:
            continue
