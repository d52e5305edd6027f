"""Fault injection for the training workload: each fault produces the REAL failure.

No fault prints an imitation of an error message. What each one does on the faulty rank,
at the start of iteration `--fault-at-step` (before the forward pass):

- oom:   CUDA: one allocation of twice the card's memory -> torch.OutOfMemoryError.
         CPU: RLIMIT_AS capped at the current size, then a 64 GiB tensor -> the allocator's
         own "can't allocate memory" RuntimeError.
- hang:  the rank stops taking part (sleeps for good). The other ranks block in the next
         collective until the process-group timeout (--pg-timeout-s) fires: gloo raises its
         timeout error, NCCL's watchdog aborts the process. SIGTERM is reset to its default
         so the launcher's teardown ends the sleeper at once.
- crash: an ordinary Python exception (RuntimeError), traceback and exit 1.
- raise_and_linger: the same uncaught exception, but the process does not exit: a non-daemon
         thread keeps it alive (as a failed async checkpoint writer, a stuck
         destroy_process_group or an atexit hook do). SIGTERM is reset to its default so a
         cancel ends it.
- kill:  os.kill(own pid, SIGKILL): the process dies with -9, no output of its own.
- segv:  a NULL read through ctypes: a genuine SIGSEGV (faulthandler prints the stack).
- nan:   the output layer's bias is filled with NaN, so the forward pass yields a NaN loss;
         the training loop detects it like Megatron and aborts (exit 1).
- guard: the user's own code gives up, in its own words: a check in the training script
         (here: its streaming data source went away) logs why at ERROR level through Python's
         logging and exits 1, no traceback. No library prints this line and no pattern knows
         it; a FAILED attempt whose log only says this is read by its words (core/classify/guess.py).
- file_gone: a file the run reads went away under it (a scratch purge, a file system remounted
         elsewhere): the rank opens a dataset index that is not there -> FileNotFoundError, traceback
         and exit 1. Its class is a configuration error's; the same configuration trained until then
         (docs/restart_policy.md, config_error_after_training).

Before acting, the faulty rank prints one `[fault-injection]` line naming the fault, so a
human reading the log knows it was injected; classifiers must not rely on that line.

Entry points whose flags are not ours (the megatron-core workload takes Megatron's flags
only) read the fault from the environment instead: AUTOEXP_FAULT=FAULT@ITERATION:RANK, with
AUTOEXP_FAULT_ONCE_FILE as --fault-once-file.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import re
import resource
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import torch

from oellm_autoexp.workloads.defaults import (
    FAULT_OOM_CPU_BYTES,
    FAULT_OOM_CPU_MARGIN_BYTES,
    FAULT_OOM_GPU_FACTOR,
)

FAULT_ENV = "AUTOEXP_FAULT"
FAULT_ONCE_ENV = "AUTOEXP_FAULT_ONCE_FILE"


class Fault(enum.StrEnum):
    """A failure the training workload can be told to produce."""

    NONE = "none"  # no fault
    OOM = "oom"  # device (CUDA) or host (CPU) allocation failure
    HANG = "hang"  # one rank stops; the others hit the collective timeout
    CRASH = "crash"  # uncaught Python exception
    RAISE_AND_LINGER = "raise_and_linger"  # uncaught exception; a non-daemon thread keeps the process
    KILL = "kill"  # SIGKILL of the process itself
    SEGV = "segv"  # SIGSEGV from a NULL dereference
    NAN = "nan"  # NaN loss from a poisoned weight
    GUARD = "guard"  # the user's own check gives up: an ERROR log line in its words, exit 1
    FILE_GONE = "file_gone"  # a file the run reads is gone: FileNotFoundError, exit 1


def is_due(fault: Fault, fault_at_step: int, fault_rank: int, iteration: int, rank: int) -> bool:
    """True when `fault` fires on this rank at this iteration (`fault_rank` -1: every rank)."""
    if fault is Fault.NONE or iteration != fault_at_step:
        return False
    return fault_rank in (-1, rank)


def inject(fault: Fault, iteration: int, rank: int, device: torch.device, model: torch.nn.Module) -> None:
    """Produce `fault` now. Returns only for NAN (the loop then meets the NaN loss)."""
    announce(fault, iteration, rank)
    actions = {
        Fault.OOM: lambda: _oom(device),
        Fault.HANG: _hang,
        Fault.CRASH: lambda: _crash(iteration, rank),
        Fault.RAISE_AND_LINGER: lambda: _raise_and_linger(iteration, rank),
        Fault.KILL: lambda: os.kill(os.getpid(), signal.SIGKILL),
        Fault.SEGV: _segv,
        Fault.NAN: lambda: _poison(model),
        Fault.GUARD: lambda: _guard(iteration),
        Fault.FILE_GONE: lambda: _file_gone(iteration),
    }
    actions[fault]()


def armed(marker: Path | None, times: int = 1) -> bool:
    """With a marker file, fire only while it counts fewer than `times` firings, and count this one
    first: a resumed attempt (or a launcher's in-place restart) runs clean once the count is reached."""
    if marker is None:
        return True
    fired = int(marker.read_text() or 0) if marker.exists() else 0
    if fired >= times:
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(fired + 1))
    return True


class EnvFault(NamedTuple):
    """A fault asked for through the environment (AUTOEXP_FAULT=FAULT@ITERATION:RANK).

    `FAULT@I1,I2,...:RANK` with a once file: the n-th firing (counted in the file, across attempts)
    comes at iteration In, so attempts in a row fail at chosen points (a burst of faults).
    """

    fault: Fault
    at_steps: tuple[int, ...]
    rank: int
    once_file: Path | None

    @property
    def at_step(self) -> int:
        """The iteration of the next firing (the once file counts the firings so far)."""
        fired = firings(self.once_file)
        return self.at_steps[min(fired, len(self.at_steps) - 1)]

    def armed(self) -> bool:
        """Fire now (and count it): each listed iteration fires once with a once file."""
        return armed(self.once_file, times=len(self.at_steps))


def firings(marker: Path | None) -> int:
    """How many times a fault with this once file fired so far."""
    if marker is None or not marker.exists():
        return 0
    return int(marker.read_text() or 0)


def from_env(environ: Mapping[str, str]) -> EnvFault | None:
    """The fault AUTOEXP_FAULT asks for, or None; a malformed value is an error, not ignored."""
    text = environ.get(FAULT_ENV, "").strip()
    if not text:
        return None
    match = re.fullmatch(r"(\w+)@(\d+(?:,\d+)*):(-?\d+)", text)
    if match is None or match.group(1) not in Fault.__members__.values():
        raise ValueError(
            f"{FAULT_ENV}={text!r}: expected FAULT@ITERATION[,ITERATION...]:RANK, FAULT one of {list(Fault)}"
        )
    once = environ.get(FAULT_ONCE_ENV)
    steps = tuple(int(i) for i in match.group(2).split(","))
    return EnvFault(Fault(match.group(1)), steps, int(match.group(3)), Path(once) if once else None)


def announce(fault: Fault, iteration: int, rank: int) -> None:
    print(f"[fault-injection] rank {rank}: {fault.value} at iteration {iteration}", flush=True)
    sys.stderr.flush()


def _oom(device: torch.device) -> None:
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        blob = torch.empty(total * FAULT_OOM_GPU_FACTOR, dtype=torch.uint8, device=device)
    else:
        _cap_address_space(FAULT_OOM_CPU_MARGIN_BYTES)
        blob = torch.empty(FAULT_OOM_CPU_BYTES, dtype=torch.uint8)
    blob.fill_(1)  # only reached if the allocation somehow succeeded: touch every page


def _cap_address_space(margin_bytes: int) -> None:
    """Limit this process's virtual memory to what it uses now plus `margin_bytes`."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[0])
    current = pages * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = current + margin_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _hang() -> None:
    # A hung rank ignores the launcher's polite SIGTERM handler of train.py; the default
    # action lets torchrun's teardown end it instead of waiting 30 s to SIGKILL it.
    # SIGUSR1 keeps train.py's handler: it only sets a flag, and the sleeper never looks.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        time.sleep(3600)


def _crash(iteration: int, rank: int) -> None:
    raise RuntimeError(f"injected crash at iteration {iteration} on rank {rank}")


def _raise_and_linger(iteration: int, rank: int) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # train.py's handler only sets a flag
    threading.Thread(target=_sleep_for_good, name="lingering", daemon=False).start()
    raise RuntimeError(f"injected crash at iteration {iteration} on rank {rank}; the process lingers")


def _guard(iteration: int) -> None:
    # The format is logging's default (`basicConfig`): LEVEL:logger:message, as a user's script prints it.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
    log = logging.getLogger("train.guard")
    log.addHandler(handler)
    log.propagate = False  # once, also where the script configured the root logger (Megatron does)
    log.error(f"lost the connection to the data server at iteration {iteration} "
              "(connection reset by peer); stopping the run")  # fmt: skip
    handler.flush()
    sys.exit(1)


def _file_gone(iteration: int) -> None:
    # A real open() of a path that does not exist, not a raise of our own: the traceback and the
    # exception line are Python's, as when a purged scratch file system takes a dataset index away.
    missing = Path(tempfile.gettempdir()) / "autoexp-fault-gone" / f"shard_{iteration:05d}.idx"
    with missing.open("rb"):
        pass


def _sleep_for_good() -> None:
    while True:
        time.sleep(3600)


def _segv() -> None:
    sys.stdout.flush()
    ctypes.string_at(0)


def _poison(model: torch.nn.Module) -> None:
    with torch.no_grad():
        model.head.bias.fill_(float("nan"))
