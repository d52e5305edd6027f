"""The training workload for real: processes, gloo, checkpoints on disk, signals, injected faults.

Every test starts `python -m oellm_autoexp.workloads.train` (or torchrun) as a subprocess on
the CPU and reads its real output. Sizes are tiny: the machine has two cores.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch

TRAIN = ["-m", "oellm_autoexp.workloads.train"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
ITERATION = re.compile(r"^ \[[\d\- :]+\] iteration +(\d+)/ +(\d+) \|", re.MULTILINE)
STOPPED = 75  # EXIT_STOPPED_BY_SIGNAL


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def train(ckpt: Path, *args: str, torchrun: bool = False, timeout: float = 90) -> subprocess.CompletedProcess:
    launcher = TORCHRUN if torchrun else [sys.executable]
    cmd = [*launcher, *TRAIN, "--ckpt-dir", str(ckpt), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(), check=False)


def iterations(output: str) -> list[int]:
    return [int(m.group(1)) for m in ITERATION.finditer(output)]


def test_single_process_runs_and_checkpoints_atomically(tmp_path: Path) -> None:
    """Without a launcher, train runs every step, logs each iteration and leaves only complete checkpoints."""
    ckpt = tmp_path / "ck"
    done = train(ckpt, "--steps", "6", "--save-interval", "2", "--keep-last", "0")
    assert done.returncode == 0, done.stderr
    assert iterations(done.stdout) == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "iter_0000002.pt",
        "iter_0000004.pt",
        "iter_0000006.pt",
        "latest_checkpointed_iteration.txt",
    ]
    assert not list(ckpt.glob("*.tmp"))
    assert "successfully saved checkpoint from iteration 6 to" in done.stdout
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "6\n"


def test_resume_continues_from_latest_checkpoint(tmp_path: Path) -> None:
    """A restart loads the newest complete checkpoint, ignores a stale .tmp and runs only the remaining steps."""
    ckpt = tmp_path / "ck"
    first = train(ckpt, "--steps", "4", "--save-interval", "2")
    assert first.returncode == 0, first.stderr
    (ckpt / "iter_0000006.pt.tmp").write_bytes(b"half-written")  # a save that was cut short
    second = train(ckpt, "--steps", "7", "--save-interval", "2")
    assert second.returncode == 0, second.stderr
    assert "successfully loaded checkpoint from" in second.stdout and "at iteration 4" in second.stdout
    assert iterations(second.stdout) == [5, 6, 7]
    assert not list(ckpt.glob("*.tmp"))


def test_two_process_ddp_under_torchrun_with_gloo(tmp_path: Path) -> None:
    """torchrun --standalone --nproc_per_node=2 trains with gloo: world size 2, global batch 2x micro."""
    done = train(tmp_path / "ck", "--steps", "4", "--save-interval", "2", torchrun=True)
    assert done.returncode == 0, done.stderr
    assert "world size 2" in done.stdout and "backend gloo" in done.stdout
    assert "global batch size: 16 |" in done.stdout
    assert iterations(done.stdout) == [1, 2, 3, 4]


def test_sigusr1_saves_at_current_step_exits_75_and_resumes(tmp_path: Path) -> None:
    """SIGUSR1 makes train checkpoint at the iteration it is in, exit 75, and a restart resumes there."""
    ckpt = tmp_path / "ck"
    cmd = [sys.executable, *TRAIN, "--ckpt-dir", str(ckpt), "--steps", "1000", "--save-interval", "500"]
    proc = subprocess.Popen([*cmd, "--step-time-s", "0.1"], stdout=subprocess.PIPE, text=True, env=env())
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # wait until training is really under way
        seen.append(line)
        if ITERATION.match(line) and len(iterations("".join(seen))) >= 3:
            break
    proc.send_signal(signal.SIGUSR1)
    rest, _ = proc.communicate(timeout=60)
    output = "".join(seen) + rest
    assert proc.returncode == STOPPED
    stop = int(re.search(r"receiving SIGUSR1 at iteration (\d+)", output).group(1))
    assert iterations(output)[-1] == stop
    assert f"successfully saved checkpoint from iteration {stop} to" in output
    assert (ckpt / f"iter_{stop:07d}.pt").exists()

    resumed = train(ckpt, "--steps", str(stop + 2), "--save-interval", "500")
    assert resumed.returncode == 0, resumed.stderr
    assert iterations(resumed.stdout) == [stop + 1, stop + 2]


def test_a_warning_in_the_last_step_or_at_teardown_lets_the_run_finish(tmp_path: Path) -> None:
    """A walltime warning (sent again every few seconds by the job script) that lands in the last
    step, or while the process tears down, changes nothing: the run is done, exit 0, no stop line.
    (Before: exit 75 at the last step, and a repeat at teardown killed the rank, -10.)"""
    ckpt = tmp_path / "ck"
    cmd = [sys.executable, *TRAIN, "--ckpt-dir", str(ckpt), "--steps", "3", "--save-interval", "10"]
    proc = subprocess.Popen([*cmd, "--step-time-s", "1.0"], stdout=subprocess.PIPE, text=True, env=env())
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # the second step logged: the third and last is under way
        seen.append(line)
        if iterations(line) == [2]:
            break
    while proc.poll() is None:  # a warning every 50 ms until the process is gone
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.05)
    output = "".join(seen) + proc.stdout.read()
    assert proc.returncode == 0, output
    assert iterations(output) == [1, 2, 3] and "receiving SIGUSR1" not in output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "3\n"


FAULT = ["--steps", "8", "--save-interval", "2", "--fault-at-step", "3"]


def test_crash_raises_a_real_exception(tmp_path: Path) -> None:
    """--fault crash raises a RuntimeError: traceback on stderr, exit 1, after iteration 2."""
    done = train(tmp_path / "ck", *FAULT, "--fault", "crash")
    assert done.returncode == 1
    assert "RuntimeError: injected crash at iteration 3 on rank 0" in done.stderr
    assert "Traceback (most recent call last)" in done.stderr
    assert iterations(done.stdout) == [1, 2]


def test_kill_is_a_real_sigkill(tmp_path: Path) -> None:
    """--fault kill ends the process with SIGKILL (-9) and nothing after the last iteration line."""
    done = train(tmp_path / "ck", *FAULT, "--fault", "kill")
    assert done.returncode == -signal.SIGKILL
    assert iterations(done.stdout) == [1, 2]


def test_kill_under_torchrun_is_reported_by_torchrun(tmp_path: Path) -> None:
    """A SIGKILLed rank under torchrun shows up in torchrun's own report as exitcode -9."""
    done = train(
        tmp_path / "ck", *FAULT, "--fault", "kill", "--fault-rank", "1", "--pg-timeout-s", "20", torchrun=True
    )
    assert done.returncode != 0
    assert "exitcode: -9" in done.stderr
    assert "Signal 9 (SIGKILL) received by PID" in done.stderr


def test_segv_is_a_real_segfault(tmp_path: Path) -> None:
    """--fault segv dies of SIGSEGV (-11); faulthandler prints the Python stack."""
    done = train(tmp_path / "ck", *FAULT, "--fault", "segv")
    assert done.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in done.stderr


def test_nan_loss_is_logged_and_aborts(tmp_path: Path) -> None:
    """--fault nan poisons a weight: the iteration line shows `lm loss: NAN`, then training aborts (exit 1)."""
    done = train(tmp_path / "ck", *FAULT, "--fault", "nan")
    assert done.returncode == 1
    assert "| lm loss: NAN |" in done.stdout
    assert "| number of nan iterations: 1 |" in done.stdout
    assert "RuntimeError: Rank 0: found NaN in lm loss at iteration 3" in done.stderr


def test_cpu_oom_is_a_real_allocation_failure(tmp_path: Path) -> None:
    """--fault oom on the CPU caps the address space and asks for 64 GiB: the allocator itself fails."""
    done = train(tmp_path / "ck", *FAULT, "--fault", "oom")
    assert done.returncode == 1
    assert "DefaultCPUAllocator: can't allocate memory" in done.stderr


def test_hang_ends_in_the_gloo_timeout(tmp_path: Path) -> None:
    """--fault hang on rank 1: rank 0 blocks in the collective until gloo's own timeout (5 s) fires."""
    t0 = time.monotonic()
    done = train(
        tmp_path / "ck", *FAULT, "--fault", "hang", "--fault-rank", "1", "--pg-timeout-s", "5", torchrun=True
    )
    elapsed = time.monotonic() - t0
    assert done.returncode != 0
    assert "Timed out waiting 5000ms" in done.stderr
    assert "exitcode: 1" in done.stderr  # rank 0 raised; torchrun then ended the sleeper
    assert elapsed < 60, f"took {elapsed:.0f} s: the timeout did not end the run"
