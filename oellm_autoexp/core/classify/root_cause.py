"""The root cause of a failed job, chosen among its signals. No I/O.

The cause of a failed multi-rank job is usually one rank's own error (an OOM, a
segfault, a SIGKILL); the other ranks then time out or lose their peer
(cascades) and the launcher tears everything down (teardown). `root_cause`
picks the cause so that cascades and teardown never win over a root:

1. only `root` and `cascade` signals with an error type, never teardown;
2. roots beat cascades; a cascade is the cause only when no root was seen;
3. higher `priority` first;
4. then the rank torchrun names as its first observed failure (`failed_rank`);
5. then the earliest line.

A cause candidate is dropped when a teardown line names its process as one the
launcher killed itself (a `killed_pid` group, e.g. torchrun's `Unable to shutdown
process 123 via 15, forcefully exiting via 9`): that SIGKILL ends a rank that was
already stuck, so the stuck rank's own signal (a watchdog timeout) stays the cause.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.classify.xid_repeats import repeated_application_xid

EVIDENCE_LINES = 8


def first_failed_rank(signals: Iterable[Signal]) -> int | None:
    """The rank the launcher saw fail first (a `failed_rank` group), if any."""
    for signal in signals:
        value = signal.groups.get("failed_rank")
        if value is not None and value.isdigit():
            return int(value)
    return None


def launcher_killed_pids(signals: Iterable[Signal]) -> set[str]:
    """Processes a teardown line says the launcher killed itself (`killed_pid` groups)."""
    return {s.groups["killed_pid"] for s in signals if s.teardown and "killed_pid" in s.groups}


def root_cause(signals: Sequence[Signal]) -> Signal | None:
    """The signal that explains the failure, or None (see the module docstring)."""
    killed_by_launcher = launcher_killed_pids(signals)
    candidates = [
        s for s in signals if s.is_cause_candidate and s.groups.get("pid") not in killed_by_launcher
    ]
    pool = [s for s in candidates if s.role == "root"] or [s for s in candidates if s.role == "cascade"]
    if not pool:
        return None
    failed = first_failed_rank(signals)

    def rank_key(s: Signal) -> int:
        return 0 if failed is not None and s.rank == failed else 1

    return min(pool, key=lambda s: (-s.priority, rank_key(s), s.line_no))


SILENT_DEATH_PATTERN = "worker_died_silently"  # the cause of a teardown that no line explains


def silent_death(signals: Sequence[Signal]) -> Signal | None:
    """A worker that died without a word (SIGKILL, the kernel's OOM killer), if the log shows one.

    The launcher started tearing the job down because a worker failed (a `worker_failed`
    teardown line), and the launcher was not told to stop before that. Returned as a
    synthetic `killed` root made from the teardown line.

    The launcher's report of the failed worker's exit code decides, wherever it stands in the
    teardown: torch elastic's agent sends SIGTERM to the other workers first (`Sending process N
    closing signal SIGTERM`) and only then logs the first failure (`failed (exitcode: 1)
    local_rank: 2 ...`, SubprocessContext._poll in torch/distributed/elastic/multiprocessing/
    api.py). A status of the worker's own (1, srun's `Exited with exit code 3`) is an exit, not
    a death; a negative one (-9) is the signal that killed it.
    """
    reports = [s for s in signals if s.teardown_start == "worker_failed"]
    if not reports:
        return None
    teardown = reports[0]
    code = next((c for s in reports if (c := _exit_code(s)) is not None), None)
    if code is not None and code.isdigit():
        return None  # the worker exited with a status of its own
    if any(s.teardown_start == "stop_requested" and s.line_no < teardown.line_no for s in signals):
        return None  # scancel or the time limit: Slurm's end state says why
    return Signal(
        pattern=SILENT_DEATH_PATTERN, error_type="killed", subsystem="launcher", role="root",
        line=teardown.line, line_no=teardown.line_no, groups=teardown.groups, rank=teardown.rank,
        source=teardown.source,
    )  # fmt: skip


def _exit_code(signal: Signal) -> str | None:
    """The exit code a launcher's failure report gives (`exit_code`/`exitcode` group), if any."""
    return signal.groups.get("exit_code") or signal.groups.get("exitcode")


OUTSIDE_CANCEL_PATTERN = "step_cancelled_from_outside"  # the cause of a bare step cancel nothing explains


def outside_cancel(signals: Sequence[Signal]) -> Signal | None:
    """A step Slurm ended by a signal with no reason given, in a log that shows no failed task.

    Slurm before 24.05 prints the same bare `*** STEP 12.0 ON n1 CANCELLED AT <time> ***` for
    SIGTERM/SIGKILL sent to the step (scancel, srun itself killed) and for srun's kill after a task
    failed (slurmstepd req.c; 24.05 splits them into `DUE to SIGNAL` and `DUE TO TASK FAILURE`). A
    failed task shows itself (srun's `Exited with exit code`, torchrun's first failure: a
    `worker_failed` line); without one the step was cancelled from outside. Returned as a synthetic
    `cancelled` root made from the step's line; only asked when nothing else explains the log.
    """
    step = next((s for s in signals if s.teardown_start == "step_signalled"), None)
    if step is None or any(s.teardown_start == "worker_failed" for s in signals):
        return None
    return Signal(
        pattern=OUTSIDE_CANCEL_PATTERN, error_type="cancelled", subsystem="slurm", role="root",
        line=step.line, line_no=step.line_no, groups=step.groups, rank=step.rank, source=step.source,
    )  # fmt: skip


def log_cause(signals: Sequence[Signal]) -> Signal | None:
    """The cause of a log's failure: its root cause, or a silent death the launcher's teardown shows.

    A cascade (a survivor's collective timeout) read AFTER the launcher began tearing the job
    down for a failed worker is that death's consequence: with NCCL on one host, a dead peer is
    not reported, the survivors just time out later. The silent death wins over it. With no cause
    and no death at all, a step Slurm cancelled without a reason is the weakest reading
    (`outside_cancel`). Application Xids that recur on one GPU for several processes are read as
    that GPU's too (xid_repeats.py), a root at the GPU's priority.
    """
    repeated = repeated_application_xid(signals)
    if repeated is not None:
        signals = [*signals, repeated]
    cause = root_cause(signals)
    if cause is not None and cause.role == "root":
        return cause
    death = silent_death(signals)
    if death is not None and (cause is None or death.line_no < cause.line_no):
        return death
    if cause is None and death is None:
        return outside_cancel(signals)
    return cause


def evidence(signals: Sequence[Signal], cause: Signal | None, limit: int = EVIDENCE_LINES) -> list[str]:
    """Lines that support `cause`: its own, then others of the same error type,
    then what the launcher said about the failed rank."""
    if cause is None:
        return []
    ordered = [cause]
    ordered += [s for s in signals if s is not cause and s.error_type == cause.error_type and not s.teardown]
    ordered += [s for s in signals if s.role == "info" and s.groups]
    lines: list[str] = []
    for s in ordered:
        if s.line not in lines:
            lines.append(s.line)
        if len(lines) >= limit:
            break
    return lines
