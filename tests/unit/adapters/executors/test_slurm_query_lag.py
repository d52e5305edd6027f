"""SlurmExecutor.query_tagged when slurmdbd lags the controller (the squeue and sacct processes faked at the
subprocess boundary): a job squeue already shows ended, whose sacct row still reads PENDING, is UNKNOWN
until sacct knows its end, never PENDING (which the monitor would read as a requeue; found by CI: a
2-node pre-flight failure restarted as `crash` because the requeue's new run forgot the log's cause)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from oellm_autoexp.adapters.executors import slurm
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.core.jobs.job_state import JobState


def fake_commands(monkeypatch: pytest.MonkeyPatch, squeue: str, sacct: str) -> None:
    def run(argv: Sequence[str], timeout_s: float, env: object = None) -> subprocess.CompletedProcess[str]:
        out = {"squeue": squeue, "sacct": sacct}[argv[0]]
        return subprocess.CompletedProcess(list(argv), 0, out, "")

    monkeypatch.setattr(slurm, "run_slurm_command", run)


@pytest.mark.parametrize(
    ("sacct", "expected"),
    [
        # slurmdbd has not heard of the start or the end yet: no record of the end, so UNKNOWN
        ("288|PENDING|0:0|None assigned|Unknown|Unknown\n", JobState.UNKNOWN),
        ("288|RUNNING|0:0|node[1-2]|2026-11-26T17:07:45|Unknown\n", JobState.UNKNOWN),
        # once it has, its end with the exit code
        (
            "288|FAILED|1:0|node[1-2]|2026-11-26T17:07:45|2026-11-26T17:07:46\n"
            "288.batch|FAILED|1:0|node1|2026-11-26T17:07:45|2026-11-26T17:07:46\n",
            JobState.FAILED,
        ),
    ],
)
def test_an_ended_job_is_not_read_from_a_lagging_sacct(
    monkeypatch: pytest.MonkeyPatch, sacct: str, expected: JobState
) -> None:
    fake_commands(monkeypatch, squeue="288|FAILED|NonZeroExitCode|node[1-2]|autoexp-tag\n", sacct=sacct)
    records, _ = SlurmExecutor().query_tagged(["288"])
    assert records["288"].state is expected


def test_a_job_squeue_forgot_is_read_from_sacct(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not listed by squeue at all (MinJobAge passed): sacct's row is all there is, whatever it says."""
    fake_commands(monkeypatch, squeue="", sacct="300|RUNNING|0:0|node1|2026-11-26T17:07:45|Unknown\n")
    records, _ = SlurmExecutor().query_tagged(["300"])
    assert records["300"].state is JobState.RUNNING
