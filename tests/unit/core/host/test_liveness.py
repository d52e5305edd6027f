"""A session's monitor liveness (core/host/liveness.py): stale after a few of its own missed beats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from oellm_autoexp.core.host.liveness import MISSED_BEATS, LockRow, liveness

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


def beat(age_s: float, interval_s: float | None = 10.0, job: str | None = None) -> LockRow:
    return LockRow(4242, "login2", NOW - timedelta(seconds=age_s), interval_s, job)


@pytest.mark.parametrize(
    ("lock", "pid_alive", "alive", "words"),
    [
        (beat(5), None, True, "heartbeat 5 s ago (every 10 s)"),
        (beat(MISSED_BEATS * 10 - 1), None, True, "pid 4242 on login2"),
        (beat(MISSED_BEATS * 10 + 1), None, False, f"stale: {MISSED_BEATS} heartbeats missed"),
        (beat(100, interval_s=None), None, True, "heartbeat 100 s ago"),  # an older holder: 120 s
        (beat(130, interval_s=None), None, False, "stale: more than 120 s"),
        (beat(5), False, False, "(that pid is gone)"),
        (beat(5, job="812"), None, True, "Slurm job 812, pid 4242"),
    ],
)
def test_liveness_by_missed_beats(lock: LockRow, pid_alive: bool | None, alive: bool, words: str) -> None:
    """A holder that beats every 10 s is gone after 3 missed beats (30 s), not after a fixed 120 s;
    a holder without a recorded interval keeps the fixed limit; a pid known gone is never alive."""
    live = liveness(lock, NOW, stale_after_s=120, pid_alive=pid_alive)
    assert live.alive is alive
    assert words in live.detail


def test_a_stale_holder_says_since_when_nobody_watches() -> None:
    """Unsupervised since its last heartbeat: the moment a user needs to judge what ran unwatched."""
    live = liveness(beat(600), NOW, stale_after_s=120, pid_alive=None)
    assert live.unsupervised_since == NOW - timedelta(seconds=600)
    assert "unsupervised since 2026-11-25 11:50:00 UTC" in live.detail


def test_a_released_lock_says_since_when_nobody_watches() -> None:
    """A monitor that stopped cleanly let go at a known time; one that never ran says only `none`."""
    left = NOW - timedelta(minutes=7)
    released = liveness(LockRow(None, None, None, left_at=left), NOW, stale_after_s=120, pid_alive=None)
    assert not released.alive and released.unsupervised_since == left
    assert released.detail == "none, unsupervised since 2026-11-25 11:53:00 UTC"
    never = liveness(LockRow(None, None, None), NOW, stale_after_s=120, pid_alive=None)
    assert never.detail == "none" and never.unsupervised_since is None
