"""The end of the log a Classifier keeps for a guess (core/classify/classifier.py `tail_lines`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import TAIL_CHARS, Classifier, ProgressMark

PATTERNS = load_patterns(["megatron_production"])

# About three tails of text: filler of varying length and runs of Megatron iteration lines (so that
# feed_marked hands progress over as marks), and one error line no filler resembles.
LOG = [
    f" [2026-11-22 04:21:01] iteration {i:8d}/  100000 | lm loss: 5.0E+00 |"
    if i % 7 < 3
    else f"filler line {i} " + "x" * (i % 53)
    for i in range(1, 2400)
]
TEXT = "\n".join(LOG) + "\n"
BLOCK = 400  # lines a feed: enough iteration lines for runs of them to collapse (core/classify/matcher.py)


def _by_lines(c: Classifier) -> None:
    for start in range(0, len(LOG), BLOCK):
        c.feed(LOG[start : start + BLOCK])


def _by_chunks(c: Classifier) -> None:
    for start in range(0, len(TEXT), 997):  # chunks cut lines in the middle
        c.feed_text(TEXT[start : start + 997])


def _by_marks(c: Classifier) -> None:
    marks = 0
    for start in range(0, len(LOG), BLOCK):
        found = c.feed_marked("\n".join(LOG[start : start + BLOCK]) + "\n")
        marks += sum(isinstance(s, ProgressMark) for s in found)
    assert marks > 0  # the marked path, not its fallback to feed_text


FEEDS: dict[str, Callable[[Classifier], None]] = {
    "feed": _by_lines,
    "feed_text": _by_chunks,
    "feed_marked": _by_marks,
}


@pytest.mark.parametrize("how", list(FEEDS))
def test_the_tail_is_whole_lines_numbered_from_the_log_start(how: str) -> None:
    """Past TAIL_CHARS, the tail holds the last whole lines that fit (a line cut at its front is dropped),
    numbered as in the log: the last is line `lines_seen`."""
    assert len(TEXT) > 2 * TAIL_CHARS
    c = Classifier(PATTERNS)
    FEEDS[how](c)
    first, lines = c.tail_lines()
    assert c.lines_seen == len(LOG)
    assert first + len(lines) - 1 == c.lines_seen
    assert lines == LOG[first - 1 :]  # whole lines, each the log's line of that number
    kept = sum(len(line) + 1 for line in lines)
    assert kept <= TAIL_CHARS < kept + len(LOG[first - 2]) + 1  # as many as fit, at most one short


def test_every_way_of_feeding_keeps_the_same_tail() -> None:
    """feed, feed_text in chunks and feed_marked give the same tail and the same first line number."""
    tails = []
    for feed in FEEDS.values():
        c = Classifier(PATTERNS)
        feed(c)
        tails.append(c.tail_lines())
    assert tails[0] == tails[1] == tails[2]


def test_a_short_log_is_kept_whole_and_a_partial_line_waits() -> None:
    """Under TAIL_CHARS every line is kept from line 1; a line still being written joins at flush."""
    c = Classifier(PATTERNS)
    c.feed_text("first line\nsecond line\nthird, still being writ")
    assert c.tail_lines() == (1, ["first line", "second line"])
    c.feed_text("ten\n")
    assert c.tail_lines() == (1, ["first line", "second line", "third, still being written"])
    c.feed_text("no newline yet")
    c.flush()
    assert c.tail_lines() == (
        1,
        ["first line", "second line", "third, still being written", "no newline yet"],
    )


def test_carriage_returns_are_not_kept() -> None:
    """Windows line ends (feed_text's line-by-line path) leave no `\\r` on the kept lines."""
    c = Classifier(PATTERNS)
    c.feed_text("one\r\ntwo\r\n")
    assert c.tail_lines() == (1, ["one", "two"])


def test_a_line_longer_than_the_tail_is_never_handed_over_cut() -> None:
    """A single line past TAIL_CHARS cannot be kept whole: the tail is then empty, numbered after it."""
    c = Classifier(PATTERNS)
    c.feed(["short", "y" * (TAIL_CHARS + 10)])
    assert c.tail_lines() == (3, [])
    c.feed(["after"])
    assert c.tail_lines() == (3, ["after"])
