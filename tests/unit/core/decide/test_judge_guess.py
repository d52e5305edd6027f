"""Judging a FAILED attempt on a guessed cause (core/decide/judge.py): the reason says it was guessed, from
which line, and the restart policy acts on the guessed class as on a recognised one."""

from __future__ import annotations

import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.classify.vocabulary import GUESS_PATTERN
from oellm_autoexp.core.decide.judge import Judgement, guess_note, judge
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, load_policy
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.attempt_view import AttemptView
from tests.paths import REPO

PATTERNS = load_patterns(["megatron_production"])
TRANSIENT = load_policy(yaml.safe_load((REPO / "config" / "restart" / "megatron_transient.yaml").read_text()))
# No shipped pattern matches these; the shipped model reads them as numerical_instability and nccl.
DIVERGED = "ERROR:root:training diverged at iteration 120: the loss exploded to 3.1e+38, stopping the run"
QP_FAILED = "ERROR: InfiniBand queue pair transition failed on mlx5_0, peer unreachable"


def _judged(lines: list[str], state: JobState = JobState.FAILED) -> Judgement:
    view = AttemptView(PATTERNS)
    view.mark_running(0.0)
    view.read(["starting the run", *lines, "bye"], 1.0)
    verdict = view.end_verdict(JobRecord("7", state, "sacct", exit_code=1), 5.0)
    return judge(TRANSIENT, verdict, RestartHistory(), view.classifier.signals)


def test_the_policy_acts_on_a_guessed_class_that_restarts() -> None:
    """megatron_transient restarts a guessed nccl failure, as it does a recognised one; the reason names
    the guess, its line and number."""
    j = _judged([QP_FAILED])
    assert j.decision.action is DecisionAction.RESTART
    assert j.evidence.error_type == "nccl" and j.evidence.signal == GUESS_PATTERN
    assert j.evidence.root_line_no == 2 and QP_FAILED in j.evidence.lines
    note = "; nccl guessed from the words of line 2 (no pattern matched it; p="
    assert note in j.decision.reason and j.decision.reason.endswith(f"): {QP_FAILED}")
    assert j.decision.reason.index(note) > 0  # after the policy's own reason


def test_a_guess_never_stops_a_run_the_unguessed_reading_restarts() -> None:
    """A guessed numerical_instability would stop under megatron_transient (a NaN/Inf repeats); a guess is
    not evidence enough to stop a run that waits for a human then: the job is restarted as without the guess
    (a crash, within the budget), and the reason names the guess and why it did not stop."""
    j = _judged([DIVERGED])
    assert j.decision.action is DecisionAction.RESTART
    assert j.outcome.error_type is None and j.evidence.signal is None  # judged as without the guess
    assert "numerical_instability guessed from the words of line 2" in j.decision.reason
    assert j.decision.reason.endswith("; a guess never stops a run")
    assert j.decision.reason.startswith("Transient failure detected (error_type=crash)")


def test_no_note_without_a_guess() -> None:
    """A FAILED attempt with no telling line is judged a crash, and its reason says nothing of a guess;
    nor does a recognised cause's."""
    plain = _judged(["some random error happened here"])
    assert plain.decision.reason == "Transient failure detected (error_type=crash)"
    oom = _judged(["[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."])
    assert "guessed" not in oom.decision.reason and oom.evidence.signal != GUESS_PATTERN


def test_guess_note_cuts_a_long_line() -> None:
    """The note gives the class, line number and probability, and at most 160 characters of the line."""
    line = "  ERROR: " + "x" * 400 + "  "
    cause = Signal(pattern=GUESS_PATTERN, error_type="nccl", subsystem="vocabulary", role="root", line=line,
                   line_no=4711, groups={"probability": "0.97"})  # fmt: skip
    note = guess_note(cause)
    assert note.startswith(
        "nccl guessed from the words of line 4711 (no pattern matched it; p=0.97): ERROR: x"
    )
    assert note.endswith(line.strip()[:160]) and len(note.split("): ", 1)[1]) == 160


# Catch-all exception lines (python_exception: no rule knows the class or the message); the shipped model's
# words read the first as cuda_error and the second as config_error (both at p=1.00 when written).
ILLEGAL_INSTRUCTION = "[rank0]: RuntimeError: the device kernel returned an illegal instruction on the GPU"
OPTION_INVALID = (
    "[rank0]: AssertionError: the requested optimizer option is invalid for this model configuration"
)


def test_a_refined_catch_all_that_restarts_is_restarted() -> None:
    """megatron_transient stops on a Python exception; refined to cuda_error by its words, the attempt is
    restarted as a CUDA error is, and the reason says the class refines a catch-all exception."""
    j = _judged([ILLEGAL_INSTRUCTION])
    assert j.decision.action is DecisionAction.RESTART
    assert j.evidence.error_type == "cuda_error" and j.evidence.signal == GUESS_PATTERN
    assert ("cuda_error guessed from the words of line 2 (a catch-all exception: its class and message "
            "matched no rule; p=") in j.decision.reason  # fmt: skip


def test_a_refined_catch_all_that_stops_still_stops_for_its_own_reason() -> None:
    """Refined to config_error, the attempt stops, as the catch-all `exception` it replaced stops. The
    reading's own reason stands (a Python exception) and the guess is a note after it: a code bug whose
    words read as configuration is not told "fix the configuration"."""
    j = _judged([OPTION_INVALID])
    assert j.decision.action is DecisionAction.STOP
    assert j.evidence.error_type == "exception"
    assert j.decision.reason.startswith("Permanent failure detected (excluded error_type: exception); ")
    assert "config_error guessed from the words of line 2 (a catch-all exception" in j.decision.reason
    assert "a guess never stops a run" not in j.decision.reason


# A policy that lets a running job with a Python exception end by itself (act_on_fatal_line off) and
# restarts it then; configuration errors stop.
WAITS = load_policy({"rules": [
    {"name": "py", "match": {"error_types": ["exception"]}, "action": "restart", "max_retries": 1,
     "act_on_fatal_line": False},
    {"name": "transient", "match": {"kinds": ["crash", "cancelled", "node_fail", "hang", "oom"]},
     "action": "restart", "exclude_error_types": ["config_error", "oom"]},
]})  # fmt: skip


def test_a_guess_never_stops_a_job_the_reading_lets_run() -> None:
    """The fatal-line verdict of a running job: its catch-all exception would wait for the end under WAITS;
    refined to config_error it would stop the job now. The reading's wait stands, the reason naming the guess."""
    view = AttemptView(PATTERNS)
    view.mark_running(0.0)
    view.read(["starting the run", OPTION_INVALID], 1.0)
    verdict = view.fatal_verdict(100.0)
    assert verdict is not None and verdict.cause is not None and verdict.cause.error_type == "config_error"
    j = judge(WAITS, verdict, RestartHistory(), view.classifier.signals)
    assert j.decision.action is DecisionAction.NONE, j.decision
    assert j.decision.reason.endswith("; a guess never stops a run")


def test_the_fatal_verdict_of_a_refined_line_does_not_repeat_it() -> None:
    """The refined guess stands on the first fatal line itself: the verdict's note says the line was an
    uncaught exception no progress followed, and does not name it a second time as "first fatal line"."""
    view = AttemptView(PATTERNS)
    view.mark_running(0.0)
    view.read(["starting the run", ILLEGAL_INSTRUCTION], 1.0)
    verdict = view.fatal_verdict(100.0)
    assert verdict is not None and verdict.cause is not None and verdict.cause.error_type == "cuda_error"
    assert verdict.observed is not None and "first fatal line" not in verdict.observed
    assert verdict.observed.startswith("uncaught exception (line 2)")
