"""Adaptive restarts end to end (`autoexp run`, local executor): a real MemoryError, two override sets, completion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

DEADLINE_S = 90.0
# Allocates MBS x 256 MiB under a 1 GiB address-space cap: MBS 16 and 8 raise a real
# MemoryError (classified oom), MBS 2 fits.
JOB = (
    "import os, resource; "
    "print('attempt', os.environ['AUTOEXP_ATTEMPT'], 'after', repr(os.environ['AUTOEXP_PREVIOUS_CAUSE']), "
    "'MBS', os.environ['MBS'], flush=True); "
    "resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)); "
    "block = bytearray(int(os.environ['MBS']) * 2**28); print('fits', flush=True)"
)


def experiment(tmp_path: Path, overrides: list[Any]) -> Path:
    data = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}],
        "experiment": {"name": "adapt", "output_dir": str(tmp_path / "out")},
        "executor": "local",
        "backend": {"command": [sys.executable, "-c", JOB]},
        "slurm": {"env": {"MBS": 16}},
        "monitoring": {"poll_interval_s": 0.5, "log_poll_interval_s": 0.5, "heartbeat_interval_s": 1},
        "restart": {"rules": [
            {"name": "oom_smaller_batch", "match": {"error_types": ["oom"]}, "max_retries": 0,
             "overrides": overrides},
            {"name": "rest", "action": "stop"},
        ]},
    }  # fmt: skip
    path = tmp_path / "adapt.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def autoexp(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp_path / "state"), *args]
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S, check=False)


def test_oom_restarts_with_each_override_set_until_the_job_fits(tmp_path: Path) -> None:
    """MBS 16 and 8 really run out of memory; set 2 (MBS=2) fits; each attempt saw its number, cause and script."""
    config = experiment(tmp_path, [["slurm.env.MBS=8"], ["slurm.env.MBS=2"]])
    done = autoexp(tmp_path, "run", str(config))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    with SQLiteStore(tmp_path / "state") as store:
        (job,) = store.jobs_for_session(1)
        attempts = store.attempts_for_job(job.id)
        decisions = store.decisions_for_job(job.id)
    assert [(d.action, d.evidence.get("override_set")) for d in decisions] == [
        ("restart", 1), ("restart", 2), ("stop", None),
    ]  # fmt: skip
    assert "override set 2/2 of rule oom_smaller_batch: slurm.env.MBS=2" in decisions[1].reason
    logs = [Path(a.log_path or "").read_text() for a in attempts]
    assert "attempt 1 after '' MBS 16" in logs[0] and "MemoryError" in logs[0]
    assert "attempt 2 after 'oom' MBS 8" in logs[1] and "MemoryError" in logs[1]
    assert "attempt 3 after 'oom' MBS 2" in logs[2] and "fits" in logs[2]
    scripts = sorted(p.name for p in (tmp_path / "out").glob("job.attempt-*.sbatch"))
    assert scripts == ["job.attempt-1.sbatch", "job.attempt-2.sbatch", "job.attempt-3.sbatch"]
    explain = autoexp(tmp_path, "explain", "adapt")
    assert (
        "next attempt runs with override set 1 of rule oom_smaller_batch: slurm.env.MBS=8" in explain.stdout
    )


def test_a_bad_override_set_stops_the_session_before_anything_is_submitted(tmp_path: Path) -> None:
    """`autoexp run` with a set naming a key that does not exist exits 2 naming the rule and set; no session."""
    config = experiment(tmp_path, [["slurm.env.MBS=8"], ["slurm.nodez=1"]])
    done = autoexp(tmp_path, "run", str(config))
    assert done.returncode == 2
    assert "restart rule oom_smaller_batch, overrides set 2 (slurm.nodez=1)" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "job.attempt-1.sbatch").exists()
