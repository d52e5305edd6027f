"""Structured failure reports parsed into fields, and what the fields say happened. No I/O.

Four emitters print a report whose fields, not its first line, say what happened:

- torch elastic's ChildFailedError block (`exitcode  : -9 (pid: 123)`, `traceback : Signal 9
  (SIGKILL) received by PID 123`): -9 is a kill from outside (the OOM killer, the scheduler),
  -11 a segfault, -7 a bus error, 1 an exception printed above it;
- NVIDIA's Xid line (`NVRM: Xid (PCI:0000:3b:00): 45, pid=1, ... caused by previous Xid 79`),
  and the same code as DCGM and the k8s device plugin report it: the code (the earlier Xid a
  line names is the root) is looked up in catalogs/xid.yaml's table;
- slurmstepd's `*** JOB 12 ON node1 CANCELLED AT <time> DUE TO TIME LIMIT ***`: the reason
  decides, and a STEP cancel (srun's own teardown) leaves the job alive where a JOB cancel ends it;
- srun's `srun: error: node1: tasks 0-3: Killed`: the node, the tasks and how they ended.

Sources: pytorch/pytorch torch/distributed/elastic/multiprocessing/errors/__init__.py;
NVIDIA/open-gpu-kernel-modules (the Xid line); SchedMD/slurm src/slurmd/slurmstepd/req.c and
src/srun/launch.c. The classes match config/monitoring/catalogs/.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from oellm_autoexp.core.classify.exception_types import (
    decide_cpp_exception,
    decide_cpp_what,
    decide_error_file_message,
    decide_exception_message,
    decide_worker_exception,
)
from oellm_autoexp.core.classify.exit_reports import (
    SIGNAL_CLASS,
    STRSIGNAL_CLASS,
    class_of_field,
    decide_launcher_exit,
    decide_negative_code,
    decide_shell_status,
    decide_signal_words,
    decide_slurm_refusal,
    decide_slurm_state,
)
from oellm_autoexp.core.classify.signals import Role, SignalPattern

# --------------------------------------------------------------------------- torch elastic

_FIELD = re.compile(r"^\s*(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<value>.*)$")
_RANK = re.compile(r"(?P<rank>-?\d+) \(local_rank: (?P<local_rank>\d+)\)")
_EXITCODE = re.compile(r"(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)")
_SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\) received by PID (?P<pid>\d+)")
_ENTRY = re.compile(r"^\s*\[(?P<idx>\d+)\]:\s*$")
_ROOT_HEADER = "Root Cause (first observed failure):"

# What a worker's death by signal means: core/classify/exit_reports.py SIGNAL_CLASS.


@dataclass(frozen=True)
class ElasticFailure:
    """One `[N]:` entry of a ChildFailedError block."""

    rank: int | None = None
    local_rank: int | None = None
    exitcode: int | None = None
    pid: int | None = None
    signal: int | None = None  # from `traceback : Signal N (...) received by PID ...`
    root: bool = False  # listed under "Root Cause (first observed failure)"


def parse_elastic_failures(lines: Iterable[str]) -> list[ElasticFailure]:
    """Every `[N]:` entry of the ChildFailedError blocks in `lines`, in order."""
    failures: list[ElasticFailure] = []
    current: dict[str, int | bool | None] | None = None
    in_root = False
    for line in lines:
        if _ROOT_HEADER in line:
            in_root = True
            continue
        if _ENTRY.match(line):
            if current is not None:
                failures.append(ElasticFailure(**current))  # type: ignore[arg-type]
            current = {"root": in_root}
            continue
        field = _FIELD.match(line)
        if current is None or field is None:
            continue
        _read_field(current, field.group("key"), field.group("value"))
    if current is not None:
        failures.append(ElasticFailure(**current))  # type: ignore[arg-type]
    return failures


def _read_field(into: dict[str, int | bool | None], key: str, value: str) -> None:
    if key == "rank" and (m := _RANK.match(value)):
        into["rank"], into["local_rank"] = int(m.group("rank")), int(m.group("local_rank"))
    elif key == "exitcode" and (m := _EXITCODE.match(value)):
        into["exitcode"], into["pid"] = int(m.group("code")), int(m.group("pid"))
    elif key == "traceback" and (m := _SIGNAL.search(value)):
        into["signal"] = int(m.group("num"))


def elastic_cause(failure: ElasticFailure) -> str | None:
    """The class an elastic failure entry stands for, or None (a teardown, a clean exit).

    A negative exit code is a signal; SIGTERM/SIGINT are the launcher's own teardown. A
    positive one is the worker's own exit: 1 is an exception printed above the block.
    """
    number = failure.signal if failure.signal is not None else _signal_of(failure.exitcode)
    if number is not None:
        return SIGNAL_CLASS.get(signal.Signals(number)) if number in _KNOWN_SIGNALS else None
    if failure.exitcode is None or failure.exitcode == 0:
        return None
    return "exception"


_KNOWN_SIGNALS = {s.value for s in signal.Signals}


def _signal_of(exitcode: int | None) -> int | None:
    return -exitcode if exitcode is not None and exitcode < 0 else None


def elastic_root(lines: Iterable[str]) -> ElasticFailure | None:
    """The entry torchrun names as the first observed failure (else the first entry), or None."""
    failures = parse_elastic_failures(lines)
    return next((f for f in failures if f.root), failures[0] if failures else None)


# --------------------------------------------------------------------------- NVIDIA Xid

# The driver's line (nvidia.ko nvErrorLog: `NVRM: Xid (PCI:%04x:%02x:%02x): %d, ...`; drivers
# before ~2015 printed the bus id without `PCI:`), whatever prefix the kernel log gives it (dmesg's
# `[  219.47]` or `[Fri Aug  9 13:32:56 2024]`, syslog's `host kernel:`).
_XID = re.compile(
    r"NVRM: Xid \((?P<pci>(?:PCI:)?[0-9a-fA-F:.]+)\): (?P<code>\d+),"
    r"(?:\s*pid=(?P<pid>'?[\w<>]+'?),\s*name=(?P<name>[^,]*),)?"
    r"(?P<text>.*?)(?:caused by previous Xid (?P<previous>\d+))?\s*$"
)
# The same code as the GPU's watchers report it: DCGM's health check (dcgm_errors.h
# DCGM_FR_XID_ERROR_MSG `Detected XID %u for GPU %u`) and NVIDIA's k8s device plugin
# (internal/rm/health.go `XidCriticalError: Xid=%d on Device=%s; marking device as unhealthy.`).
_XID_REPORTED = re.compile(r"(?:Detected XID |XidCriticalError: Xid=)(?P<code>\d+)")
_XID_PREVIOUS = re.compile(r"caused by previous Xid (?P<previous>\d+)\b")

# NVIDIA's catalog gives no resolution for these codes, or a code is newer than the table:
# the GPU's side, as the driver's Xids mostly are (restart elsewhere).
XID_UNLISTED: tuple[str | None, Role] = ("gpu_hardware", "root")


@dataclass(frozen=True)
class XidEvent:
    """One driver Xid line."""

    pci: str
    code: int
    pid: str | None = None
    process: str | None = None
    previous: int | None = None  # `caused by previous Xid N`

    @property
    def root_code(self) -> int:
        """The Xid that caused this one: the earlier one it names, else its own."""
        return self.previous if self.previous is not None else self.code


def parse_xid(line: str) -> XidEvent | None:
    """The Xid a kernel-log line reports, or None."""
    m = _XID.search(line)
    if m is None:
        return None
    previous = m.group("previous")
    return XidEvent(
        pci=m.group("pci"),
        code=int(m.group("code")),
        pid=m.group("pid"),
        process=(m.group("name") or "").strip() or None,
        previous=int(previous) if previous else None,
    )


def xid_cause(event: XidEvent, table: Mapping[int, str | None]) -> str | None:
    """The class of an Xid by its root code in `table` (catalogs/xid.yaml's codes), or None."""
    return table.get(event.root_code)


def xid_root_code(line: str) -> int | None:
    """The Xid code that explains `line` in any form it is printed: the driver's line (or an earlier
    Xid it says it was `caused by`), DCGM's and the device plugin's reports; None without one."""
    previous = _XID_PREVIOUS.search(line)
    if previous is not None:
        return int(previous.group("previous"))
    event = parse_xid(line)
    if event is not None:
        return event.code
    reported = _XID_REPORTED.search(line)
    return int(reported.group("code")) if reported is not None else None


def decide_xid_code(line: str, codes: Mapping[int, tuple[str | None, Role]]) -> tuple[str | None, Role]:
    """The class and role of the Xid `line` names, from `codes` (catalogs/xid.yaml)."""
    code = xid_root_code(line)
    if code is None:
        return None, "info"
    return codes.get(code, XID_UNLISTED)


# --------------------------------------------------------------------------- slurmstepd

_STEPD = re.compile(
    r"\*\*\* (?P<entity>JOB|STEP) (?P<id>[\w.+]+) (?:ON (?P<node>\S+) )?CANCELLED AT (?P<time>\S+)"
    r"(?: DUE (?:TO|to) (?P<reason>.+?))?(?: on (?P<old_node>\S+))? \*\*\*"
)

# slurmstepd's reasons (req.c) -> the class; a plain cancel of the JOB is someone's scancel.
STEPD_REASON_CLASS = {
    "TIME LIMIT": "time_limit",
    "PREEMPTION": "preempted",
    "NODE FAILURE": "node_failure",
    "JOB REQUEUE": "requeue",
}


@dataclass(frozen=True)
class StepdCancel:
    """slurmstepd's `*** JOB|STEP <id> ON <node> CANCELLED AT <time> [DUE TO <reason>] ***`."""

    entity: str  # JOB or STEP
    job_id: str
    node: str | None
    time: str
    reason: str | None  # TIME LIMIT, PREEMPTION, NODE FAILURE, JOB REQUEUE, SIGNAL <name>, TASK FAILURE

    @property
    def ends_job(self) -> bool:
        """A JOB line: the allocation is over. A STEP line: srun's step ended, the job may live on."""
        return self.entity == "JOB"


def parse_stepd_cancel(line: str) -> StepdCancel | None:
    """The cancel a slurmstepd line reports, or None."""
    m = _STEPD.search(line)
    if m is None:
        return None
    reason = m.group("reason")
    if reason is not None:
        reason = reason.split(",")[0].strip()  # `NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS`
        reason = re.sub(r"^NODE \S+ FAILURE$", "NODE FAILURE", reason)  # Slurm < 17: `NODE n1 FAILURE`
    return StepdCancel(
        entity=m.group("entity"),
        job_id=m.group("id"),
        node=m.group("node") or m.group("old_node"),
        time=m.group("time"),
        reason=reason,
    )


def stepd_cause(cancel: StepdCancel) -> str | None:
    """The class of a slurmstepd cancel: its reason; a plain or signalled cancel of the JOB is `cancelled`.

    A STEP cancelled without a Slurm reason, or for a task's failure, is srun's own teardown:
    the cause is elsewhere (None).
    """
    if cancel.reason in STEPD_REASON_CLASS:
        return STEPD_REASON_CLASS[cancel.reason]
    if cancel.reason == "TASK FAILURE":
        return None
    if cancel.entity == "JOB" or (cancel.reason or "").startswith("SIGNAL"):
        return "cancelled"
    return None


# --------------------------------------------------------------------------- srun task ends

_SRUN_TASK = re.compile(
    r"srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\-\[\]]+): "
    r"(?:Exited with exit code (?P<code>\d+)|(?P<how>[A-Za-z][\w /]*?))(?P<core> \(core dumped\))?\s*$"
)  # `/`: strsignal(SIGTRAP) is `Trace/breakpoint trap`

# srun prints strsignal() of the signal that ended the tasks (launch.c), or `Out Of Memory`.
SRUN_END_CLASS = {name.capitalize(): cls for name, cls in STRSIGNAL_CLASS.items()} | {"Out Of Memory": "oom"}


@dataclass(frozen=True)
class SrunTaskEnd:
    """srun's `srun: error: <node>: task(s) <ids>: <how>`."""

    node: str
    tasks: tuple[int, ...]
    how: str  # strsignal() text, `Out Of Memory`, or `Exited with exit code N`
    exit_code: int | None = None
    core_dumped: bool = False


def parse_srun_task_end(line: str) -> SrunTaskEnd | None:
    """The task end an srun line reports, or None."""
    m = _SRUN_TASK.search(line)
    if m is None:
        return None
    code = m.group("code")
    how = f"Exited with exit code {code}" if code is not None else m.group("how")
    return SrunTaskEnd(
        node=m.group("node"),
        tasks=expand_tasks(m.group("tasks")),
        how=how,
        exit_code=int(code) if code is not None else None,
        core_dumped=m.group("core") is not None,
    )


def srun_task_cause(end: SrunTaskEnd) -> str | None:
    """The class of a task end: the signal's or the OOM's; an exit code or SIGTERM says nothing itself."""
    return SRUN_END_CLASS.get(end.how)


def expand_tasks(text: str) -> tuple[int, ...]:
    """Slurm's task list (`0-3,5`, `[0-2]`) as task ids."""
    ids: list[int] = []
    for part in text.strip("[]").split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            ids.extend(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            ids.append(int(part))
    return tuple(ids)


# --------------------------------------------------------------------------- deciders


def decide_srun_task(line: str) -> str | None:
    """The class of an srun task-end line (None: an exit code or a teardown signal)."""
    end = parse_srun_task_end(line)
    return srun_task_cause(end) if end is not None else None


def decide_stepd_cancel(line: str) -> str | None:
    """The class of a slurmstepd cancel line (None: srun's own step teardown)."""
    cancel = parse_stepd_cancel(line)
    return stepd_cause(cancel) if cancel is not None else None


_EXIT_FIELD = re.compile(r"exitcode\s*: (?P<code>-?\d+) \(pid: \d+\)")


def decide_elastic_signal(line: str) -> str | None:
    """The class of an elastic block's `exitcode : -N` or `traceback : Signal N` line: the signal's.

    A positive exit code gives None here: the worker's own error line says what happened
    (catalogs/elastic.yaml reads `exitcode : 1` as a cascade for when none is in view).
    """
    sig = _SIGNAL.search(line)
    if sig is not None:
        return elastic_cause(ElasticFailure(signal=int(sig.group("num"))))
    field = _EXIT_FIELD.search(line)
    if field is not None and int(field.group("code")) < 0:
        return elastic_cause(ElasticFailure(exitcode=int(field.group("code"))))
    return None


_API_EXIT = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\)")


def decide_elastic_exit(line: str) -> str | None:
    """The class of the elastic agent's `failed (exitcode: N) local_rank: ...` line.

    torch/distributed/elastic/multiprocessing/api.py logs it for the first failed worker:
    a negative code is the signal that killed it (-9 from outside, -11 a segfault), a
    positive one the worker's own exit (an exception, printed above when the worker's
    output is in view); SIGTERM/SIGINT are the agent's own teardown (None).
    """
    m = _API_EXIT.search(line)
    if m is None:
        return None
    return elastic_cause(ElasticFailure(exitcode=int(m.group("code"))))


# strsignal() names (glibc) -> the class, for a worker process a signal ended. SIGBUS in a
# DataLoader worker is shared memory running out (torch/csrc/DataLoader.cpp adds "It is
# possible that dataloader's workers are out of shared memory"); SIGTERM is a kill from outside.
_WORKER_SIGNAL = re.compile(r"killed by signal: (?P<value>[A-Za-z][A-Za-z -]*[A-Za-z])")
WORKER_SIGNAL_CLASS = {name.capitalize(): cls for name, cls in STRSIGNAL_CLASS.items()} | {
    "Terminated": "killed"
}


def decide_worker_signal(line: str) -> str | None:
    """The class of torch's `DataLoader worker (pid N) is killed by signal: <strsignal>.`"""
    return class_of_field(_WORKER_SIGNAL, WORKER_SIGNAL_CLASS, line)


# fairseq's DynamicLossScaler (fairseq/optim/dynamic_loss_scaler.py check_overflow; fp16_optimizer.py
# in 0.6) divides the scale by its factor (2) on an overflow and raises FloatingPointError instead of
# printing when the result is at or below --min-loss-scale (default 1e-4): every printed scale is above
# the floor. One that a single further halving takes to the floor (X / 2 <= 1e-4: 1.22e-4 from the
# usual powers of two) is the last step before the run ends, the collapse; 2.44e-4 and above is a
# routine overflow skip (healthy). A scale below 1e-4 is printed only under a lowered floor. apex's
# scalers (amp's handle.py, fp16_utils' FP16_Optimizer: `... Skipping step, reducing loss scale to X`)
# have no minimum and keep halving: the same threshold says when the scale has collapsed.
MIN_LOSS_SCALE = 1e-4
SCALE_FACTOR = 2.0
_SCALE = re.compile(r"(?:setting|reducing) loss scale to:? (?P<value>[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)")


def decide_loss_scale_value(line: str) -> str | None:
    """`setting loss scale to: X` / `reducing loss scale to X`: numerical_instability when X / 2 <= MIN_LOSS_SCALE."""
    m = _SCALE.search(line)
    if m is None:
        return None
    return "numerical_instability" if float(m.group("value")) / SCALE_FACTOR <= MIN_LOSS_SCALE else None


# amdkfd's SQ_INTERRUPT_ERROR_TYPE (linux drivers/gpu/drm/amd/amdkfd/kfd_int_process_v9.c), the `err_type` of
# amdgpu's `sq_intr: error, ...` line (`type` on gfx10/gfx11, kfd_int_process_v10.c/v11.c): an illegal
# instruction or a memory violation is the kernel's own fault; an EDC error is poisoned memory, the GPU's.
_AMD_SQ_ERROR = re.compile(r"\b(?:err_)?type (?P<value>\d+)")
AMD_SQ_ERROR_CLASS = {"0": "gpu_hardware", "1": "cuda_error", "2": "cuda_error", "3": "gpu_hardware"}


def decide_amd_sq_error(line: str) -> str | None:
    """The class of amdgpu's shader error interrupt, by its err_type (None when the line has none)."""
    return class_of_field(_AMD_SQ_ERROR, AMD_SQ_ERROR_CLASS, line)


# A pattern's `decide:` names one of these: its line's fields, not the pattern, give the class.
DECIDERS = {
    "srun_task": decide_srun_task,
    "stepd_cancel": decide_stepd_cancel,
    "elastic_signal": decide_elastic_signal,
    "elastic_exit": decide_elastic_exit,
    "worker_signal": decide_worker_signal,
    "loss_scale_value": decide_loss_scale_value,
    "negative_code": decide_negative_code,
    "amd_sq_error": decide_amd_sq_error,
    "launcher_exit": decide_launcher_exit,
    "slurm_refusal": decide_slurm_refusal,
    "exception_message": decide_exception_message,
    "slurm_state": decide_slurm_state,
    "worker_exception": decide_worker_exception,
    "cpp_exception": decide_cpp_exception,
    "cpp_what": decide_cpp_what,
    "error_file_message": decide_error_file_message,
    "signal_words": decide_signal_words,
    "shell_status": decide_shell_status,
}


def decide(pattern: SignalPattern, line: str) -> tuple[str | None, Role]:
    """The class and role of a hit of `pattern` (which has `decide:`) on `line`: its fields' reading.

    A reading that gives no class makes the hit info (never a cause).
    """
    if pattern.decide == "xid_code":
        error_type, role = decide_xid_code(line, pattern.codes or {})
    else:
        error_type, role = DECIDERS[pattern.decide or ""](line), pattern.role
    return error_type, role if error_type is not None else "info"
