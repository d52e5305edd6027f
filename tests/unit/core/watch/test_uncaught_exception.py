"""An uncaught exception whose process lingers is judged once the settle window passes with no
progress (core/classify/uncaught.py, core/watch/attempt_view.py); a logged, handled one is not."""

from __future__ import annotations

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.classify.uncaught import (
    Hold,
    acts_on,
    has_excepthook_prefix,
    hold_of,
    is_uncaught_exception,
    is_withdrawn,
)
from oellm_autoexp.core.decide.judge import judge
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, load_policy
from oellm_autoexp.core.watch.attempt_view import AttemptView, EarlySettings
from oellm_autoexp.core.watch.verdict import Trigger
from tests.paths import REPO

PATTERNS = load_patterns(["megatron_production"])
TRANSIENT = load_policy(yaml.safe_load((REPO / "config" / "restart" / "megatron_transient.yaml").read_text()))


def iteration(i: int) -> str:
    return f" [2026-11-22 04:21:0{i % 10}] iteration        {i}/      12 | lm loss: 5.0E+00 |"


# torch.distributed's excepthook: every line of an uncaught exception's traceback prefixed.
UNCAUGHT = [
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "train.py", line 10, in <module>',
    "[rank0]:     raise RuntimeError('async checkpoint writer failed')",
    "[rank0]: RuntimeError: async checkpoint writer failed",
]
# logging.exception of a caught one: the same traceback without the prefix.
HANDLED = [
    "ERROR:root:sample 17 failed, skipped",
    "Traceback (most recent call last):",
    '  File "train.py", line 10, in <module>',
    "ValueError: bad sample 17",
]


def view(settle_s: float = 5.0) -> AttemptView:
    v = AttemptView(PATTERNS, early=EarlySettings(settle_s=settle_s))
    v.mark_running(0.0)
    v.read([iteration(1), iteration(2)], 1.0)
    return v


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[rank0]: RuntimeError: boom", True),
        ("0: [rank3]: RuntimeError: boom", True),  # srun --label in front of the excepthook's prefix
        ("[default0]:RuntimeError: boom", False),  # torchrun --tee prints caught ones too
        ("0: RuntimeError: boom", False),
        ("RuntimeError: boom [rank0]:", False),
    ],
)
def test_the_excepthook_prefix(line: str, expected: bool) -> None:
    """Only torch.distributed's `[rankN]:` prefix, at the line's start, marks an uncaught exception."""
    assert has_excepthook_prefix(line) is expected


def test_a_specific_root_is_no_uncaught_candidate() -> None:
    """The catch-all alone: a specific root (already fatal) or a teardown line is not re-judged here."""
    oom = Signal(
        pattern="cuda_oom", error_type="oom", subsystem="cuda", role="root", line="[rank0]: x", line_no=3
    )
    assert not is_uncaught_exception(oom, None)


def _signal(line: str, *, fallback: bool, error_type: str | None = "exception", line_no: int = 10) -> Signal:
    return Signal(
        pattern="p", error_type=error_type, subsystem="python", role="root", line=line, line_no=line_no,
        fallback=fallback,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("signal", "header", "hold"),
    [
        (_signal("torch.OutOfMemoryError: CUDA out of memory.", fallback=False), None, Hold.FATAL),
        (_signal("[rank0]: RuntimeError: boom", fallback=True), None, Hold.UNCAUGHT),
        (_signal("RuntimeError: boom", fallback=True), 5, Hold.UNCAUGHT),  # in a Root Cause block
        (_signal("RuntimeError: boom", fallback=True), None, None),  # a logged, caught one
        (_signal("RuntimeError: boom", fallback=True, line_no=100), 5, None),  # past the block's span
        (_signal("[rank0]: some info", fallback=False, error_type=None), None, None),
    ],
)
def test_how_the_monitor_holds_a_line(signal: Signal, header: int | None, hold: Hold | None) -> None:
    """A fatal line is held for good, an uncaught exception's line until progress follows, others not at all."""
    assert hold_of(signal, header) is hold


@pytest.mark.parametrize(
    ("hold", "progress_line_no", "withdrawn"),
    [
        (Hold.UNCAUGHT, 11, True),
        (Hold.UNCAUGHT, 10, False),  # the line itself, or progress before it
        (Hold.UNCAUGHT, None, False),
        (Hold.FATAL, 11, False),  # a fatal line is never withdrawn
        (None, 11, False),
    ],
)
def test_a_later_progress_line_withdraws_only_an_uncaught_exception(
    hold: Hold | None, progress_line_no: int | None, withdrawn: bool
) -> None:
    """Whatever printed the uncaught exception went on; a fatal line stays whatever follows."""
    assert is_withdrawn(hold, 10, progress_line_no) is withdrawn


def test_acts_on_joins_the_hold_and_the_withdrawal() -> None:
    """The decision both the corpus score and the attempt view take for one line."""
    uncaught = _signal("[rank0]: RuntimeError: boom", fallback=True)
    fatal = _signal("torch.OutOfMemoryError: CUDA out of memory.", fallback=False)
    assert acts_on(uncaught, None, None) and not acts_on(uncaught, None, 11)
    assert acts_on(fatal, None, 11)


def test_an_uncaught_exception_that_lingers_is_judged_after_the_settle_window() -> None:
    """The traceback opens the settle window at its exception line; no progress after it: judged on it."""
    v = view(settle_s=5.0)
    v.read(UNCAUGHT, 10.0)
    assert v.fatal_due_s() == 15.0
    assert v.fatal_verdict(14.9) is None
    verdict = v.fatal_verdict(15.0)
    assert verdict is not None and verdict.trigger is Trigger.FATAL_LINE
    assert verdict.cause is not None and verdict.cause.line == UNCAUGHT[-1]
    assert verdict.observed is not None and "no progress line" in verdict.observed
    j = judge(TRANSIENT, verdict, RestartHistory(iteration=v.last_iteration))
    assert j.decision.action is DecisionAction.STOP  # an exception, as at the job's end
    assert j.evidence.first_fatal_line == UNCAUGHT[-1] and j.evidence.after_first_fatal_s == 5.0


def test_progress_after_the_exception_withdraws_it() -> None:
    """The run went on (iterations after it within the window): nothing is decided, ever, from that line."""
    v = view(settle_s=5.0)
    v.read(UNCAUGHT, 10.0)
    v.read([iteration(3)], 12.0)
    assert v.fatal_due_s() is None and v.fatal_verdict(100.0) is None


def test_a_peers_in_flight_iteration_does_not_withdraw_it() -> None:
    """Two ranks: rank 0 prints the iteration it was finishing just after rank 1's traceback (2-GPU run,
    2026-11-25). Read with the traceback, that next iteration is no sign of life: judged at the window."""
    v = view(settle_s=5.0)
    v.read([*UNCAUGHT, iteration(3)], 10.0)
    assert v.fatal_due_s() == 15.0
    verdict = v.fatal_verdict(15.0)
    assert verdict is not None and verdict.cause is not None and verdict.cause.line == UNCAUGHT[-1]


def test_progress_beyond_the_in_flight_iteration_in_the_same_read_withdraws_it() -> None:
    """A traceback followed by two new iterations: the run went on past the one in flight."""
    v = view(settle_s=5.0)
    v.read([*UNCAUGHT, iteration(3), iteration(4)], 10.0)
    assert v.fatal_due_s() is None


def test_the_next_iteration_read_later_withdraws_it() -> None:
    """The next iteration read well after the traceback (slow steps) is the run going on, not in flight."""
    v = view(settle_s=5.0)
    v.read(UNCAUGHT, 10.0)
    v.read([iteration(3)], 13.0)
    assert v.fatal_due_s() is None


def test_a_handled_traceback_opens_no_window() -> None:
    """A caught exception logged with its traceback: no window, however long the run is quiet after it."""
    v = view(settle_s=5.0)
    v.read(HANDLED, 10.0)
    assert v.fatal_due_s() is None and v.fatal_verdict(1000.0) is None


def test_a_fatal_line_after_it_keeps_the_window_and_is_not_withdrawn() -> None:
    """A fatal line (OOM) after the traceback confirms it: progress no longer withdraws, the window keeps its start."""
    v = view(settle_s=5.0)
    v.read(UNCAUGHT, 10.0)
    v.read(["[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."], 11.0)
    v.read([iteration(3)], 12.0)
    verdict = v.fatal_verdict(15.0)
    assert verdict is not None and verdict.cause is not None and verdict.cause.error_type == "oom"


def test_a_later_uncaught_exception_opens_a_new_window() -> None:
    """Withdrawn once, a second uncaught exception with nothing after it is judged from its own line."""
    v = view(settle_s=5.0)
    v.read(UNCAUGHT, 10.0)
    v.read([iteration(3), iteration(4)], 11.0)  # past the iteration in flight: the run went on
    assert v.fatal_due_s() is None
    v.read(UNCAUGHT, 20.0)
    assert v.fatal_due_s() == 25.0 and v.fatal_verdict(25.0) is not None
