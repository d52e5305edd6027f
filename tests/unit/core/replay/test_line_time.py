"""Line times for `autoexp replay` (core/replay/line_time.py) and the end state a log shows (core/replay/log_end.py)."""

from __future__ import annotations

import calendar

import pytest

from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.replay.line_time import line_times, stamp_of, year_of
from oellm_autoexp.core.replay.log_end import assumed_end, end_of, parse_end_state
from tests.paths import TESTS

LOGS = TESTS / "fixtures" / "logs"


def line(rel: str, line_no: int) -> str:
    return (LOGS / rel).read_text(encoding="utf-8").splitlines()[line_no - 1]


def at(text: str) -> float:
    """Epoch seconds of `YYYY-MM-DD HH:MM:SS[.ffffff]` read as UTC."""
    day, clock = text.split(" ")
    hms, _, frac = clock.partition(".")
    parts = [int(p) for p in day.split("-")] + [int(p) for p in hms.split(":")]
    return calendar.timegm((*parts, 0, 0, 0)) + (float(f"0.{frac}") if frac else 0.0)


@pytest.mark.parametrize(
    ("rel", "line_no", "expected"),
    [
        ("gpu/oom.log", 1, "2026-11-22 04:20:50.679"),  # torch/glog W..., no year
        ("gpu/oom.log", 9, "2026-11-22 04:21:02"),  # Megatron ` [2026-11-22 04:21:02] iteration`
        ("gpu/oom.log", 40, "2026-11-22 04:21:32.820484898"),  # [rank0]:[E1122 ...] NCCL watchdog
        ("gpu/nan.log", 51, "2026-11-22 04:21:03.156305009"),  # [rank0]:[W1122 ...] NCCL warning
        ("gpu/kill.log", 22, "2026-11-22 04:21:33.608"),  # E1122 torchrun `failed (exitcode: -9)`
        ("cpu/exception.log", 37, "2026-11-22 04:05:07.61"),
        ("cpu/slurm_time_limit.log", 107, "2026-11-22 04:09:42"),  # slurmstepd CANCELLED AT ...
        ("cpu/healthy.log", 20, "2026-11-22 04:05:00"),  # [after training is done] datetime: ...
        ("synthetic/synthetic_xid_79.log", 4, "2026-03-14 10:41:07"),  # syslog `Mar 14 10:41:07`
    ],
)
def test_stamps_of_real_lines(rel: str, line_no: int, expected: str) -> None:
    """Each stamp format in the shipped fixtures is read to the microsecond; yearless ones take the given year."""
    year = int(expected[:4])
    assert stamp_of(line(rel, line_no), year) == pytest.approx(at(expected), abs=1e-6)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[E1123 01:45:37.633598028 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught",
            "2026-11-23 01:45:37.633598",
        ),
        ("2026-11-23T01:46:00.123Z INFO step", "2026-11-23 01:46:00.123"),
        ("2026-11-23 01:46:00,123 - trainer - INFO - step", "2026-11-23 01:46:00.123"),
        ("3: [2026-11-23 01:46:00] iteration 7/ 9 |", "2026-11-23 01:46:00"),  # srun --label prefix
        ("[default1]:W1123 01:47:01.713000 12 torch/distributed/run.py:1] x", "2026-11-23 01:47:01.713"),
    ],
)
def test_stamp_variants(text: str, expected: str) -> None:
    """NCCL lines without a rank prefix, ISO and logging stamps, srun/torchrun prefixes are read too."""
    assert stamp_of(text, 2026) == pytest.approx(at(expected), abs=1e-6)


@pytest.mark.parametrize(
    "rel_line",
    [("gpu/oom.log", 38), ("gpu/oom.log", 79), ("gpu/segv.log", 15), ("cpu/healthy.log", 1)],
)
def test_lines_without_a_stamp(rel_line: tuple[str, int]) -> None:
    """Tracebacks, torchrun's summary (`time : 2026-11-22_04:21:34` quotes a past failure) carry no stamp."""
    assert stamp_of(line(*rel_line), 2026) is None


def test_year_comes_from_the_log_else_the_fallback() -> None:
    """A yearless stamp takes its year from a dated stamp in the log, else from the caller (file mtime)."""
    lines = (LOGS / "gpu" / "oom.log").read_text().splitlines()
    assert year_of(lines, 1999) == 2026
    assert year_of(["W1122 04:20:50.679000 1 x.py:1] a"], 1999) == 1999


def test_unstamped_lines_take_the_previous_stamp_or_spread_linearly() -> None:
    """`previous` (default) holds the last stamp; `linear` spreads lines between two stamps evenly."""
    lines = [
        " [2026-11-22 04:00:00] iteration 1/ 9 |",
        "a",
        "b",
        "c",
        " [2026-11-22 04:00:04] iteration 2/ 9 |",
    ]
    t0 = at("2026-11-22 04:00:00")
    prev = line_times(lines, fallback_year=2026)
    lin = line_times(lines, fallback_year=2026, between="linear")
    assert [t - t0 for t in prev.times_s] == [0, 0, 0, 0, 4]
    assert [t - t0 for t in lin.times_s] == [0, 1, 2, 3, 4]
    assert prev.stamped == 2 and prev.warning is None


def test_lines_before_the_first_stamp_and_backward_stamps() -> None:
    """Lines before the first stamp get its time; a stamp earlier than one seen reads as the latest."""
    lines = ["start", "W1122 04:00:10.000000 1 x.py:1] a", "W1122 04:00:05.000000 1 x.py:1] skewed", "end"]
    times = line_times(lines, fallback_year=2026).times_s
    assert times == (times[1],) * 4


def test_no_stamp_at_all_is_arrival_order_with_a_warning() -> None:
    """A log without any stamp replays every line at time 0, and says so."""
    result = line_times(["a", "b"], fallback_year=2026)
    assert result.times_s == (0.0, 0.0) and result.stamped == 0
    assert result.warning is not None and "arrival order" in result.warning


@pytest.mark.parametrize(
    ("rel", "label"),
    [
        ("cpu/slurm_time_limit.log", "TIMEOUT"),
        ("cpu/slurm_cancelled.log", "CANCELLED"),
        ("synthetic/synthetic_node_failure.log", "NODE_FAIL"),
        ("synthetic/synthetic_preempted.log", "PREEMPTED"),
        ("cpu/slurm_srun_killed.log", "FAILED:137"),
        ("gpu/oom.log", "FAILED:1"),  # torchrun's ChildFailedError: torchrun exits 1
        ("cpu/rendezvous_timeout.log", None),  # no end line
    ],
)
def test_end_state_the_log_shows(rel: str, label: str | None) -> None:
    """slurmstepd's JOB line, srun's task lines and torchrun's summary say how the job ended."""
    found = end_of((LOGS / rel).read_text().splitlines())
    assert (found.label() if found else None) == label


def test_end_state_from_our_sbatch_script_and_assumed_ends() -> None:
    """`autoexp: job step exited with status N` gives the exit code; no end line: failed only with a cause."""
    ok = end_of(["x", "autoexp: job step exited with status 0"])
    assert ok is not None and ok.state is JobState.COMPLETED and ok.exit_code == 0
    bad = end_of(["autoexp: job step exited with status 16"])
    assert bad is not None and bad.label() == "FAILED:16"
    assert assumed_end(has_cause=True).label() == "FAILED:1"
    assert assumed_end(has_cause=False).label() == "COMPLETED:0"


def test_parse_end_state() -> None:
    """`--end-state FAILED:1` and `TIMEOUT` parse; an unknown state or a non-integer code is refused."""
    assert parse_end_state("failed:1").label() == "FAILED:1"
    assert parse_end_state("TIMEOUT").exit_code is None
    with pytest.raises(ValueError, match="unknown state 'DONE'"):
        parse_end_state("DONE")
    with pytest.raises(ValueError, match="must be an integer"):
        parse_end_state("FAILED:x")
