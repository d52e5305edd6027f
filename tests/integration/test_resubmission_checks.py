"""The checks before a resubmission (daemon/presubmit.py; the spend: daemon/judge_inputs.py) on real files, without Slurm."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from oellm_autoexp.adapters.executors.local import LocalExecutor
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.daemon.judge_inputs import measure_spend
from oellm_autoexp.daemon.presubmit import check_before_resubmit

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "workload_run"
TRACKER = "latest_checkpointed_iteration.txt"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def run_dir(tmp_path: Path) -> Path:
    ckpt = tmp_path / "checkpoints"
    shutil.copytree(FIXTURE, ckpt)
    return ckpt


def test_nothing_saved_yet_and_a_complete_checkpoint_resume_without_a_record(tmp_path: Path) -> None:
    """No checkpoint dir (nothing saved yet) and a complete checkpoint both resume, with nothing to record."""
    assert check_before_resubmit(tmp_path / "missing", 2).resume
    gate = check_before_resubmit(run_dir(tmp_path), 2)
    assert gate.resume and gate.reason is None


def test_a_cut_checkpoint_is_rolled_back_and_kept_aside(tmp_path: Path) -> None:
    """The newest file cut short: moved to failed_*, the tracker points at the previous one, resume."""
    ckpt = run_dir(tmp_path)
    newest = ckpt / "iter_0000020.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    gate = check_before_resubmit(ckpt, 2)
    assert gate.resume and gate.reason is not None and "resume from iteration 10" in gate.reason
    assert (ckpt / TRACKER).read_text().strip() == "10" and (ckpt / "failed_iter_0000020.pt").is_file()
    assert gate.problems and "iter_0000020.pt" in gate.problems[0]


def test_past_the_rollback_budget_or_unverifiable_stops(tmp_path: Path) -> None:
    """No rollback left (max 0) stops with the rollback line; a garbage tracker stops as unverifiable;
    both say which command shows the details."""
    ckpt = run_dir(tmp_path)
    newest = ckpt / "iter_0000020.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    refused = check_before_resubmit(ckpt, 0)
    assert not refused.resume and refused.reason is not None and "no rollback" in refused.reason
    assert newest.is_file()  # nothing moved
    (ckpt / TRACKER).write_text("garbage\n")
    unverifiable = check_before_resubmit(ckpt, 2)
    assert not unverifiable.resume and unverifiable.reason is not None
    assert "unverifiable" in unverifiable.reason and f"autoexp checkpoint check {ckpt}" in unverifiable.reason


def _attempt(no: int, started: datetime | None, ended: datetime | None) -> AttemptInfo:
    return AttemptInfo(no, 1, no, f"tag{no}", "confirmed", f"local-{no}", (), T0, T0, started, ended,
                       JobState.FAILED, 1, None, None)  # fmt: skip


def test_local_spend_comes_from_the_recorded_start_and_end(tmp_path: Path) -> None:
    """Without sacct, each started attempt spends (end or now - start) x GPUs per node; one never started
    spends nothing."""
    attempts = [
        _attempt(1, T0, T0 + timedelta(minutes=30)),
        _attempt(2, T0 + timedelta(hours=1), None),  # still running at `now`
        _attempt(3, None, None),
    ]
    spend = measure_spend(LocalExecutor(tmp_path), attempts, 4, now=T0 + timedelta(hours=2))
    assert spend.attempts == 2 and spend.wall_hours == 1.5 and spend.gpu_hours == 6.0
