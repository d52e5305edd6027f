"""A line cut in two by a terminal or a log handler is read whole, for a failed attempt nothing else explains."""

from __future__ import annotations

from pathlib import Path

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import Classifier
from oellm_autoexp.core.classify.guess import is_guess, judged_cause
from oellm_autoexp.core.classify.root_cause import log_cause
from oellm_autoexp.core.classify.wrapped import WRAP_MIN_CHARS, WRAPPED_GROUP, unwrapped_signals

PATTERNS = load_patterns(["megatron_production"])
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "logs"

# a terminal's soft wrap keeps every character: the space before `of` ends the first half
SOFT = [
    "2019-06-13 01:17:08.886805: E tensorflow/compiler/xla/python/local_client.cc:672] Execution of replica 0 "
    "failed: Resource exhausted: Out ",
    "of memory while trying to allocate 5520758552 bytes.",
]
# a word-wrapping handler breaks at a space and drops it
WORD = [
    "[12:00:01] ERROR    Execution of replica 0 failed: Resource exhausted: Out of",
    "memory while trying to allocate 5520758552 bytes.",
]


def _judged(lines: list[str], *, failed: bool = True):
    c = Classifier(PATTERNS)
    c.feed(["starting", *lines, "exiting"])
    return judged_cause(log_cause(c.signals), c, PATTERNS, failed=failed)


def test_a_soft_wrapped_line_is_read_whole_at_its_first_half() -> None:
    """Neither half names the failure; joined as the terminal printed them they are the allocator's OOM."""
    cause = _judged(SOFT)
    assert cause is not None and cause.error_type == "oom" and not is_guess(cause), cause
    assert cause.line_no == 2 and cause.line == SOFT[0] + SOFT[1]
    assert WRAPPED_GROUP in cause.groups


def test_a_word_wrapped_line_is_joined_with_the_space_the_handler_dropped() -> None:
    cause = _judged(WORD)
    assert cause is not None and cause.error_type == "oom" and not is_guess(cause), cause
    assert cause.line == WORD[0] + " " + WORD[1]


def test_an_attempt_that_did_not_fail_is_not_read_again() -> None:
    assert _judged(SOFT, failed=False) is None


def test_a_pair_adds_only_what_neither_line_says_alone() -> None:
    """Two complete lines that each match already, and a first half shorter than a terminal, give nothing."""
    whole = [
        "RuntimeError: CUDA error: an illegal memory access was encountered" + " " * 10,
        "ValueError: bad shape",
    ]
    assert unwrapped_signals(1, whole, PATTERNS) == []
    short = ["Resource exhausted: Out ", SOFT[1]]
    assert len(short[0]) < WRAP_MIN_CHARS
    assert unwrapped_signals(1, short, PATTERNS) == []


def test_a_healthy_run_joined_pair_by_pair_says_nothing() -> None:
    """Every adjacent pair of a healthy Megatron log, joined both ways: no cause appears."""
    lines = (FIXTURES / "megatron" / "healthy.log").read_text(encoding="utf-8").splitlines()
    assert len(lines) > 100
    assert unwrapped_signals(1, lines, PATTERNS) == []
