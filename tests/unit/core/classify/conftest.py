"""The corpus score in CI's output: both figures and the per-family table, printed at the end of every run.

test_classify_corpus.py puts its report here (`corpus_report`); pytest prints it in the terminal
summary, passing or not, so a CI log always shows fitted and held-out accuracy side by side (issue #26).
Held-out misses are counted, never listed.
"""

from __future__ import annotations

import pytest

REPORT_KEY = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def corpus_report(pytestconfig: pytest.Config) -> list[str]:
    """Lines for the terminal summary."""
    return pytestconfig.stash.setdefault(REPORT_KEY, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    lines = config.stash.get(REPORT_KEY, [])
    if lines:
        terminalreporter.section("classification corpus (fitted and held out)")
        for line in lines:
            terminalreporter.write_line(line)
