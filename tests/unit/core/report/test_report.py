"""The session report's model and page: goodput, lost time per restart, bars, markers, escaping."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.report.report import (
    AttemptData,
    DecisionData,
    JobData,
    SessionData,
    build_report,
    timed_points,
    useful_seconds,
)
from oellm_autoexp.core.report.report_html import format_duration, render_report_html
from oellm_autoexp.core.watch.evidence import Evidence

T0 = 1_700_000_000.0


def _attempt(
    no: int, start: float, end: float | None, state: str, points: list[tuple[float, int]]
) -> AttemptData:
    return AttemptData(no, f"{100 + no}", state, 1 if state == "FAILED" else 0, T0 + start,
                       None if end is None else T0 + end, tuple((T0 + t, i) for t, i in points))  # fmt: skip


def _restart(no: int, at: float, after_fatal: float | None, cause: str = "nccl") -> DecisionData:
    ev = Evidence(
        rule="transient", error_type=cause, after_first_fatal_s=after_fatal, lines=("NCCL error <x>",)
    )
    return DecisionData(
        no, no, "restart", f"Transient failure detected (error_type={cause})", T0 + at, ev, 3, 2
    )


def two_attempts() -> JobData:
    """Attempt 1 trains iterations 1-8 (one per 10 s), dies at 85 s; attempt 2 resumes at 6 and completes."""
    first = _attempt(1, 0, 90, "FAILED", [(10 + 10 * i, i + 1) for i in range(8)])
    second = _attempt(2, 100, 180, "COMPLETED", [(120 + 10 * i, 6 + i) for i in range(7)])
    stop = DecisionData(9, 2, "stop", "Job completed successfully", T0 + 181, Evidence(kind="success"))
    return JobData("job", "completed", "", (first, second), (_restart(1, 90, 5.0), stop))


def test_useful_time_leaves_out_iterations_a_later_attempt_redid() -> None:
    """Iterations 6-8 of attempt 1 were trained again after the resume: only 1->5 counts there."""
    job = two_attempts()
    assert useful_seconds(job.attempts) == pytest.approx(40 + 60)


def test_summary_goodput_restarts_and_lost_time_by_cause() -> None:
    """Goodput is useful over allocated time; a restart loses from its fatal line to the next first iteration."""
    report = build_report(SessionData(1, "s", T0 + 200, (two_attempts(),)))
    job = report.jobs[0]
    assert job.allocation_s == pytest.approx(90 + 80)
    assert report.summary.goodput == pytest.approx(100 / 170)
    assert report.summary.restarts_by_cause == (("nccl", 1),)
    (loss,) = job.losses
    assert (loss.fatal_s, loss.resumed_s) == (T0 + 85, T0 + 120)
    assert report.summary.lost_by_cause == (("nccl", 35.0),)
    assert [b.ended_as for b in job.bars] == ["failed", "completed"]


@pytest.mark.parametrize(
    ("after_fatal", "next_progress", "expected_lost"),
    [
        (5.0, True, 35.0),  # the fatal line was read 5 s before the decision
        (None, True, 30.0),  # no fatal line: from the attempt's end
        (None, False, 90.0),  # the next attempt never iterated: until its end
    ],
)
def test_lost_time_falls_back_when_a_mark_is_missing(
    after_fatal: float | None, next_progress: bool, expected_lost: float
) -> None:
    """Lost time uses the fatal line, else the end; the next first iteration, else its end."""
    job = two_attempts()
    second = job.attempts[1] if next_progress else _attempt(2, 100, 180, "COMPLETED", [])
    job = JobData("job", "completed", "", (job.attempts[0], second), (_restart(1, 90, after_fatal),))
    (loss,) = build_report(SessionData(1, "s", T0 + 200, (job,))).jobs[0].losses
    assert loss.lost_s == pytest.approx(expected_lost)


def test_running_attempt_ends_now_and_never_submitted_has_no_bar() -> None:
    """A live attempt's bar runs to `now`; an intent that never reached the executor shows no bar."""
    live = _attempt(1, 0, None, "RUNNING", [(5, 1)])
    never = AttemptData(2, None, "UNKNOWN", None, None, None)
    report = build_report(SessionData(1, "s", T0 + 50, (JobData("j", "active", "", (live, never), ()),)))
    (bar,) = report.jobs[0].bars
    assert (bar.ended_as, bar.end_s) == ("running", T0 + 50)


def test_page_escapes_log_lines_and_lists_every_attempt_and_decision() -> None:
    """Log text reaches the page escaped; every attempt has a bar and every decision a marker and a panel."""
    page = render_report_html(build_report(SessionData(1, "s", T0 + 200, (two_attempts(),))))
    assert "NCCL error &lt;x&gt;" in page and "<x>" not in page
    assert page.count('class="bar ') == 2
    assert page.count('data-decision="0-') == 2 and page.count('class="decision ') == 2
    assert "http" not in page.lower().replace("http-equiv", "")


@pytest.mark.parametrize(
    ("seconds", "text"), [(4.25, "4.2 s"), (42, "42 s"), (185, "3 min 05 s"), (7620, "2 h 07 min")]
)
def test_durations_read_at_a_glance(seconds: float, text: str) -> None:
    """Durations are written in the largest sensible units."""
    assert format_duration(seconds) == text


def test_points_stamped_before_their_attempt_started_are_drawn_at_its_start() -> None:
    """Whole-second stamps can precede Slurm's start: the point and the restart's lost time use the start."""
    first = _attempt(1, 0, 90, "FAILED", [(10, 1), (20, 2)])
    second = _attempt(2, 100, 180, "COMPLETED", [(99.2, 2), (110, 3)])
    job = JobData("job", "completed", "", (first, second), (_restart(1, 90, 5.0),))
    report = build_report(SessionData(1, "s", T0 + 200, (job,))).jobs[0]
    assert [p.time_s - T0 for p in report.curve if p.attempt_no == 2] == [100, 110]
    assert report.losses[0].resumed_s == T0 + 100


def test_progress_stamps_move_onto_the_monitor_clock_by_the_zone_offset() -> None:
    """Stamps two hours off the monitor's clock shift by exactly 2 h; an unstamped line takes its read time."""
    found = [
        (T0, T0 + 7200.4, 1),  # (stamp, read time, iteration)
        (T0 + 10, T0 + 7211.0, 2),
        (None, T0 + 7215.0, 3),
        (T0 + 12, None, 4),  # never read by the monitor: its stamp, kept after the line above
    ]
    assert timed_points(found) == ((T0 + 7200, 1), (T0 + 7210, 2), (T0 + 7215, 3), (T0 + 7215, 4))
