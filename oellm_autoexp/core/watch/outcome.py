"""What happened to one attempt, reduced to what a restart policy matches on. No I/O.

An `Outcome` joins Slurm's view (the end state) with the log's view (the
classifier's root-cause `error_type`) and the monitor's own knowledge (the user
ran `autoexp cancel`; the progress tracker says the job hangs). `outcome_kind`
folds them into one `OutcomeKind`, first rule that applies wins:

1. `user_cancelled`                        -> user_cancelled (stop for good)
2. state UNKNOWN                           -> unknown (never a restart)
3. state COMPLETED                         -> success (log lines never turn exit 0 into a failure),
   unless the iteration counter stopped short of its total (`early_exit`): Megatron exits 0
   after `--exit-signal-handler`, `--exit-interval` or `--exit-duration-in-mins` saves mid-run
4. still queued/running (`is_alive(state)` or `in_queue`), not `still_running` -> alive
   (nothing to decide yet; this is how a PREEMPTED or requeued job that Slurm will run
   again under its id is kept from being resubmitted next to itself)
5. a hang verdict, or error_type hang/stall -> hang
6. error_type refines the state (the log knows more than Slurm):
   oom -> oom; time_limit -> timeout; node_failure, gpu_hardware, preflight_failed, filesystem -> node_fail;
   preempted -> preempted; cancelled -> cancelled
   (so CANCELLED + `... DUE TO TIME LIMIT` in the log is a timeout)
7. the Slurm state: FAILED -> crash; CANCELLED -> cancelled; TIMEOUT, DEADLINE -> timeout;
   NODE_FAIL, BOOT_FAIL -> node_fail; OUT_OF_MEMORY -> oom; PREEMPTED -> preempted
8. anything else (a fatal signal in a RUNNING job)  -> crash
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from oellm_autoexp.core.jobs.job_state import JobState, is_alive
from oellm_autoexp.core.watch.progress import HangKind


class OutcomeKind(StrEnum):
    SUCCESS = "success"  # COMPLETED: every process exited 0
    CRASH = "crash"  # failed with no more specific kind (FAILED, or a fatal signal while running)
    CANCELLED = "cancelled"  # scancel from outside autoexp (a user or an admin)
    USER_CANCELLED = "user_cancelled"  # `autoexp cancel`: the user asked the supervisor to stop
    TIMEOUT = "timeout"  # hit its wall-clock limit or deadline
    NODE_FAIL = "node_fail"  # a node failed or a GPU on it broke
    PREEMPTED = "preempted"  # preempted and no longer queued
    OOM = "oom"  # ran out of memory (GPU or host)
    HANG = "hang"  # the progress tracker (or the classifier) says it hung
    EARLY_EXIT = "early_exit"  # exited 0 before its last iteration (saved mid-run): resume it
    ALIVE = "alive"  # still queued or running with nothing to act on
    UNKNOWN = "unknown"  # Slurm said nothing reliable; never a reason to restart


# Classifier error types that mean a hang. A collective timeout is what a hang looks like
# from the ranks still waiting; when some rank printed a root cause, that root wins instead.
HANG_ERROR_TYPES = frozenset({"hang", "stall", "nccl_timeout"})

# The classifier-independent error type of an exit 0 before the last iteration (step 3).
EARLY_EXIT_ERROR_TYPE = "exit_before_end"

# Error types that fail identically on every attempt, whatever a policy's rules say: the same
# configuration lands on the same check (a launcher rejecting an argument, TP/PP that do not
# divide, a checkpoint that cannot load at this parallelism, a full disk quota).
PERMANENT_ERROR_TYPES = frozenset({"config_error"})

# Step 6 above: error types whose meaning is a kind of its own, whatever Slurm's state says.
KIND_BY_ERROR_TYPE = {
    "oom": OutcomeKind.OOM,
    "time_limit": OutcomeKind.TIMEOUT,
    "node_failure": OutcomeKind.NODE_FAIL,
    "gpu_hardware": OutcomeKind.NODE_FAIL,
    "preflight_failed": OutcomeKind.NODE_FAIL,  # a node failed its pre-flight check (docs/preflight.md)
    "filesystem": OutcomeKind.NODE_FAIL,  # a node's own mount stopped answering (base.yaml mount_lost)
    "preempted": OutcomeKind.PREEMPTED,
    "cancelled": OutcomeKind.CANCELLED,
}

# Step 7 above.
KIND_BY_STATE = {
    JobState.FAILED: OutcomeKind.CRASH,
    JobState.CANCELLED: OutcomeKind.CANCELLED,
    JobState.TIMEOUT: OutcomeKind.TIMEOUT,
    JobState.DEADLINE: OutcomeKind.TIMEOUT,
    JobState.NODE_FAIL: OutcomeKind.NODE_FAIL,
    JobState.BOOT_FAIL: OutcomeKind.NODE_FAIL,
    JobState.OUT_OF_MEMORY: OutcomeKind.OOM,
    JobState.PREEMPTED: OutcomeKind.PREEMPTED,
}


def outcome_kind(
    state: JobState,
    error_type: str | None = None,
    user_cancelled: bool = False,
    *,
    hang: bool = False,
    still_running: bool = False,
    in_queue: bool = False,
) -> OutcomeKind:
    """Fold Slurm's state, the log's root cause and the monitor's knowledge into one kind.

    The order is the module docstring's table; the first step that applies wins.
    """
    if user_cancelled:
        return OutcomeKind.USER_CANCELLED
    if state is JobState.UNKNOWN:
        return OutcomeKind.UNKNOWN
    if state is JobState.COMPLETED:
        return OutcomeKind.EARLY_EXIT if error_type == EARLY_EXIT_ERROR_TYPE else OutcomeKind.SUCCESS
    if (is_alive(state) or in_queue) and not still_running:
        return OutcomeKind.ALIVE
    if hang or error_type in HANG_ERROR_TYPES:
        return OutcomeKind.HANG
    if error_type in KIND_BY_ERROR_TYPE:
        return KIND_BY_ERROR_TYPE[error_type]
    return KIND_BY_STATE.get(state, OutcomeKind.CRASH)


@dataclass(frozen=True)
class Outcome:
    """One attempt's end (or a fatal sign in a running attempt), as the policy sees it."""

    state: JobState  # Slurm's state: the end state, or RUNNING when asking for early action
    error_type: str | None = None  # the classifier's root cause ("nccl", "oom", ...); None if none
    exit_code: int | None = None  # the process exit status, when the job has ended
    subsystem: str | None = None  # the classifier's subsystem for the root cause ("distributed", ...)
    signal: str | None = None  # name of the signal pattern that won as root cause
    node: str | None = None  # host named by a hardware/NCCL signal; may be excluded on resubmit
    user_cancelled: bool = False  # `autoexp cancel` ended it: never restarted
    still_running: bool = False  # the job is still RUNNING; the monitor asks whether to act now
    in_queue: bool = False  # Slurm will run it again under its id (preempted/requeued, still queued)
    hang: HangKind | None = None  # the progress tracker's verdict, when it judged the job hung
    nodes: int = 0  # the attempt's allocation size (a rule's `min_nodes`); 0: not known

    @property
    def kind(self) -> OutcomeKind:
        """This outcome's kind (see `outcome_kind`)."""
        return outcome_kind(
            self.state,
            self.error_type,
            self.user_cancelled,
            hang=self.hang is not None,
            still_running=self.still_running,
            in_queue=self.in_queue,
        )

    @property
    def cause(self) -> str:
        """The name used in reasons: the classifier's error_type, else the kind."""
        return self.error_type or self.kind.value

    @property
    def names(self) -> frozenset[str]:
        """What `error_types` selectors and exclude lists compare against: error_type and kind."""
        return frozenset(n for n in (self.error_type, self.kind.value) if n)
