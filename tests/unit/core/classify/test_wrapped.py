"""A line cut in two by a terminal or a log handler is read whole, for a failed attempt nothing else explains."""

from __future__ import annotations

from pathlib import Path

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.cli.classify import classify_file, format_report
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


def test_a_catch_all_brought_back_by_two_lines_running_together_is_not_a_reading() -> None:
    """The DataLoader's pin-memory line is a specific cascade; the raised exception's catch-all was kept off it.
    Joined with the next line (its words running together), the catch-all is not a new cause."""
    cause = _judged(
        ["RuntimeError: Pin memory thread exited unexpectedly", "Traceback (most recent call last):"]
    )
    assert cause is not None and WRAPPED_GROUP not in cause.groups and cause.pattern != "python_exception", (
        cause
    )


def test_halves_a_launcher_prefixed_for_the_same_rank_are_joined_without_the_second_prefix() -> None:
    """torchrun's `--tee` (or `srun -l`) prefixes each half after a handler wrapped the message."""
    cause = _judged([f"[rank0]: {SOFT[0]}", f"[rank0]: {SOFT[1]}"])
    assert cause is not None and cause.error_type == "oom" and cause.line == f"[rank0]: {SOFT[0]}{SOFT[1]}"


def test_the_reading_is_numbered_in_the_whole_log() -> None:
    """After more than a tail's worth of healthy lines, the joined reading names its first half's line number."""
    filler = [f"step {i} went fine, nothing to report here at all" for i in range(1, 3000)]
    c = Classifier(PATTERNS)
    c.feed([*filler, *SOFT])
    cause = judged_cause(log_cause(c.signals), c, PATTERNS, failed=True)
    assert cause is not None and cause.error_type == "oom" and cause.line_no == len(filler) + 1


def test_autoexp_classify_shows_the_wrapped_reading(tmp_path: Path) -> None:
    """`autoexp classify` reports what the monitor reads: the joined line, not a guess, not `none found` alone."""
    log = tmp_path / "attempt.log"
    log.write_text("starting\n" + "\n".join(SOFT) + "\nexiting\n", encoding="utf-8")
    report = classify_file(log, PATTERNS)
    assert report["error_type"] is None and report["guess"] is None
    assert report["wrapped"] == {
        "error_type": "oom",
        "signal": report["wrapped"]["signal"],
        "line": 2,
        "text": SOFT[0] + SOFT[1],
    }
    assert report["wrapped"]["signal"].startswith("allocators.")
    assert "read whole from lines 2-3" in format_report(report)
