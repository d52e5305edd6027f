"""The stray net against the real localhost Slurm: found in one squeue call, cancelled, recorded."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from oellm_autoexp.adapters.executors.factory import submit_plan
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.adapters.store.strays import STRAY_ACTION
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.daemon.clock import utc
from oellm_autoexp.daemon.session import create_session
from oellm_autoexp.daemon.strays import StrayNet
from oellm_autoexp.daemon.submitter import submit_tag
from oellm_autoexp.plan.plan import build_plans
from tests.integration.test_monitor_slurm import squeue_state, wait_until

pytestmark = pytest.mark.slurm


def test_orphaned_submission_is_cancelled_and_recorded(tmp_path: Path) -> None:
    """Attempt 1 runs and is tracked; a job carrying attempt 2's tag, whose intent was abandoned
    (an orphaned sbatch), also runs. One `query_tagged` call sees both; the net cancels only the
    orphan, says why, and records a `cancel_stray` decision on the job (naming no attempt, so a resumed
    monitor never takes it for the attempt's own judgement); a second sweep adds nothing."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsleep 120\n", encoding="utf-8")
    data = {"defaults": [{"slurm": "local"}, {"backend": "command"}],
            "experiment": {"name": "strays", "output_dir": str(tmp_path / "out")},
            "executor": "slurm", "backend": {"command": ["bash", str(script)]}}  # fmt: skip
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    plan = build_plans(load_jobs(str(path), []), str(tmp_path))[0]
    executor, now, said = SlurmExecutor(), datetime.now(UTC), []
    ids: list[str] = []
    try:
        with SQLiteStore(tmp_path / "state") as store:
            _, [job] = create_session(store, [plan], name="s", config_path=str(path), now=now)
            tags = [submit_tag(1, job.id, 1), submit_tag(1, job.id, 2)]
            first = store.record_intent(job.id, 1, tags[0], now=now)
            ids.append(submit_plan(executor, plan, [f"--comment={tags[0]}"]))
            store.confirm_submitted(first, ids[0], now=now)
            orphan = store.record_intent(job.id, 2, tags[1], now=now)
            store.abandon_intent(orphan, now=now)
            ids.append(submit_plan(executor, plan, [f"--comment={tags[1]}"]))  # the orphan's sbatch

            records, tagged = executor.query_tagged([ids[0]])
            assert set(records) == {ids[0]}
            assert {(t.executor_id, t.tag) for t in tagged} >= {(ids[0], tags[0]), (ids[1], tags[1])}
            net = StrayNet(store, [1], said.append)
            [stray] = net.sweep(executor, tagged, utc(now.timestamp()))
            assert stray.executor_id == ids[1]
            assert net.sweep(executor, executor.query_tagged([ids[0]])[1], now) == []
            decisions = store.decisions_for_job(job.id)
        wait_until(
            lambda: squeue_state(ids[1]) in (None, "CANCELLED", "COMPLETING"), "the orphan cancelled", 30
        )
        assert squeue_state(ids[0]) in ("PENDING", "RUNNING")
        assert [(d.action, d.attempt_id, d.evidence["attempt_id"]) for d in decisions] == [
            (STRAY_ACTION, None, orphan)
        ]
        assert "attempt 2 was given up" in decisions[0].reason and ids[1] in decisions[0].reason
        assert said and f"cancelled stray job {ids[1]}" in said[0]
    finally:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=30, check=False)
