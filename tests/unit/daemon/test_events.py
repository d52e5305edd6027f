"""The monitor's observers (daemon/events.py): one that raises is reported and never stops the others."""

from __future__ import annotations

from datetime import UTC, datetime

from oellm_autoexp.adapters.store.sqlite_store import SessionInfo
from oellm_autoexp.daemon.events import MonitorEvent, Observers, SessionsEnded, stale_found


class Recording:
    def __init__(self) -> None:
        self.events: list[MonitorEvent] = []
        self.closed = 0

    def notice(self, event: MonitorEvent) -> None:
        self.events.append(event)

    def close(self) -> None:
        self.closed += 1


class Broken:
    def notice(self, event: MonitorEvent) -> None:
        raise RuntimeError("bug in an observer")

    def close(self) -> None:
        raise OSError("disk full")


def test_an_observer_that_raises_is_reported_and_the_rest_still_hear() -> None:
    """A broken observer costs one warning line per call; the monitor and the other observers go on."""
    said: list[str] = []
    recording = Recording()
    observers = Observers([Broken(), recording], said.append)
    event = SessionsEnded((1,), 100.0)
    observers.notice(event)
    observers.close()
    assert recording.events == [event] and recording.closed == 1
    assert len(said) == 2
    assert said[0].startswith("warning: Broken failed (RuntimeError: bug in an observer at test_events.py:")
    assert said[0].endswith("the monitor goes on")
    assert "OSError: disk full" in said[1]


def test_stale_findings_become_events() -> None:
    """Each session found with a stale holder becomes one event naming that holder."""
    beat = datetime(2026, 1, 1, tzinfo=UTC)
    session = SessionInfo(7, "s", "c.yaml", {}, beat, "active", 4242, "login2", beat)
    (event,) = stale_found([session], 120.0, 500.0)
    assert (event.session_id, event.pid, event.host, event.heartbeat) == (7, 4242, "login2", beat)
    assert (event.stale_after_s, event.now_s) == (120.0, 500.0)
