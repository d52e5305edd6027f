"""Lines of a failed attempt that no pattern explains, and the pattern suggested for them (core/classify/unknown.py)."""

from __future__ import annotations

import re

import pytest

from oellm_autoexp.core.classify.prefixes import strip_prefix
from oellm_autoexp.core.classify.unknown import pattern_entry, suggest_pattern, telling_lines


def test_the_telling_lines_are_the_last_error_like_ones() -> None:
    """Error-like lines win over progress chatter; without any, the last lines are shown."""
    log = ["iteration 1", "Traceback (most recent call last):", "  File 'x.py', line 3", "iteration 2",
           "OSError: [Errno 5] Input/output error", ""]  # fmt: skip
    assert telling_lines(log) == [
        "Traceback (most recent call last):",
        "OSError: [Errno 5] Input/output error",
    ]
    assert telling_lines(["a", "b", "c"], limit=2) == ["b", "c"]


@pytest.mark.parametrize(
    ("line", "other", "keyword"),
    [
        ("[rank3]: OSError: [Errno 5] Input/output error: '/lustre/run/ckpt/iter_1000'",
         "OSError: [Errno 5] Input/output error: '/scratch/other/iter_2000'", "] Input/output error:"),
        ("E1122 04:21:33.608000 1208 api.py:986] worker group stalled after 123 steps at 0x7f00ab",
         "E1123 05:00:00.000000 99 api.py:12] worker group stalled after 7 steps at 0x1234", "] worker group stalled after"),
    ],
)  # fmt: skip
def test_a_suggested_pattern_matches_the_line_and_its_siblings(line: str, other: str, keyword: str) -> None:
    """Prefix and time stamp stripped, numbers, hex, paths and quoted strings generalised."""
    suggestion = suggest_pattern(line)
    assert suggestion is not None and suggestion.keyword == keyword
    assert re.search(suggestion.regex, strip_prefix(line)[0])
    assert re.search(suggestion.regex, other)
    entry = pattern_entry(suggestion, "my_failure")
    assert entry.startswith("- {name: my_failure, regex: '") and "error_type: TODO" in entry


def test_a_line_without_literal_text_gets_no_pattern() -> None:
    assert suggest_pattern("12 34 0x5") is None
