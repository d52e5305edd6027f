"""An attempt that died loading its checkpoint: roll back once, stop on a second. No I/O.

The checkpoint check before a resubmission reads metadata only (docs/checkpoints.md): a
checkpoint with its full length but wrong bytes (bit rot, a half-synced copy, a buggy writer)
passes it, and the resumed attempt dies in the loader. Judged on its cause alone that is an
`exception` (or a `config_error`: a shape mismatch) and the run stops, although the checkpoint
before it is complete and a rollback would finish the run.

So an attempt that began loading checkpoint N (`loading checkpoint from DIR at iteration N`)
and failed before it reached a new iteration, with a load-side cause, restarts instead: the
resubmission quarantines checkpoint N (renamed `failed_iter_...`, never deleted, within the
rollback budget: daemon/presubmit.py) and resumes from the previous complete one. A
load-side cause is one of:
- a traceback through the checkpoint loader (pattern `checkpoint_load_frame`) ending in an
  exception or a checkpoint error;
- a checkpoint that does not fit the model (subsystem `checkpoint`: a size/shape mismatch);
- NaN/Inf within the first `NAN_AFTER_RESUME_ITERATIONS` iterations after the load.
The same failure again, from the checkpoint rolled back to, says the fault is not in the
checkpoints: the run stops, naming both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from oellm_autoexp.core.classify.classifier import strip_prefix
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.policy import Decision, DecisionAction, RestartHistory

LOADING_PATTERN = "checkpoint_loading"  # ` loading checkpoint from DIR at iteration N`
LOADER_FRAME_PATTERN = "checkpoint_load_frame"  # a traceback frame inside a checkpoint loader
NAN_AFTER_RESUME_ITERATIONS = 3  # NaN/Inf this soon after a load blames the checkpoint
LOADER_ERROR_TYPES = frozenset({"exception", "config_error"})  # what a broken load raises
MAX_LINE_CHARS = 160  # of a log line quoted in a reason
RULE = "checkpoint_load_rollback"  # the Decision's rule (no restart rule's budget is charged)


@dataclass(frozen=True)
class LoadFailure:
    """The checkpoint an attempt failed to load, and the line that says so."""

    iteration: int  # the checkpoint's iteration
    directory: str  # as the loading line names it
    evidence: str  # the line that blames the load (the cause, or the loader's frame)
    why: str  # "traceback through the checkpoint loader", ...

    def describe(self) -> str:
        return (
            f"checkpoint iteration {self.iteration} in {self.directory} ({self.why}: {short(self.evidence)})"
        )


def short(line: str) -> str:
    """A log line for a reason: without its rank prefix, cut at MAX_LINE_CHARS (torch's messages run long)."""
    body = strip_prefix(line)[0].strip()
    return body if len(body) <= MAX_LINE_CHARS else body[: MAX_LINE_CHARS - 3] + "..."


def load_failure(
    signals: Sequence[Signal], cause: Signal | None, last_iteration: int | None
) -> LoadFailure | None:
    """The load failure the attempt's signals show, if any (see the module docstring)."""
    loading = next((s for s in reversed(signals) if s.pattern == LOADING_PATTERN), None)
    if loading is None or cause is None or cause.line_no < loading.line_no:
        return None
    value = loading.groups.get("load_iteration", "")
    if not value.isdigit():
        return None
    iteration, directory = int(value), loading.groups.get("load_dir", "?")
    reached_new = last_iteration is not None and last_iteration > iteration
    if cause.error_type == "numerical_instability":
        if last_iteration is not None and last_iteration <= iteration + NAN_AFTER_RESUME_ITERATIONS:
            return LoadFailure(iteration, directory, cause.line, "NaN/Inf right after the resume")
        return None
    if reached_new:
        return None
    if cause.subsystem == "checkpoint":
        return LoadFailure(iteration, directory, cause.line, "the checkpoint does not fit the model")
    frame = next(
        (
            s
            for s in signals
            if s.pattern == LOADER_FRAME_PATTERN and loading.line_no < s.line_no <= cause.line_no
        ),
        None,
    )
    if frame is not None and cause.error_type in LOADER_ERROR_TYPES:
        return LoadFailure(
            iteration,
            directory,
            cause.line,
            f"traceback through the checkpoint loader ({short(frame.line)})",
        )
    return None


def previous_load_failure(history: RestartHistory) -> int | None:
    """The checkpoint iteration the last restart quarantined for a failed load (None: it did not)."""
    return history.restarts[-1].failed_load_iteration if history.restarts else None


def load_decision(failure: LoadFailure, history: RestartHistory, still_running: bool) -> Decision:
    """Roll back from the checkpoint that failed to load; stop when the previous rollback's did too."""
    before = previous_load_failure(history)
    if before is not None:
        return Decision(
            DecisionAction.STOP,
            f"checkpoint load failed again: iteration {before} failed to load and was quarantined, and "
            f"now {failure.describe()}; the fault is not in the checkpoints (code, config or the "
            "filesystem): fix it, then resume by hand",
            rule=RULE,
            cancel_first=still_running,
        )
    return Decision(
        DecisionAction.RESTART,
        f"checkpoint load failed: {failure.describe()}; quarantining it and resuming from the "
        "previous complete checkpoint",
        rule=RULE,
        cancel_first=still_running,
    )


def with_failed_load(
    decision: Decision, failure: LoadFailure | None, history: RestartHistory, still_running: bool
) -> Decision:
    """The policy's decision, or the load failure's when the attempt died loading its checkpoint.

    A restart the policy granted anyway keeps its own reason and budget; the quarantine still
    happens (the evidence names the checkpoint). Not the restart a configuration error gets after
    training: that guesses the environment changed, and the failed load says what did.
    """
    if failure is None:
        return decision
    granted = decision.action is DecisionAction.RESTART and not decision.environment_changed
    if granted and previous_load_failure(history) is None:
        return replace(decision, reason=f"{decision.reason}; {failure.describe()} is quarantined")
    return load_decision(failure, history, still_running)
