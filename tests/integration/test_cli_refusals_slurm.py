"""Issue 13 D6, D3 and the resume hint, on the real localhost Slurm: what the terminal says and
the exit code when a submission is refused, when --detach finds the session held, on Ctrl-C."""

from __future__ import annotations

import signal

import pytest

from tests.integration.test_monitor_slurm import COMPLETED, AutoexpEnv

pytestmark = pytest.mark.slurm


def test_refused_first_sbatch_says_so_and_run_exits_non_zero(autoexp: AutoexpEnv) -> None:
    """D6: sbatch refuses the only job (no such partition): the terminal says it is not retried
    and that nothing could be submitted; `run` exits 1 without monitoring."""
    script = autoexp.script('echo "attempt $n"\n')
    path = autoexp.experiment(["bash", str(script)])
    done = autoexp.cli("run", str(path), "--sbatch-arg=--partition=no_such_partition", timeout_s=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not retried" in done.stdout and "retrying in" not in done.stdout
    assert "nothing could be submitted (1 job(s) refused)" in done.stderr
    assert "Traceback" not in done.stderr
    assert autoexp.job().status == "stopped"


def test_detach_on_a_held_session_is_refused_in_the_terminal(autoexp: AutoexpEnv) -> None:
    """D3: while `run` monitors the session, `monitor-session --detach` prints the refusal (naming
    the holder's pid) in the terminal and exits 2; the first monitor goes on and finishes."""
    script = autoexp.script('wait_for release\necho "attempt $n done"\n')
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    autoexp.running(1)
    second = autoexp.cli("monitor-session", "--session-id", "1", "--detach", timeout_s=60)
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"already monitored by pid {monitor.pid}" in second.stderr
    assert "started in the background" not in second.stdout
    autoexp.flag("release")
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)


def test_sigint_to_run_prints_the_exact_resume_command(autoexp: AutoexpEnv) -> None:
    """Ctrl-C to `autoexp run` prints the exact `autoexp ... monitor-session --session-id 1`; running
    that command as printed resumes the session and finishes the job."""
    script = autoexp.script('wait_for release\necho "attempt $n done"\n')
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    autoexp.running(1)
    monitor.send_signal(signal.SIGINT)
    assert autoexp.finish(monitor, timeout_s=30) == 0
    lines = [line for line in autoexp.output(monitor).splitlines() if line.startswith("resume with: ")]
    assert lines == [f"resume with: autoexp --state-dir {autoexp.state} monitor-session --session-id 1"]
    autoexp.flag("release")
    args = lines[0].removeprefix("resume with: autoexp ").split()
    done = autoexp.cli(*args[2:]) if args[0] == "--state-dir" else pytest.fail(lines[0])
    assert done.returncode == 0, done.stdout + done.stderr
    assert autoexp.reasons() == [("stop", COMPLETED)]
