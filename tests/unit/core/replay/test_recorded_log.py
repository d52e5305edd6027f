"""A log's bytes as lines and times (core/replay/recorded_log.py): the bulk way against line_time.py line by line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oellm_autoexp.core.replay import recorded_log as log_lines
from oellm_autoexp.core.replay.line_time import line_times
from oellm_autoexp.core.replay.recorded_log import decoded_lines, split_log
from tests.conftest import unavailable
from tests.paths import TESTS
from tests.unit.synthetic_logs import synthetic_log

FIXTURE_LOGS = sorted((TESTS / "fixtures" / "logs").glob("*/*.log"))
M = " [2026-11-22 04:00:{}] iteration 1/ 9 |"  # Megatron, seconds (and fraction) filled in


@pytest.fixture
def bulk() -> Iterator[None]:
    try:
        log_lines.set_engine("numpy")
    except ValueError:
        unavailable("numpy (the `fast` extra) is not installed")
    yield
    log_lines.set_engine("auto")


def _assert_as_line_by_line(data: bytes) -> None:
    lines = decoded_lines(data)
    log = split_log(data, fallback_year=2026)
    assert log.times == line_times(lines, fallback_year=2026)
    assert log.n == len(lines) and [log.line(i) for i in range(log.n)] == lines
    for start, end in {(0, log.n), (0, min(1, log.n)), (log.n // 2, log.n)}:
        text, encoded = log.text_and_bytes(start, end)
        if b"\r" not in data:
            assert text == "".join(line + "\n" for line in lines[start:end])
        assert encoded is None or encoded == text.encode()


@pytest.mark.usefixtures("bulk")
@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_splits_and_stamps_as_line_by_line(log: Path) -> None:
    """Every fixture log: the same lines, the same time for every line, the same text of a run of lines."""
    _assert_as_line_by_line(log.read_bytes())


@pytest.mark.usefixtures("bulk")
@pytest.mark.parametrize("seed", range(60))
def test_generated_logs_split_and_stamp_as_line_by_line(seed: int) -> None:
    """Generated logs (skewed ranks, glog and NCCL stamps, fractions, CRLF, bad UTF-8) likewise."""
    _assert_as_line_by_line(synthetic_log(seed))


@pytest.mark.usefixtures("bulk")
@pytest.mark.parametrize(
    "lines",
    [
        [
            M.format("05"),
            M.format("06.5"),
            M.format("07,25"),
            M.format("08.123456789"),
            M.format("09.1234567890"),
        ],
        [M.format("05").lstrip(), "  " + M.format("06").lstrip(), "\t" + M.format("07").lstrip()],
        [M.format("05").replace("2026-11-22 ", "2026-11-22T"), M.format("05").replace("-22 ", "-22_")],
        [
            M.format("05").replace("-11-22", d)
            for d in ("-13-01", "-11-00", "-11-32", "-11-31", "-02-29", "-00-10")
        ],
        [M.format("05").replace("2026-", y) for y in ("0000-", "2024-", "2000-", "1900-")],
        [M.format("05").replace("04:00", "99:99"), M.format("60"), M.format("5").replace("5]", "5 ]")],
        [
            "[rank3]:" + M.format("05"),
            "3: " + M.format("06"),
            "\ufeff" + M.format("07"),
            M.format("\u0660\u0661"),
        ],
        [
            "W1122 04:00:05.713000 1 run.py:1] a",
            "[E1122 04:00:06.633598028 PG.cpp:689] b",
            "I1122 04:00:07 1 c",
        ],
        ["W1122 04:00:05.713000x 1 a", "W1122 04:00:05] d", "W1322 04:00:05 e", "X1122 04:00:05 f", "W112"],
        ["before any stamp", "", M.format("05"), "after", "W1122 04:00:01.000000 1 x.py:1] skewed back"],
        [
            "2026-11-22T04:00:05.123Z iso",
            "Nov 22 04:00:06 node kernel: Xid",
            "x CANCELLED AT 2026-11-22T04:00:07 y",
        ],
        ["no stamp", "at all"],
        [M.format("05")[:-30]],  # a stamp near the end of the data, no room for a whole window
    ],
    ids=[
        "fractions",
        "spaces",
        "separators",
        "dates",
        "years",
        "clocks",
        "prefixes",
        "glog",
        "not glog",
        "unstamped",
        "other layouts",
        "none",
        "short",
    ],
)
def test_layouts_and_near_misses_read_as_line_time_reads_them(lines: list[str]) -> None:
    """Each layout the bulk parser reads, and every near miss it must leave to line_time.stamp_of."""
    for newline in ("\n", "\r\n"):
        data = newline.join(lines).encode()
        _assert_as_line_by_line(data)
        _assert_as_line_by_line(data + newline.encode())


@pytest.mark.usefixtures("bulk")
def test_empty_and_blank_logs() -> None:
    """No bytes is no line; a lone newline is one empty line."""
    for data in (b"", b"\n", b"\n\n", b"\xff\n"):
        _assert_as_line_by_line(data)


def test_a_small_log_is_split_line_by_line() -> None:
    """Below NUMPY_MIN_BYTES the lines are decoded at once: no numpy import for a small log."""
    log = split_log(M.format("05").encode(), fallback_year=2026)
    assert log.lines == [M.format("05")] and log.starts is None
