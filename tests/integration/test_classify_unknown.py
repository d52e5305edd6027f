"""`autoexp classify --unknown`: failed attempts whose log gave no cause, across sessions (real SQLite)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.jobs.job_state import JobState
from tests.paths import REPO

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _attempt(store: SQLiteStore, job_id: int, no: int, log: Path, text: str, state: JobState) -> None:
    log.write_text(text, encoding="utf-8")
    aid = store.record_intent(job_id, no, f"tag-{job_id}-{no}", now=T0, log_path=str(log))
    store.confirm_submitted(aid, str(100 + no), now=T0)
    store.update_attempt_state(aid, state, exit_code=1 if state is JobState.FAILED else 0, ended_at=T0)


def _classify_unknown(state: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(state), "classify", "--unknown"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO, env=env)


def test_only_failed_attempts_without_a_cause_are_listed_with_a_pattern(tmp_path: Path) -> None:
    """A FAILED log with no recognised line is listed with its telling lines and a pattern; the others are not."""
    state = tmp_path / ".oellm_state"
    with SQLiteStore(state) as store:
        for name in ("first", "second"):
            sid = store.create_session(name, config_path="exp.yaml", config={}, now=T0).id
            jid = store.add_job(sid, job_key="k", name=f"{name}-job", plan={}, now=T0).id
            _attempt(store, jid, 1, tmp_path / f"{name}-1.log",
                     "iteration 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
                     JobState.FAILED)  # fmt: skip
            _attempt(store, jid, 2, tmp_path / f"{name}-2.log", "iteration 1\nall done\n", JobState.COMPLETED)
        _attempt(store, jid, 3, tmp_path / "second-3.log",
                 "iteration 7\nLustre: scratch-OST0004-osc: Connection to scratch-OST0004 was lost; in progress operations using this service will wait for recovery to complete\n",
                 JobState.FAILED)  # fmt: skip
    done = _classify_unknown(state)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "job second-job, attempt 3: FAILED, exit code 1, no cause in" in out
    assert "  | Lustre: scratch-OST0004-osc: Connection to scratch-OST0004 was lost;" in out
    assert "regex: 'Lustre: scratch-OST" in out and "error_type: TODO" in out
    assert "attempt 1" not in out and "attempt 2" not in out  # a cause (OOM), or not failed


def test_no_unknown_failure_is_said(tmp_path: Path) -> None:
    """An empty state dir: one line saying there is nothing unexplained."""
    with SQLiteStore(tmp_path / ".oellm_state"):
        pass
    done = _classify_unknown(tmp_path / ".oellm_state")
    assert done.returncode == 0 and done.stdout.strip() == "no failed attempt without a recognised cause"
