"""When a failed scancel is tried again, and how its failure reads (core/jobs/cancel_retry.py)."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.jobs.cancel_retry import (
    CANCEL_RETRY_MAX_S,
    cancel_error,
    cancelled_line,
    failing_line,
    is_failing_line,
    retry_after_s,
)


@pytest.mark.parametrize(
    ("failures", "wait_s"),
    [(0, 0.0), (1, 5.0), (2, 10.0), (3, 20.0), (4, 40.0), (5, 60.0), (6, 60.0), (500, 60.0)],
)
def test_the_backoff_doubles_from_5_s_and_stops_growing_at_a_minute(failures: int, wait_s: float) -> None:
    """5, 10, 20, 40 s, then once a minute for as long as scancel fails (bounded, never given up)."""
    assert retry_after_s(failures) == wait_s <= CANCEL_RETRY_MAX_S


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("scancel failed (1): scancel: error: Kill job error on job id 12: Unexpected message received",
         "scancel: error: Kill job error on job id 12: Unexpected message received"),
        ("scancel failed (1): first line\n  second line", "first line second line"),
        ("scancel did not answer within 30 s", "scancel did not answer within 30 s"),
        ("scancel failed (1): ", "no error text"),
    ],
)  # fmt: skip
def test_the_error_is_what_scancel_said_on_one_line(message: str, said: str) -> None:
    """run_slurm_command's "<cmd> failed (N): <stderr>" gives its stderr; other messages stay whole."""
    assert cancel_error(message) == said


def test_the_lines_name_the_decision_and_the_count() -> None:
    assert failing_line("stop", "boom") == "stop requested, cancel failing: boom"
    assert cancelled_line("12", 1) == "job 12 cancelled after 1 failed scancel"
    assert cancelled_line("12", 3) == "job 12 cancelled after 3 failed scancels"
    assert is_failing_line(failing_line("restart", "x")) and not is_failing_line(cancelled_line("12", None))
