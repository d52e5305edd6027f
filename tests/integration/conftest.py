"""Fixtures shared by the integration tests: an experiment run end to end through plan -> executor,
`autoexp` as a subprocess on the real Slurm (`AutoexpEnv`), and programs run on a tmpfs mounted
in a private mount namespace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from oellm_autoexp.adapters.executors.base import Executor
from oellm_autoexp.adapters.executors.factory import make_executor, submit_plan
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import is_terminal
from oellm_autoexp.plan.plan import JobPlan, build_plans, log_path_for
from tests.conftest import unavailable
from tests.integration.test_monitor_slurm import AutoexpEnv, autoexp_environ

REPO_ROOT = Path(__file__).resolve().parents[2]
DDP_SCRIPT = Path(__file__).parent / "ddp_script.py"
JOB_DEADLINE_S = 240.0
POLL_S = 0.5


def wait_for_jobs(
    executor: Executor, job_ids: list[str], timeout_s: float = JOB_DEADLINE_S
) -> dict[str, JobRecord]:
    """Poll until every job is terminal; after the deadline, the last records (tests then fail on state)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = executor.query(job_ids)
        if all(is_terminal(r.state) for r in seen.values()) or time.monotonic() > deadline:
            return seen
        time.sleep(POLL_S)


@dataclass
class Finished:
    plan: JobPlan
    record: JobRecord

    @property
    def log(self) -> str:
        path = Path(log_path_for(self.plan, self.record.job_id))
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class Runner:
    """Writes an experiment under tmp_path, plans it, submits every job and waits for all of them."""

    tmp_path: Path

    def plans(self, experiment: dict[str, Any], overrides: Sequence[str] = ()) -> list[JobPlan]:
        path = self.tmp_path / "experiment.yaml"
        path.write_text(yaml.safe_dump(experiment, sort_keys=False))
        return build_plans(load_jobs(path, list(overrides)), str(self.tmp_path))

    def executor(self, name: str) -> Executor:
        return make_executor(name, self.tmp_path / "state")

    def run(self, experiment: dict[str, Any], overrides: Sequence[str] = ()) -> list[Finished]:
        plans = self.plans(experiment, overrides)
        executor = self.executor(plans[0].executor)
        ids = [submit_plan(executor, plan) for plan in plans]
        final = wait_for_jobs(executor, ids)
        return [Finished(plan, final[job_id]) for plan, job_id in zip(plans, ids, strict=True)]


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Runner:
    """Runs from tmp_path (a relative `touch pwned` would land there) with no user config dirs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOEXP_CONFIG_DIR", raising=False)
    monkeypatch.delenv("AUTOEXP_SHIPPED_CONFIG", raising=False)
    return Runner(tmp_path)


@pytest.fixture
def autoexp(tmp_path: Path) -> Iterator[AutoexpEnv]:
    """A test's autoexp environment; afterwards no monitor runs and none of its jobs is left."""
    ax = AutoexpEnv(tmp_path, env=autoexp_environ() | {"PYTHONUNBUFFERED": "1"})
    try:
        yield ax
    finally:
        ax.cleanup()


def require_unshare(flags: tuple[str, ...], reason: str) -> None:
    """Skip (or fail, where tests must run) unless `unshare FLAGS` works here; `reason` says why it is needed."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", *flags, "true"], check=False).returncode:
        unavailable(f"needs unshare {' '.join(flags)} ({reason})")


# Mounts a fresh 1 MiB tmpfs on $1 and runs `$3 $4 $1 $2` (Python, its program, the mount, the out dir).
MOUNT_AND_RUN = 'set -e; mount -t tmpfs -o size=1m tmpfs "$1"; "$3" "$4" "$1" "$2"'


@pytest.fixture
def on_full_tmpfs(tmp_path: Path) -> Callable[[str], dict[str, Any]]:
    """Runs a Python program on a fresh 1 MiB tmpfs in a private mount namespace (argv: the
    mount as its state dir, an out dir); returns the JSON the program wrote to out/result.json."""
    require_unshare(("-rm",), "user and mount namespaces, to mount a small tmpfs")

    def run(program: str) -> dict[str, Any]:
        mnt, out, script = tmp_path / "mnt", tmp_path / "out", tmp_path / "run.py"
        mnt.mkdir()
        out.mkdir()
        script.write_text(program, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        argv = [
            "unshare",
            "-rm",
            "bash",
            "-c",
            MOUNT_AND_RUN,
            "-",
            str(mnt),
            str(out),
            sys.executable,
            str(script),
        ]
        subprocess.run(argv, env=env, check=True, timeout=120, cwd=tmp_path)
        result: dict[str, Any] = json.loads((out / "result.json").read_text())
        return result

    return run
