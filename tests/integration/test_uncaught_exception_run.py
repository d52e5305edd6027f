"""A rank that raised but whose process lingers is decided within the settle window; a handled,
logged traceback followed by more iterations is left alone. Real processes under `autoexp run`
with the local executor: the project's torch workload (`--fault raise_and_linger`: the uncaught
exception's traceback through torch.distributed's excepthook, then a non-daemon thread keeps the
process alive) and a plain worker that logs a caught exception and trains on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

SETTLE_S = 2.0
DEADLINE_S = 150.0

# Iteration lines as the workload prints them; a logged traceback (logging.exception) and one
# printed with a rank prefix by the job itself between them, then more iterations.
HANDLED_WORKER = r"""
import logging, sys, time
from datetime import datetime
from oellm_autoexp.workloads.log_lines import IterationStats, format_iteration_line
def line(i):
    return format_iteration_line(IterationStats(iteration=i, total_iterations=12, consumed_samples=8 * i,
        elapsed_ms_per_iteration=200.0, learning_rate=1e-3, global_batch_size=8, lm_loss=5.0, grad_norm=1.0),
        datetime.now())
for i in range(1, 13):
    print(line(i), flush=True)
    if i == 4:
        try:
            raise ValueError("bad sample 17")
        except ValueError:
            logging.exception("sample skipped")
    if i == 6:
        for text in ("Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
                     "RuntimeError: retrying the data loader"):
            print(f"[rank0]: {text}", file=sys.stderr, flush=True)
    time.sleep(0.4)
"""


def _run(tmp_path: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"monitoring": "autoexp_workloads"},
                     {"restart": "megatron_transient"}],
        "experiment": {"name": "uncaught", "output_dir": "out"},
        "executor": "local",
        "backend": {"command": command},
        "monitoring": {"poll_interval_s": 1, "log_poll_interval_s": 0.2, "heartbeat_interval_s": 2,
                       "fatal_settle_s": SETTLE_S},
    }  # fmt: skip
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(experiment))
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp_path / "state"), "run", str(config)]
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S, check=False)


@pytest.mark.torch
def test_a_rank_that_raised_and_lingers_is_decided_within_the_settle_window(tmp_path: Path) -> None:
    """The workload raises at iteration 4 and never exits: stopped (an exception is no transient
    fault) from its `[rank0]:` exception line, within settle + 1 s of reading it, and the lingering
    process ended, instead of waiting for the hang limit."""
    command = ["python3", "-m", "oellm_autoexp.workloads.train", "--device", "cpu", "--steps", "30",
               "--save-interval", "5", "--step-time-s", "0.1", "--fault", "raise_and_linger",
               "--fault-at-step", "4", "--ckpt-dir", "out/checkpoints"]  # fmt: skip
    done = _run(tmp_path, command)
    with SQLiteStore(tmp_path / "state") as store:
        (job,) = store.jobs_for_session(1)
        (attempt,) = store.attempts_for_job(job.id)
        decisions = store.decisions_for_job(job.id)
    assert [d.action for d in decisions] == ["stop"], done.stdout[-3000:] + done.stderr[-3000:]
    (decision,) = decisions
    assert "exception" in decision.reason
    evidence = decision.evidence
    assert evidence["trigger"] == "fatal_line", evidence
    assert (
        evidence["first_fatal_line"]
        == "[rank0]: RuntimeError: injected crash at iteration 4 on rank 0; the process lingers"
    )
    assert SETTLE_S <= evidence["after_first_fatal_s"] <= SETTLE_S + 1.0, evidence
    log = Path(attempt.log_path or "").read_text()
    assert "[fault-injection] rank 0: raise_and_linger at iteration 4" in log
    assert attempt.ended_at is not None


def test_a_handled_traceback_followed_by_iterations_is_not_touched(tmp_path: Path) -> None:
    """A caught exception logged with its traceback, and a traceback the job prints with a rank
    prefix itself, each followed by more iterations: the run completes, decided once (completed)."""
    done = _run(tmp_path, [sys.executable, "-c", HANDLED_WORKER])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with SQLiteStore(tmp_path / "state") as store:
        (job,) = store.jobs_for_session(1)
        (attempt,) = store.attempts_for_job(job.id)
        decisions = [(d.action, d.reason) for d in store.decisions_for_job(job.id)]
    assert decisions == [("stop", "Job completed successfully")], done.stdout[-3000:]
    log = Path(attempt.log_path or "").read_text()
    assert "ValueError: bad sample 17" in log and "[rank0]: RuntimeError: retrying the data loader" in log
