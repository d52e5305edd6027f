"""The terminal view of `autoexp run`: redraws on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io

from oellm_autoexp.cli._live import CLEAR, LiveView


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal() -> None:
    """In a pipe or log file every event is printed once, and redraws print nothing."""
    out = io.StringIO()
    view = LiveView(lambda: "TABLE", out)
    view.say("[10:00:00] job 1: RUNNING")
    view.redraw()
    view.say("[10:00:05] job 1: COMPLETED")
    assert out.getvalue() == "[10:00:00] job 1: RUNNING\n[10:00:05] job 1: COMPLETED\n"


def test_terminal_redraws_table_with_recent_events() -> None:
    """On a terminal, events wait for the next redraw, which clears the screen and shows table + events."""
    out = _Tty()
    view = LiveView(lambda: "TABLE", out)
    view.say("event one")
    assert out.getvalue() == ""
    view.redraw()
    assert out.getvalue() == CLEAR + "TABLE\n\nevent one\n"


def test_terminal_keeps_only_the_latest_events() -> None:
    """The screen holds a bounded number of event lines, newest last."""
    out = _Tty()
    view = LiveView(lambda: "T", out)
    for i in range(100):
        view.say(f"e{i}")
    view.redraw()
    shown = out.getvalue().removeprefix(CLEAR).splitlines()
    assert shown[-1] == "e99"
    assert "e0" not in shown
    assert len(shown) < 20
