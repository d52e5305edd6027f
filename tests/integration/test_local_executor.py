"""LocalExecutor with real processes: ids, states, exit codes, logs, cancel, and a restart of autoexp."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.executors.local import LocalExecutor
from oellm_autoexp.core.jobs.job_state import JobState, is_terminal

DEADLINE_S = 30.0


def _script(tmp_path: Path, body: str, name: str = "job.sh") -> Path:
    path = tmp_path / name
    path.write_text(
        f'#!/bin/bash\n#SBATCH --job-name="my job"\n#SBATCH --output={tmp_path}/logs/%x-%j.out\n{body}\n'
    )
    return path


def _wait(executor: LocalExecutor, job_id: str, until=is_terminal):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        record = executor.query([job_id])[job_id]
        if until(record.state):
            return record
        time.sleep(0.1)
    raise AssertionError(f"{job_id} did not reach the expected state: {record}")


@pytest.mark.parametrize(
    ("body", "state", "exit_code", "signal"),
    [
        ("echo hello", JobState.COMPLETED, 0, None),
        ("exit 3", JobState.FAILED, 3, None),
        ("kill -9 $$", JobState.FAILED, 0, 9),
    ],
)
def test_end_states_and_exit_codes_like_sacct(tmp_path, body, state, exit_code, signal) -> None:
    """exit 0 -> COMPLETED 0:0, exit 3 -> FAILED 3:0, killed by SIGKILL -> FAILED 0:9."""
    executor = LocalExecutor(tmp_path / "state")
    job_id = executor.submit(_script(tmp_path, body))
    record = _wait(executor, job_id)
    assert (record.state, record.exit_code, record.signal, record.source) == (
        state,
        exit_code,
        signal,
        "local",
    )


def test_ids_logs_and_environment(tmp_path) -> None:
    """Ids count up as local-<n>; --output gets %x and %j; extra env reaches the script."""
    executor = LocalExecutor(tmp_path / "state")
    first = executor.submit(_script(tmp_path, "echo first"))
    second = executor.submit(_script(tmp_path, 'echo "$GREETING $AUTOEXP_JOB_ID"'), env={"GREETING": "hi"})
    assert (first, second) == ("local-1", "local-2")
    _wait(executor, second)
    log = tmp_path / "logs" / "my job-local-2.out"
    assert executor.log_path(second) == str(log)
    assert log.read_text() == "hi local-2\n"


def test_a_later_process_still_knows_running_and_ended_jobs(tmp_path) -> None:
    """A fresh executor on the same state dir (autoexp restarted) sees RUNNING, then the exit code."""
    flag = tmp_path / "go"
    job_id = LocalExecutor(tmp_path / "state").submit(
        _script(tmp_path, f"while [ ! -e {flag} ]; do sleep 0.1; done; exit 7")
    )
    later = LocalExecutor(tmp_path / "state")
    assert later.query([job_id])[job_id].state is JobState.RUNNING
    flag.touch()
    record = _wait(later, job_id)
    assert (record.state, record.exit_code) == (JobState.FAILED, 7)


def test_cancel_ends_the_whole_process_group(tmp_path) -> None:
    """cancel() TERMs the group (grandchildren too) and the job reads CANCELLED; cancelling again is fine."""
    pidfile = tmp_path / "grandchild.pid"
    job_id = LocalExecutor(tmp_path / "state").submit(
        _script(tmp_path, f"sleep 300 & echo $! > {pidfile}; wait")
    )
    executor = LocalExecutor(tmp_path / "state", kill_wait_s=5)
    deadline = time.monotonic() + DEADLINE_S
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    executor.cancel(job_id)
    record = _wait(executor, job_id)
    assert record.state is JobState.CANCELLED
    grandchild = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(grandchild, 0)
            time.sleep(0.1)
    executor.cancel(job_id)


def test_cancel_kills_what_outlives_the_runner(tmp_path) -> None:
    """A stopped grandchild in a session of its own (as torchrun starts workers) still dies with the job."""
    pidfile = tmp_path / "frozen.pid"
    job_id = LocalExecutor(tmp_path / "state").submit(
        _script(
            tmp_path,
            f"{sys.executable} -c 'import os, signal; os.setsid(); "
            f'open("{pidfile}", "w").write(str(os.getpid())); os.kill(os.getpid(), signal.SIGSTOP)\' & wait',
        )
    )
    executor = LocalExecutor(tmp_path / "state", kill_wait_s=1)
    deadline = time.monotonic() + DEADLINE_S
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # let the script stop it
    executor.cancel(job_id)
    assert _wait(executor, job_id).state is JobState.CANCELLED
    frozen = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(frozen, 0)
            time.sleep(0.1)


def test_unknown_ids_and_unsupported_options(tmp_path) -> None:
    """An id the executor never gave out is UNKNOWN (source none); --dependency is refused clearly."""
    executor = LocalExecutor(tmp_path / "state")
    records = executor.query(["local-99", "12345"])
    assert all(r.state is JobState.UNKNOWN and r.source == "none" for r in records.values())
    with pytest.raises(ExecutorError, match="dependency"):
        executor.submit(_script(tmp_path, "true"), extra_args=["--dependency=afterany:1"])


def test_cancel_ends_processes_in_sessions_of_their_own(tmp_path) -> None:
    """A worker started in a session of its own that ignores SIGTERM (as torchrun's workers are, and as a
    rank blocked inside NCCL behaves) is still ended by cancel(): TERM, then KILL after kill_wait_s."""
    pidfile = tmp_path / "worker.pid"
    body = f"setsid bash -c 'trap \"\" TERM; echo $$ > {pidfile}; while true; do sleep 0.2; done' & wait"
    job_id = LocalExecutor(tmp_path / "state").submit(_script(tmp_path, body))
    executor = LocalExecutor(tmp_path / "state", kill_wait_s=1)
    deadline = time.monotonic() + DEADLINE_S
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = int(pidfile.read_text())
    assert os.getsid(worker) != os.getsid(0) and os.getpgid(worker) == worker  # its own session
    executor.cancel(job_id)
    assert _wait(executor, job_id).state is JobState.CANCELLED
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(worker, 0)
            time.sleep(0.1)
