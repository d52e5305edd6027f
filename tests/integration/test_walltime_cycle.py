"""A run longer than its time limit chains through walltime warnings to the end, losing no step.

`--time=1` with `slurm.signal: {enabled: true, seconds_before: 50}`: Slurm checks limits every
30 s, and may send the signal up to a minute early (sbatch(1)), so USR1 reaches the batch shell
anywhere from the start to ~30 s in (on a loaded machine, while the workers were still importing
torch). The shell forwards it, and again every 30 s while the step is young (a worker that was not
listening yet gets the repeat); train.py checkpoints at the end of the iteration it is in, prints `exiting
program after receiving SIGUSR1 at iteration N (checkpoint saved)` and exits. torchrun has
no USR1 handler and dies of it, so Slurm records FAILED 10:0; the exit line is what the
monitor goes by (config/monitoring/autoexp_workloads.yaml: error_type time_limit), and the
policy's `scheduler` rule resubmits. The next attempt resumes from that checkpoint.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, JobStatus, SQLiteStore
from tests.conftest import REPO_ROOT, SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]

CONFIG = REPO_ROOT / "config" / "experiments" / "train_local_slurm.yaml"
# 80 steps of >= 0.5 s cannot finish before the USR1 (or its repeat) at <= ~35 s: at least two attempts.
STEPS = 80
# Two or three attempts of at most ~30 s each, plus start-up and resubmission.
RUN_TIMEOUT_S = 300

ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+) \|")
LOADED = re.compile(r"successfully loaded checkpoint from \S+ at iteration (\d+)")
SAVED = re.compile(r"successfully saved checkpoint from iteration (\d+)")
USR1_EXIT = re.compile(r"exiting program after receiving SIGUSR1 at iteration (\d+) \(checkpoint saved\)")


@dataclass(frozen=True)
class AttemptLog:
    """What one attempt's log says about its iterations."""

    loaded: int | None  # checkpoint it resumed from
    iterations: list[int]  # every logged iteration, in order
    saved: list[int]  # checkpoints it completed
    usr1_exit: int | None  # iteration of the signal-triggered checkpoint and exit

    @classmethod
    def read(cls, path: Path) -> AttemptLog:
        text = path.read_text(errors="replace")
        loaded = LOADED.search(text)
        usr1 = USR1_EXIT.search(text)
        return cls(
            loaded=int(loaded.group(1)) if loaded else None,
            iterations=[int(m.group(1)) for m in ITERATION.finditer(text)],
            saved=[int(m.group(1)) for m in SAVED.finditer(text)],
            usr1_exit=int(usr1.group(1)) if usr1 else None,
        )


def run_experiment(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "out"
    train_args = ["--steps", str(STEPS), "--save-interval", "10", "--step-time-s", "0.5"]
    train_args += ["--device", "cpu", "--ckpt-dir", str(out / "checkpoints")]
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp_path / "state"), "run", str(CONFIG)]
    argv += [
        f"experiment.output_dir={out}",
        "slurm.sbatch.time=1",
        "+slurm.signal={enabled: true, seconds_before: 50}",
        f"backend.args={json.dumps(train_args)}",
    ]
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=tmp_path, check=False
        )
    except subprocess.TimeoutExpired:
        cancel = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp_path / "state"), "cancel"]
        subprocess.run(cancel, capture_output=True, timeout=60, check=False)
        raise


def test_walltime_signal_checkpoint_resubmit_resume(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    """USR1 -> checkpoint -> exit -> `scheduler` restart -> resume at checkpoint + 1, to the last step."""
    proc = run_experiment(tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output

    with SQLiteStore(tmp_path / "state") as store:
        (session,) = store.list_sessions()
        (job,) = store.jobs_for_session(session.id)
        attempts: list[AttemptInfo] = store.attempts_for_job(job.id)
        decisions = store.decisions_for_job(job.id)
    assert job.status == JobStatus.COMPLETED.value, job.status_reason
    assert len(attempts) >= 2, output

    # Every attempt but the last was ended by the walltime warning and restarted by `scheduler`.
    by_attempt = {d.attempt_id: d for d in decisions}
    for attempt in attempts[:-1]:
        decision = by_attempt[attempt.id]
        assert decision.action == "restart", decision.reason
        # A planned resubmission says what it is (issue 28), never "Transient failure".
        assert re.fullmatch(r"time limit reached at iteration \d+: resubmitted to continue \(.*budget.*\)",
                            decision.reason), decision.reason  # fmt: skip
        assert decision.evidence["rule"] == "scheduler"
        assert decision.evidence["kind"] == "timeout"
        assert decision.evidence["signal"] == "train_walltime_signal_exit"
    assert by_attempt[attempts[-1].id].reason == "Job completed successfully"

    logs = [AttemptLog.read(Path(a.log_path or "")) for a in attempts]
    assert logs[0].loaded is None and logs[0].iterations[0] == 1
    for i, log in enumerate(logs):
        # Contiguous within the attempt: no step skipped or logged twice.
        assert log.iterations == list(range(log.iterations[0], log.iterations[-1] + 1)), f"attempt {i + 1}"
        if i + 1 < len(logs):
            # Stopped by USR1 with a checkpoint AT its last step: nothing after it is lost.
            assert log.usr1_exit == log.iterations[-1] == log.saved[-1], f"attempt {i + 1}: {log}"
            nxt = logs[i + 1]
            assert nxt.loaded == log.usr1_exit, f"attempt {i + 2} resumed from {nxt.loaded}"
            assert nxt.iterations[0] == log.usr1_exit + 1, f"attempt {i + 2} started at {nxt.iterations[0]}"
    assert logs[-1].iterations[-1] == STEPS and logs[-1].usr1_exit is None
    assert (tmp_path / "out" / "checkpoints" / f"iter_{STEPS:07d}.pt").is_file()
    # Together the attempts logged every step exactly once.
    assert sorted(it for log in logs for it in log.iterations) == list(range(1, STEPS + 1))

    # `status` and `explain` show the same words for the walltime cycle.
    cli = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp_path / "state")]
    status = subprocess.run([*cli, "status"], capture_output=True, text=True, timeout=60, check=False)
    explain = subprocess.run(
        [*cli, "explain", job.name], capture_output=True, text=True, timeout=60, check=False
    )
    assert "completed" in status.stdout.splitlines()[0], status.stdout
    assert "Transient failure" not in explain.stdout, explain.stdout
    assert explain.stdout.count("RESTART: time limit reached at iteration") == len(attempts) - 1, (
        explain.stdout
    )
