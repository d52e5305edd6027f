"""A child process that dies with its parent (Linux prctl PR_SET_PDEATHSIG).

Why: a monitor SIGKILLed while its `sbatch` runs would otherwise leave that
sbatch to submit a job after the resumed monitor has given the attempt up.
Elsewhere (no prctl) this does nothing; the submitter's settle time still holds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return getattr(libc, "prctl", None)


_PRCTL = _load_prctl()  # resolved here, once: the child between fork and exec only calls it


def die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get SIGKILL when the thread that forked it dies.

    The signal is tied to the forking thread, so call Popen from a thread that lives as
    long as the monitor (its loop thread). If the parent already died before prctl
    took effect, the child exits at once.
    """
    prctl = _PRCTL
    if prctl is None:
        return None

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return arm
