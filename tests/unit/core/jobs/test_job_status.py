"""What a session is called: `completed` only when every job completed (issue 28)."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.jobs.job_status import jobs_by_status, session_word


@pytest.mark.parametrize(
    ("stored", "jobs", "word"),
    [("completed", ["completed", "completed"], "completed"),
     ("completed", ["stopped"], "ended"),  # a job stopped for OOM: the session did not complete
     ("completed", ["completed", "cancelled_by_user"], "ended"),
     ("completed", [], "ended"),
     ("active", ["stopped", "active"], "active"),
     ("stopped", ["active"], "stopped")],
)  # fmt: skip
def test_session_word(stored: str, jobs: list[str], word: str) -> None:
    assert session_word(stored, jobs) == word


def test_jobs_by_status_counts_in_status_order() -> None:
    assert jobs_by_status(["stopped", "completed", "stopped"]) == "2 stopped, 1 completed"
    assert jobs_by_status([]) == ""
