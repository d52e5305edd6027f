"""A walltime warning that comes before the training is ready for it still reaches it.

Slurm may send `--signal=B:USR1@N` up to a minute early. On a loaded machine it came while the
job script was still setting up (bash's default action ended the job: judged a crash) and while
the workers were still importing torch (they inherit USR1 ignored, so it was lost and the job ran
into its time limit). The rendered script traps the warning from its first line, holds it until
the launch exists, and sends it again while the step runs. These tests run the real script under
bash (the local executor's path: no srun) with a real Python worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oellm_autoexp.plan.render import ScriptSpec, render_sbatch

# The worker: sleeps before installing its handler (torch's import, a checkpoint's load), then
# waits for the warning and says so. USR1 is ignored until then, as under the node wrapper.
WORKER = """
import signal, sys, time
time.sleep(float(sys.argv[1]))
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
print("worker: handler installed", flush=True)
deadline = time.monotonic() + 20
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(float(sys.argv[2]))  # lingers: repeats that come meanwhile are counted
print(f"worker: got the warning {len(got)} time(s)" if got else "worker: no warning", flush=True)
sys.exit(0 if got else 3)
"""


def spec(tmp_path: Path, *, setup_s: float, worker_start_s: float, linger_s: float = 0.0) -> ScriptSpec:
    return ScriptSpec(
        job_name="early", job_key="early", directives=(("time", "1"),), env=(),
        make_dirs=(str(tmp_path / "out"),), setup=(("sleep", str(setup_s)),),
        command=(sys.executable, "-c", WORKER, str(worker_start_s), str(linger_s)), nodes=1, use_srun=False,
        srun_options=(), master_port=None, forward_signals=("USR1", "TERM", "INT"), worker_signals=("USR1",),
    )  # fmt: skip


def run_warned_at(
    tmp_path: Path,
    warn_after_s: float,
    *,
    setup_s: float,
    worker_start_s: float,
    resend_s: int,
    linger_s: float = 0.0,
    resend_within_s: int = 600,
) -> tuple[int, str]:
    """Render and run the script; USR1 to the batch shell alone (Slurm's `B:`) after `warn_after_s`."""
    script = render_sbatch(
        spec(tmp_path, setup_s=setup_s, worker_start_s=worker_start_s, linger_s=linger_s),
        warning_resend_s=resend_s, warning_resend_within_s=resend_within_s,
    )  # fmt: skip
    path = tmp_path / "job.sh"
    path.write_text(script, encoding="utf-8")
    log = tmp_path / "job.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", str(path)], stdout=out, stderr=subprocess.STDOUT, env=env)
        time.sleep(warn_after_s)
        proc.send_signal(signal.SIGUSR1)
        rc = proc.wait(timeout=60)
    return rc, log.read_text(encoding="utf-8")


def test_a_warning_during_setup_is_held_until_the_launch(tmp_path: Path) -> None:
    """Before the fix the batch shell died of it (exit 138) and the training never ran."""
    rc, text = run_warned_at(tmp_path, 0.5, setup_s=2.0, worker_start_s=0.0, resend_s=1)
    assert rc == 0, text
    assert "worker: got the warning" in text
    assert text.index("autoexp: forwarding SIGUSR1 to the training processes") < text.index("worker: handler")


def test_a_warning_before_the_workers_handler_is_sent_again(tmp_path: Path) -> None:
    """The first delivery hits a worker that still ignores USR1; a repeat reaches its handler."""
    rc, text = run_warned_at(tmp_path, 1.0, setup_s=0.0, worker_start_s=2.5, resend_s=1)
    assert rc == 0, text
    assert "autoexp: forwarding SIGUSR1 to the training processes again (the step still runs)" in text
    assert text.index("worker: handler installed") < text.index("worker: got the warning")


def test_the_repeats_end_with_the_step(tmp_path: Path) -> None:
    """Nothing of the resender outlives the job: no repeat after the step's end, no process left."""
    rc, text = run_warned_at(tmp_path, 1.0, setup_s=0.0, worker_start_s=0.0, resend_s=5)
    assert rc == 0, text
    assert text.rstrip().endswith("autoexp: job step exited with status 0")
    time.sleep(0.3)  # the resender would sleep 5 s more if the script did not end it
    left = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "job.sh")], capture_output=True, text=True, check=False
    )
    assert left.stdout.strip() == "", left.stdout


def test_a_warning_to_an_older_step_goes_out_once(tmp_path: Path) -> None:
    """Past the resend window the processes listen: the warning is sent once and never again, so a
    handler that acts on every signal (a requeue) sees one. Within the window the same worker, still
    running, gets it again (the test above)."""
    rc, text = run_warned_at(
        tmp_path, 3.0, setup_s=0.0, worker_start_s=0.0, resend_s=1, resend_within_s=2, linger_s=2.5
    )
    assert rc == 0, text
    assert "worker: got the warning 1 time(s)" in text
    assert "again" not in text


# A worker that exits with the status it is given once a file appears: its end can then be
# placed exactly where the batch shell's wait loop used to lose it.
EXIT_ON_FILE = """
import os, pathlib, sys, time
print(f"worker: pid {os.getpid()}", flush=True)
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.01)
sys.exit(int(sys.argv[2]))
"""


def is_zombie(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    return stat.rsplit(") ", 1)[1].startswith("Z")


def run_with_exit_behind_a_trap(
    tmp_path: Path, status: int, *, stop: str, signal_as: bool
) -> tuple[int, str]:
    """The child has exited (a zombie, not yet reaped) when USR1 reaches the waiting shell: the
    shell `stop` ("batch" or "wrapper") is stopped, the worker exits, USR1 is queued, and the
    shell resumes to both at once. Before the fix the batch shell reported the trap's 138."""
    go = tmp_path / "go"
    spec = ScriptSpec(
        job_name="race", job_key="race", directives=(("time", "1"),), env=(),
        make_dirs=(str(tmp_path / "out"),), setup=(),
        command=(sys.executable, "-c", EXIT_ON_FILE, str(go), str(status)), nodes=1, use_srun=False,
        srun_options=(), master_port=None, forward_signals=("USR1", "TERM", "INT"), worker_signals=("USR1",),
        worker_signal_as=(("USR1", "USR2"),) if signal_as else (),
    )  # fmt: skip
    path = tmp_path / "job.sh"
    path.write_text(render_sbatch(spec, warning_resend_s=30, warning_resend_within_s=600), encoding="utf-8")
    log = tmp_path / "job.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", str(path)], stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while "worker: pid" not in log.read_text(encoding="utf-8") and time.monotonic() < deadline:
            time.sleep(0.01)
        worker = int(log.read_text(encoding="utf-8").split("worker: pid ")[1].split()[0])
        wrapper = int(Path(f"/proc/{worker}/stat").read_text(encoding="utf-8").rsplit(") ", 1)[1].split()[1])
        shell = proc.pid if stop == "batch" else wrapper
        os.kill(shell, signal.SIGSTOP)
        go.touch()
        while not is_zombie(worker) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(shell, signal.SIGUSR1)
        os.kill(shell, signal.SIGCONT)
        rc = proc.wait(timeout=30)
    return rc, log.read_text(encoding="utf-8")


@pytest.mark.parametrize("status", [0, 3])
def test_a_warning_as_the_child_exits_keeps_the_childs_status(tmp_path: Path, status: int) -> None:
    """The trapped USR1 breaks off `wait` (138) just as the child ends: the job reports the child's
    own status, not the trap's (a clean exit after the walltime warning read as a failure)."""
    rc, text = run_with_exit_behind_a_trap(tmp_path, status, stop="batch", signal_as=False)
    assert rc == status, text
    assert f"autoexp: job step exited with status {status}" in text


def test_the_node_wrapper_keeps_the_launchers_status_too(tmp_path: Path) -> None:
    """The node wrapper (a warning passed on as another signal) waits the same way."""
    rc, text = run_with_exit_behind_a_trap(tmp_path, 0, stop="wrapper", signal_as=True)
    assert rc == 0, text


def test_a_child_killed_by_a_signal_reports_it(tmp_path: Path) -> None:
    """A status over 128 with no trap run is the child's own: a SIGKILLed worker reads 137."""
    spec_ = ScriptSpec(
        job_name="k", job_key="k", directives=(("time", "1"),), env=(), make_dirs=(str(tmp_path / "out"),),
        setup=(), command=("bash", "-c", "kill -9 $$"), nodes=1, use_srun=False, srun_options=(),
        master_port=None, forward_signals=("USR1", "TERM", "INT"), worker_signals=("USR1",),
    )  # fmt: skip
    path = tmp_path / "job.sh"
    path.write_text(render_sbatch(spec_, warning_resend_s=30, warning_resend_within_s=600), encoding="utf-8")
    proc = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 137, proc.stderr
