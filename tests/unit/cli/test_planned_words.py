"""A walltime cycle reads as the plan working in `status` and `explain`: "time limit reached at
iteration N: resubmitted to continue (...)", never "Transient failure" (issue 28)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.cli.main import main
from oellm_autoexp.config.files import read_yaml, shipped_config_dir
from oellm_autoexp.core.decide.policy import RestartHistory, RestartRecord, decide, load_policy
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import Outcome, OutcomeKind


def _walltime_cycle(state: Path, *, complete: bool = True) -> None:
    """Two attempts ended by the time limit (iterations 600, 1200), then one that completed."""
    policy = load_policy(read_yaml(shipped_config_dir() / "restart" / "megatron_transient.yaml"))
    t0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
    restarts: tuple[RestartRecord, ...] = ()
    with SQLiteStore(state) as store:
        session = store.create_session("walltime", config_path="e.yaml", config={}, now=t0)
        job = store.add_job(session.id, job_key="k", name="train", plan={}, now=t0)
        for no, iteration in ((1, 600), (2, 1200), (3, None))[: 3 if complete else 2]:
            at = t0 + timedelta(hours=no)
            aid = store.record_intent(job.id, no, f"tag{no}", now=at)
            store.confirm_submitted(aid, str(100 + no), now=at)
            if iteration is None:
                store.update_attempt_state(aid, JobState.COMPLETED, exit_code=0, ended_at=at)
                store.record_decision(job.id, attempt_id=aid, action="stop", reason="Job completed successfully",
                                      now=at)  # fmt: skip
                continue
            store.update_attempt_state(aid, JobState.TIMEOUT, exit_code=0, ended_at=at)
            history = RestartHistory(attempt=no, restarts=restarts, iteration=iteration)
            decision = decide(policy, Outcome(JobState.TIMEOUT, "time_limit"), history, now=at.timestamp())
            store.record_decision(job.id, attempt_id=aid, action=decision.action.value, reason=decision.reason,
                                  now=at, budget_before=decision.budget_before, budget_after=decision.budget_after,
                                  evidence={"error_type": "time_limit", "kind": "timeout", "rule": decision.rule})  # fmt: skip
            restarts = (
                *restarts,
                RestartRecord(at.timestamp(), "scheduler", OutcomeKind.TIMEOUT, "time_limit", iteration),
            )
        if complete:
            store.set_job_status(job.id, "completed")


def test_status_and_explain_word_a_walltime_cycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _walltime_cycle(tmp_path / "state")
    assert main(["--state-dir", str(tmp_path / "state"), "explain", "train"]) == 0
    explain = capsys.readouterr().out
    assert (
        "RESTART: time limit reached at iteration 600: resubmitted to continue (counts against the "
        "budget only if the next attempt does not get past iteration 600)" in explain
    )
    assert "RESTART: time limit reached at iteration 1200: resubmitted to continue" in explain
    assert "Transient failure" not in explain
    assert main(["--state-dir", str(tmp_path / "state"), "status", "--json"]) == 0
    assert "Transient failure" not in capsys.readouterr().out
    # status's table shows the last decision; the second-to-last attempt's is a planned restart
    with SQLiteStore(tmp_path / "state") as store:
        reasons = [d.reason for d in store.decisions_for_job(1)]
    assert all("Transient failure" not in r for r in reasons) and reasons[-1] == "Job completed successfully"


def test_status_shows_a_planned_resubmission_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mid-cycle, the LAST_DECISION column says what the restart was."""
    _walltime_cycle(tmp_path / "state", complete=False)
    assert main(["--state-dir", str(tmp_path / "state"), "status"]) == 0
    out = capsys.readouterr().out
    assert "restart: time limit reached at iteration 1200: resubmitted to continue" in out
    assert "Transient failure" not in out
