"""How a recorded log says its job ended: Slurm's end state as a replay simulates it. No I/O.

Looked for from the end of the log, most authoritative first:

1. slurmstepd: `*** JOB 7 ON n1 CANCELLED AT ... [DUE TO TIME LIMIT|PREEMPTION|NODE FAILURE] ***`
   -> TIMEOUT / PREEMPTED / NODE_FAIL / CANCELLED (a `STEP` line is only the step).
2. our sbatch script: `autoexp: job step exited with status N` -> COMPLETED (0) or FAILED:N.
3. srun: `srun: error: n1: task 1: Exited with exit code N` -> FAILED:N; `task 1: Killed` -> FAILED:137.
4. torchrun: `ChildFailedError` / `failed (exitcode: N)` -> FAILED:1 (torchrun's own exit status).
5. nothing: FAILED:1 when the log holds a cause, else COMPLETED:0, marked as assumed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from oellm_autoexp.core.jobs.job_state import JobState

TAIL_LINES = 400  # the end markers are among the last lines of a log
_SLURMSTEPD = re.compile(r"\*\*\* JOB \S+ ON \S+ CANCELLED AT \S+(?: DUE TO (?P<why>[A-Z ]+))?[^*]*\*\*\*")
_DUE_TO = {
    "TIME LIMIT": JobState.TIMEOUT,
    "PREEMPTION": JobState.PREEMPTED,
    "NODE FAILURE": JobState.NODE_FAIL,
}
_STEP_STATUS = re.compile(r"autoexp: job step exited with status (?P<rc>\d+)")
_SRUN_EXIT = re.compile(r"srun: error: \S+: tasks? [\d,\-]+: Exited with exit code (?P<rc>\d+)")
_SRUN_KILLED = re.compile(r"srun: error: \S+: tasks? [\d,\-]+: Killed")
_TORCHRUN = re.compile(r"ChildFailedError|\] failed \(exitcode: -?\d+\)")
SIGKILL_EXIT = 137  # 128 + 9, what a shell reports for a SIGKILLed step


@dataclass(frozen=True)
class LogEnd:
    """The end state a log shows."""

    state: JobState
    exit_code: int | None
    evidence: str  # the line it was read from, or why it was assumed
    assumed: bool = False  # no line said it

    def label(self) -> str:
        """`FAILED:1`, `TIMEOUT`: the form `--end-state` takes."""
        return self.state.value + (f":{self.exit_code}" if self.exit_code is not None else "")


def end_of(lines: Sequence[str]) -> LogEnd | None:
    """The end state the last lines of a log show (see the module docstring), or None."""
    tail = lines[-TAIL_LINES:]
    for finder in (_slurmstepd, _step_status, _srun, _torchrun):
        for line in reversed(tail):
            found = finder(line)
            if found is not None:
                return found
    return None


def assumed_end(*, has_cause: bool) -> LogEnd:
    """The end of a log with no end line: failed if it holds a cause, else completed."""
    if has_cause:
        return LogEnd(JobState.FAILED, 1, "assumed: no end line, and the log holds a cause", assumed=True)
    return LogEnd(JobState.COMPLETED, 0, "assumed: no end line, and no cause in the log", assumed=True)


def _slurmstepd(line: str) -> LogEnd | None:
    m = _SLURMSTEPD.search(line) if "CANCELLED AT" in line else None
    if m is None:
        return None
    return LogEnd(_DUE_TO.get((m["why"] or "").strip(), JobState.CANCELLED), None, line)


def _step_status(line: str) -> LogEnd | None:
    m = _STEP_STATUS.search(line) if "autoexp:" in line else None
    if m is None:
        return None
    rc = int(m["rc"])
    return LogEnd(JobState.COMPLETED if rc == 0 else JobState.FAILED, rc, line)


def _srun(line: str) -> LogEnd | None:
    if "srun: error:" not in line:
        return None
    if (m := _SRUN_EXIT.search(line)) is not None:
        return LogEnd(JobState.FAILED, int(m["rc"]), line)
    if _SRUN_KILLED.search(line) is not None:
        return LogEnd(JobState.FAILED, SIGKILL_EXIT, line)
    return None


def _torchrun(line: str) -> LogEnd | None:
    return LogEnd(JobState.FAILED, 1, line) if _TORCHRUN.search(line) else None


def parse_end_state(text: str) -> LogEnd:
    """`--end-state STATE[:EXIT]` (`FAILED:1`, `TIMEOUT`); ValueError names what was expected."""
    name, _, code = text.partition(":")
    try:
        state = JobState(name.strip().upper())
    except ValueError:
        known = ", ".join(s.value for s in JobState)
        raise ValueError(f"--end-state {text!r}: unknown state {name!r} (one of {known})") from None
    if code and not code.strip().lstrip("-").isdigit():
        raise ValueError(f"--end-state {text!r}: the exit code after ':' must be an integer")
    return LogEnd(state, int(code) if code else None, f"--end-state {text}")
