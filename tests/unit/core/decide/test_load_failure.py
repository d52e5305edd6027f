"""An attempt that died loading its checkpoint rolls back once and stops on a second
(core/decide/load_failure.py, through core/decide/judge.py)."""

from __future__ import annotations

import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.decide.judge import PastDecision, history_from, judge
from oellm_autoexp.core.decide.load_failure import load_failure
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, load_policy
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.attempt_view import AttemptView
from tests.paths import REPO

PATTERNS = load_patterns(["autoexp_workloads"])
TRANSIENT = load_policy(yaml.safe_load((REPO / "config" / "restart" / "megatron_transient.yaml").read_text()))

LOADING = " loading checkpoint from out/checkpoints at iteration 20"
BROKEN_LOAD = [
    LOADING,
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/site/oellm_autoexp/workloads/train.py", line 140, in resume',
    '[rank0]:   File "/site/oellm_autoexp/workloads/checkpoint.py", line 54, in load',
    '[rank0]:   File "/site/torch/serialization.py", line 1040, in load',
    "[rank0]: _pickle.UnpicklingError: invalid load key, '\\x9c'.",
]


def iteration(i: int, loss: str = "5.0E+00") -> str:
    return f" [2026-11-22 04:21:00] iteration       {i}/      30 | lm loss: {loss} |"


def ended(lines: list[str], exit_code: int = 1) -> tuple[AttemptView, object]:
    view = AttemptView(PATTERNS)
    view.mark_running(0.0)
    view.read(lines, 1.0)
    verdict = view.end_verdict(JobRecord("1", JobState.FAILED, "test", exit_code=exit_code), 2.0)
    return view, verdict


def judged(lines: list[str], history: RestartHistory | None = None, exit_code: int = 1):  # type: ignore[no-untyped-def]
    view, verdict = ended(lines, exit_code)
    base = history or RestartHistory()
    return judge(TRANSIENT, verdict, RestartHistory(attempt=base.attempt, restarts=base.restarts,  # type: ignore[arg-type]
                 iteration=view.last_iteration, first_iteration=view.first_iteration),
                 view.classifier.signals)  # fmt: skip


def test_a_traceback_through_the_loader_rolls_back_naming_the_checkpoint() -> None:
    """The resume died unpickling checkpoint 20: restart (not the exception's stop), the
    decision names the checkpoint and the exception, the evidence keeps its iteration."""
    j = judged(BROKEN_LOAD)
    assert j.decision.action is DecisionAction.RESTART
    assert "checkpoint load failed: checkpoint iteration 20 in out/checkpoints" in j.decision.reason
    assert "UnpicklingError" in j.decision.reason and "quarantining it" in j.decision.reason
    assert j.evidence.failed_load_iteration == 20 and j.effects.resubmit_after_s is not None


def test_the_same_failure_from_the_previous_checkpoint_stops_naming_both() -> None:
    """The rollback's attempt fails loading iteration 10 the same way: stop, naming 20 and 10."""
    first = judged(BROKEN_LOAD)
    past = PastDecision(first.decision.action.value, 1.0, first.evidence)
    history = history_from([past], attempt_no=2, iteration=None)
    second = judged([line.replace("iteration 20", "iteration 10") for line in BROKEN_LOAD], history)
    assert second.decision.action is DecisionAction.STOP
    reason = second.decision.reason
    assert "iteration 20 failed to load" in reason and "checkpoint iteration 10" in reason
    assert "not in the checkpoints" in reason


def test_a_failed_load_after_an_attempt_that_trained_is_decided_as_a_load_failure() -> None:
    """Attempt 1 trained to 25 and was killed; attempt 2 dies loading checkpoint 20, which reads as a
    configuration error (the checkpoint does not fit). The configuration trained, but the failed load
    says what changed: the rollback's reason, not the restart a configuration error gets after training."""
    torn = [*BROKEN_LOAD[:-1], "[rank0]: RuntimeError: Error(s) in loading state_dict for TinyLM: size mismatch "
            "for head.weight: copying a param with shape torch.Size([128, 64]) from checkpoint, the shape in "
            "current model is torch.Size([128, 32])."]  # fmt: skip
    killed = judged([iteration(25), "srun: error: n1: task 0: Killed"], exit_code=137)
    past = PastDecision(killed.decision.action.value, 1.0, killed.evidence._replace(iteration=25))
    j = judged(torn, history_from([past], attempt_no=2, iteration=None))
    assert j.outcome.error_type == "config_error"
    assert j.decision.action is DecisionAction.RESTART
    assert j.decision.reason.startswith("checkpoint load failed: checkpoint iteration 20"), j.decision.reason
    assert "environment changed" not in j.decision.reason


def test_an_exception_after_new_iterations_is_no_load_failure() -> None:
    """The resume loaded and trained on (iteration 21): an exception then is the run's own, no checkpoint
    is quarantined. Its class is a configuration's, and this configuration trained: the one restart a
    configuration error gets after training (policy.config_error_after_training), not a rollback."""
    lines = [LOADING, "  successfully loaded checkpoint from out/checkpoints at iteration 20", iteration(21),
             *BROKEN_LOAD[1:]]  # fmt: skip
    j = judged(lines)
    assert j.evidence.failed_load_iteration is None
    assert j.decision.action is DecisionAction.RESTART
    assert "trained before (iteration 21)" in j.decision.reason and "quarantin" not in j.decision.reason


def test_an_exception_outside_the_loader_is_no_load_failure() -> None:
    """No loader frame in the traceback (the data pipeline raised before the first iteration)."""
    lines = [LOADING, "[rank0]: Traceback (most recent call last):",
             '[rank0]:   File "/site/data.py", line 3, in batches', "[rank0]: ValueError: empty shard"]  # fmt: skip
    assert judged(lines).decision.action is DecisionAction.STOP


def test_a_shape_mismatch_on_load_rolls_back() -> None:
    """`size mismatch for ...` (checkpoint_incompatible) while loading, no iteration: a load failure."""
    lines = [LOADING, "RuntimeError: Error(s) in loading state_dict for TinyLM: size mismatch for head.weight: "
             "copying a param with shape torch.Size([128, 64]) from checkpoint, the shape in current model is "
             "torch.Size([128, 32])."]  # fmt: skip
    view, verdict = ended(lines)
    failure = load_failure(view.classifier.signals, verdict.cause, view.last_iteration)  # type: ignore[attr-defined]
    assert failure is not None and failure.iteration == 20 and "does not fit" in failure.why


def test_nan_right_after_a_resume_rolls_back_but_not_later() -> None:
    """NaN in the first iterations after the load blames the checkpoint; NaN 50 iterations on does not."""
    nan = "RuntimeError: Rank 0: found NaN in local forward loss calculation. Device: cpu, node: n1"
    lines = [LOADING, "  successfully loaded checkpoint from out/checkpoints at iteration 20",
             iteration(21, "nan"), nan]  # fmt: skip
    view, verdict = ended(lines)
    cause = verdict.cause  # type: ignore[attr-defined]
    assert cause is not None and cause.error_type == "numerical_instability", cause
    assert load_failure(view.classifier.signals, cause, view.last_iteration) is not None
    assert load_failure(view.classifier.signals, cause, 70) is None


def test_no_loading_line_no_load_failure() -> None:
    """A first attempt (nothing loaded) is judged on its cause alone."""
    view, verdict = ended(BROKEN_LOAD[1:])
    assert load_failure(view.classifier.signals, verdict.cause, view.last_iteration) is None  # type: ignore[attr-defined]
