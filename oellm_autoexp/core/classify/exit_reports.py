"""What launchers and Slurm's clients report in a field of one line, read as a class. No I/O.

Each reader below parses the field the emitter fills in and looks the value up, instead of
listing one pattern per value:

- How a process ended, as each launcher prints it: DeepSpeed's launcher
  (`... exits with return code = -9`, deepspeed/launcher/launch.py sigkill_handler), torch's
  multiprocessing spawn (`process 0 terminated with signal SIGKILL`,
  torch/multiprocessing/spawn.py), Open MPI / PRRTE (`mpirun noticed that process rank 1
  with PID 42 on node n1 exited on signal 9 (Killed).`, orte/prte help-*run.txt) and MPICH's
  hydra (`=   EXIT CODE: 139`, a shell-style 128+N). A negative return code or a signal is the
  signal that ended the process; its class is `SIGNAL_CLASS`'s.
- Why Slurm refused a request: `Batch job submission failed: %m` (src/sbatch/sbatch.c),
  `Job submit/allocate failed: %m` (src/salloc/salloc.c), `Unable to allocate resources: %m`
  (src/srun/allocate.c, salloc) and `Unable to create step for job %u: %m`
  (src/srun/launch.c). `%m` is one of src/common/slurm_errno.c's strings: the few that mean
  the controller could not be reached are transient (no cause); every other one refuses the
  request itself, and resubmitting the same request is refused again (`config_error`).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping

# What a process's death by a signal means (by signal number). SIGTERM/SIGINT/SIGABRT are
# absent: a teardown sent by the launcher itself, or an abort whose own line says why.
SIGNAL_CLASS = {
    signal.SIGKILL: "killed",  # from outside: the kernel's or a cgroup's OOM killer, the scheduler
    signal.SIGSEGV: "segfault",
    # In a training job SIGBUS is shared memory running out: a page of a /dev/shm mapping that
    # tmpfs cannot back (a container's 64 MB default, DataLoader workers passing batches). torch's
    # own SIGBUS handler says so (torch/csrc/DataLoader.cpp: "This might be caused by insufficient
    # shared memory (shm)"). Both classes stop the run; the class says what to raise.
    signal.SIGBUS: "oom",
    signal.SIGFPE: "segfault",
    signal.SIGILL: "segfault",
    # a trap instruction the process ran itself (`__builtin_trap` on arm64, a breakpoint left in native
    # code, a failed check that traps): the kernel's SIGTRAP ends it like a fault (bash `Trace/breakpoint trap`)
    signal.SIGTRAP: "segfault",
}
_KNOWN_SIGNALS = {s.value for s in signal.Signals}
SHELL_SIGNAL_BASE = 128  # a shell reports a process a signal N ended as exit status 128+N


def signal_class(number: int | None) -> str | None:
    """The class of a death by signal `number`, or None (a teardown signal, no signal)."""
    if number is None or number not in _KNOWN_SIGNALS:
        return None
    return SIGNAL_CLASS.get(signal.Signals(number))


def signal_number(name: str) -> int | None:
    """`SIGKILL` -> 9, or None for a name this platform does not know."""
    member = getattr(signal.Signals, name.upper(), None)
    return member.value if member is not None else None


def class_of_field(field: re.Pattern[str], classes: Mapping[str, str], line: str) -> str | None:
    """The class `classes` lists for the value `field` reads off `line` (its group `value`, stripped).

    None when the line has no such field or the table does not list its value. A decider whose
    whole reading is this (Slurm's job state here, a DataLoader worker's signal in blocks.py)
    names only its regex and its table.
    """
    m = field.search(line)
    return classes.get(m.group("value").strip()) if m is not None else None


# --------------------------------------------------------------------------- launchers

_RETURN_CODE = re.compile(r"exits with return code = (?P<code>-?\d+)")
_SPAWN_SIGNAL = re.compile(r"terminated with signal (?P<name>SIG[A-Z0-9]+)")
_SPAWN_EXIT = re.compile(r"terminated with exit code (?P<code>\d+)")
_MPI_SIGNAL = re.compile(r"(?:exited on |^)signal (?P<num>\d+)")  # `^`: the line wrapped before `signal`
_HYDRA_EXIT = re.compile(r"EXIT CODE: (?P<code>\d+)")
_HYDRA_SIGNAL = re.compile(r"EXIT STRING: .*\(signal (?P<num>\d+)\)")
_INTERRUPTED = re.compile(r"\(interrupted by signal (?P<num>\d+)")  # an IDE's run report (PyCharm, CLion)
# any tool printing Popen.returncode: -N is "terminated by signal N" (Python's subprocess docs); the
# same words and range as base.yaml negative_return_code, whose hits this reads
_NEGATIVE_CODE = re.compile(
    r"\b(?:[Ee]rror|[Ee]xit|[Rr]eturn) (?:code|status)(?: ?[:=])? ?-(?P<num>[1-9]|[12]\d|3[01])\b"
)


def decide_launcher_exit(line: str) -> str | None:
    """The class of a launcher's report of how one of its processes ended.

    A signal gives its class (`signal_class`). A positive exit code is the process's own
    exit: an exception, whose own line (above, when in view) is the cause. A shell-style
    status above 128 (MPICH's `EXIT CODE: 139`) is the signal 128 below it.
    """
    if (m := _RETURN_CODE.search(line)) is not None:
        return _by_code(int(m.group("code")))
    if (m := _SPAWN_SIGNAL.search(line)) is not None:
        return signal_class(signal_number(m.group("name")))
    if (m := _SPAWN_EXIT.search(line)) is not None:
        return _by_code(int(m.group("code")))
    if (m := _MPI_SIGNAL.search(line) or _HYDRA_SIGNAL.search(line) or _INTERRUPTED.search(line)) is not None:
        return signal_class(int(m.group("num")))
    if (m := _HYDRA_EXIT.search(line)) is not None:
        code = int(m.group("code"))
        return signal_class(code - SHELL_SIGNAL_BASE) if code > SHELL_SIGNAL_BASE else _by_code(code)
    return None


def decide_negative_code(line: str) -> str | None:
    """The class of the first negative return code on the line that names a signal with a class."""
    for m in _NEGATIVE_CODE.finditer(line):
        if (found := signal_class(int(m.group("num")))) is not None:
            return found
    return None


def _by_code(code: int) -> str | None:
    if code < 0:
        return signal_class(-code)
    return "exception" if code > 0 else None


# --------------------------------------------------------------------------- Slurm refusals

_REFUSAL = re.compile(
    r"(?:Batch job submission failed|Job submit/allocate failed|Unable to allocate resources"
    r"|Unable to create step for job \S+?):\s*(?P<reason>.+?)\s*$",
    re.IGNORECASE,  # some tools lower-case what sbatch printed
)

# slurm_errno.c strings (and the socket errors `%m` can carry) that say the controller was
# not reached or was busy, or that the allocation was not in a state to take the request:
# the request itself was never judged, so no cause is known.
TRANSIENT_REFUSALS = (
    "socket timed out on send/recv operation",
    "unable to contact slurm controller",
    "slurm backup controller in standby mode",
    "zero bytes were transmitted or received",
    "communication connection failure",
    "connection refused",
    "resource temporarily unavailable",
    "unable to create job record, try again",
    "slurmctld is busy",
    # the request was fine, the allocation was not ready for it: its job is ending (a time limit, a
    # cancel) or its nodes are still held by another step. The job's own end says why, if anything.
    "job/step already completing or completed",
    "requested nodes are busy",
)


def decide_slurm_refusal(line: str) -> str | None:
    """`config_error` for a request Slurm refused on its merits; None when the controller was not reached."""
    m = _REFUSAL.search(line)
    if m is None:
        return None
    reason = m.group("reason").lower()
    return None if any(t in reason for t in TRANSIENT_REFUSALS) else "config_error"


# --------------------------------------------------------------------------- Slurm job states

# A job's or step's end state as Slurm's tools print it, quoted next to a log: a row of `sacct`
# (the State column before the ExitCode `N:M`; a state cut to 10 columns ends in `+`), `scontrol
# show job` (`JobState=NODE_FAIL Reason=NodeDown`) and `seff` (`State: OUT_OF_MEMORY (exit code 0)`).
# Names from src/common/slurm_protocol_defs.c job_state_string; FAILED and COMPLETED say nothing
# by themselves (the job's own output says why), nor do the states of a job still queued or running.
_SLURM_STATE = re.compile(
    r"(?:JobState=|State: |\s)(?P<value>NODE_FAIL|BOOT_FAIL|OUT_OF_ME(?:MORY|\+)|TIMEOUT|DEADLINE|PREEMPTED"
    r"|CANCELLED)(?=[\s+]|$)"
)
SLURM_STATE_CLASS = {
    "NODE_FAIL": "node_failure",
    "BOOT_FAIL": "node_failure",
    "OUT_OF_MEMORY": "oom",
    "OUT_OF_ME+": "oom",
    "TIMEOUT": "time_limit",
    "DEADLINE": "time_limit",
    "PREEMPTED": "preempted",
    "CANCELLED": "cancelled",
}


def decide_slurm_state(line: str) -> str | None:
    """The class of a job state Slurm's tools report (sacct, scontrol, seff); None for the others."""
    return class_of_field(_SLURM_STATE, SLURM_STATE_CLASS, line)


# --------------------------------------------------------------------------- a raised exception's message

# A message that says the checkpoint to resume from is not there, in any trainer's words (`checkpoint
# /ckpt/x.pth does not exist`, `no checkpoint found at ...`, `Unable to find checkpoint for ...`) or by
# a checkpoint file's suffix (`weights/best.pt can not be found`): configuration, the same on every retry.
# Read only on a raised exception's last line (base.yaml python_exception, `decide: exception_message`), so
# the same words printed as a notice (`=> no checkpoint found at ...`, then training from scratch) stay healthy.
_I = re.IGNORECASE
_MISSING = re.compile(
    r"\b(?:not found|does not exist|doesn't exist|not exist|can ?not be found|could not be found|is missing)\b",
    _I,
)
_CHECKPOINT_WORD = re.compile(r"\b(?:checkpoint|ckpt)s?\b", _I)
_FIND_CHECKPOINT = re.compile(
    r"\b(?:no|(?:cannot|can't|could not|couldn't|unable to|failed to) find(?: a| any)?)\s+"
    r"(?:valid |usable |saved |the )?(?:checkpoint|ckpt)s?\b",
    _I,
)
_CHECKPOINT_FILE = re.compile(r"\.(?:pt|pth|ckpt|bin|safetensors|pkl|h5|npz|distcp|tar)\b", _I)
_NOT_THERE = re.compile(
    r"\b(?:not found|no such file|does not exist|cannot find|can't find|could not find|unable to find)\b", _I
)
_CHECKPOINT_SUFFIX = re.compile(r"\.(?:pt|pth|ckpt|safetensors|distcp)\b", _I)


def _followed_by(first: re.Pattern[str], then: re.Pattern[str], text: str, pos: int) -> bool:
    """`first` in text[pos:], `then` after its first hit: two linear searches, no backtracking."""
    m = first.search(text, pos)
    return m is not None and then.search(text, m.end()) is not None


def is_checkpoint_missing(message: str, pos: int = 0) -> bool:
    """The message (from `pos`) says a checkpoint is not there, in words or by a checkpoint file's suffix."""
    return (
        _followed_by(_CHECKPOINT_WORD, _MISSING, message, pos)  # checkpoint /ckpt/x.pth does not exist
        or _FIND_CHECKPOINT.search(message, pos) is not None  # no checkpoint found at ...
        or _followed_by(_CHECKPOINT_FILE, _MISSING, message, pos)  # weights/best.pt can not be found
        or _followed_by(_NOT_THERE, _CHECKPOINT_SUFFIX, message, pos)  # could not find model_best.pth.tar
    )


# --------------------------------------------------------------------------- a signal, in any program's words

# strsignal() (glibc), as programs print the signal that ended a process (`Killed`, `Segmentation fault`)
STRSIGNAL_CLASS = {
    "killed": "killed",
    "segmentation fault": "segfault",
    "bus error": SIGNAL_CLASS[signal.SIGBUS],
    "floating point exception": "segfault",
    "illegal instruction": "segfault",
    "trace/breakpoint trap": SIGNAL_CLASS[signal.SIGTRAP],
}
# `killed by signal 9`, `terminated with signal SIGKILL`, `exited due to signal 11 (Segmentation fault)`,
# `received signal SIGSEGV`, Go's exec `signal: killed`: whoever prints it, the signal is the fact.
_SIGNAL_WORDS = re.compile(
    r"\b(?:killed|terminated|exited|died|ended|stopped|crashed) (?:by|with|on|due to|from) (?:the )?signal:? ?"
    r"(?:(?P<num>\d+)|(?P<name>SIG[A-Z0-9]+)|(?P<text>[A-Za-z][a-z]+(?: [a-z]+)*))"
    r"|\b[Rr]eceived (?:signal (?:(?P<num2>\d+)|(?P<name2>SIG[A-Z0-9]+))|(?P<name3>SIG[A-Z0-9]+))"
    r"|\bsignal: (?P<text2>killed|segmentation fault|bus error|illegal instruction|floating point exception)\b"
)


def decide_signal_words(line: str) -> str | None:
    """The class of the signal a line says ended (or hit) a process, by number, SIG name or strsignal text."""
    m = _SIGNAL_WORDS.search(line)
    if m is None:
        return None
    number = m.group("num") or m.group("num2")
    if number is not None:
        return signal_class(int(number))
    name = m.group("name") or m.group("name2") or m.group("name3")
    if name is not None:
        return signal_class(signal_number(name))
    text = (m.group("text") or m.group("text2") or "").lower()
    return STRSIGNAL_CLASS.get(text)


_SHELL_STATUS = re.compile(
    r"(?:[Ee]xit(?:ed)? (?:with )?(?:code|status)|exit code|returned non-zero exit status|Exit Code)[:=]?\s*(?P<code>\d+)"
)


def decide_shell_status(line: str) -> str | None:
    """The class of a 128+N exit status a shell or a container runtime reports: the signal N's, else None."""
    m = _SHELL_STATUS.search(line)
    if m is None:
        return None
    code = int(m.group("code"))
    return signal_class(code - SHELL_SIGNAL_BASE) if code > SHELL_SIGNAL_BASE else None
