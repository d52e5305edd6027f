"""A checkpoint save that failed for want of disk names the disk and stops (core/checkpoint/disk.py
through core/decide/judge.py)."""

from __future__ import annotations

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.checkpoint.disk import DiskSpace, format_bytes, space_warning
from oellm_autoexp.core.decide.judge import judge
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, load_policy
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.attempt_view import AttemptView

PATTERNS = load_patterns(["autoexp_workloads"])
# A policy that restarts any failure: the full disk must stop the run all the same.
RESTART_ALL = load_policy(yaml.safe_load("rules: [{name: any, max_retries: 5}]"))
MIB = 2**20
FULL = DiskSpace("out/checkpoints", 0, 2 * MIB, last_checkpoint_bytes=300 * 1024)


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (2 * MIB, "2 MiB"), (5 * 2**40, "5 TiB")]
)
def test_format_bytes(n: int, text: str) -> None:
    """Binary units, a decimal only where it says something."""
    assert format_bytes(n) == text


def judged(line: str, disk: DiskSpace | None):  # type: ignore[no-untyped-def]
    view = AttemptView(PATTERNS)
    view.mark_running(0.0)
    view.read([" saving checkpoint at iteration      20 to out/checkpoints", line], 1.0)
    verdict = view.end_verdict(JobRecord("1", JobState.FAILED, "test", exit_code=1), 2.0)
    return judge(RESTART_ALL, verdict, RestartHistory(checkpoint_disk=disk), view.classifier.signals)


@pytest.mark.parametrize(
    "line",
    [
        "[rank0]: RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 2368 vs 2256",
        "[rank0]: RuntimeError: [enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing "
        "file data/3: file write failed",
        "[rank0]: OSError: [Errno 28] No space left on device",
        "[rank0]: OSError: [Errno 122] Disk quota exceeded: 'out/checkpoints/iter_0000020.pt.tmp'",
    ],
)
def test_a_failed_save_stops_naming_the_disk_and_what_to_free(line: str) -> None:
    """However the writer words it, the stop says the directory, its free space and what to free."""
    j = judged(line, FULL)
    assert j.decision.action is DecisionAction.STOP
    reason = j.decision.reason
    assert reason.startswith("checkpoint save failed: out/checkpoints has 0 B free of 2 MiB"), reason
    assert "free at least 300 KiB (the last checkpoint's size) in out/checkpoints" in reason
    assert line.split("]: ", 1)[1] in reason


def test_free_space_left_points_at_a_quota() -> None:
    """statvfs shows room (a quota is lower): the reason says to check the quota."""
    j = judged("[rank0]: OSError: [Errno 122] Disk quota exceeded", DiskSpace("ck", 5 * MIB, 10 * MIB))
    assert "has 5 MiB free of 10 MiB (statvfs shows the filesystem, not a quota" in j.decision.reason


def test_unread_disk_still_stops() -> None:
    """No statvfs figure (a replay, an unreadable directory): still a stop, saying so."""
    j = judged("[rank0]: OSError: [Errno 28] No space left on device", None)
    assert j.decision.action is DecisionAction.STOP
    assert "free space could not be read" in j.decision.reason


def test_space_warning_below_the_last_checkpoint() -> None:
    """Before a resubmission: a warning only when the next save would not fit."""
    assert space_warning(DiskSpace("ck", 100, MIB, last_checkpoint_bytes=200)) == (
        "warning: ck has 100 B free of 1 MiB, less than the last checkpoint (200 B): "
        "the next save will fail unless space is freed"
    )
    assert space_warning(DiskSpace("ck", 300, MIB, last_checkpoint_bytes=200)) is None
    assert space_warning(DiskSpace("ck", 0, MIB)) is None  # nothing saved yet: nothing to compare
