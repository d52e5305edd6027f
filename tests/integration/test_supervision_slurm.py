"""Who watches the watcher, on the localhost Slurm: a monitor paused while another takes over from
another host is fenced off when it wakes, and the only monitor's own pause is not the job's hang.

Each test runs `autoexp run` as a subprocess (tests/integration/test_monitor_slurm.py's
`AutoexpEnv`), stops and continues it with SIGSTOP/SIGCONT, and reads what happened from the
store and from Slurm's accounting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.conftest import require_unshare
from tests.integration.test_monitor_slurm import (
    COMPLETED,
    AutoexpEnv,
    slurm_jobs_with_tags,
    slurm_lines,
    wait_until,
)

pytestmark = pytest.mark.slurm

FAST = {"lock_stale_after_s": 5}  # with heartbeats every second (SETTINGS): taken over after 5 s of silence
OTHER_HOST = "login-b"


def start_on_other_host(autoexp: AutoexpEnv, *args: str) -> subprocess.Popen[bytes]:
    """`autoexp ARGS` in a UTS namespace whose host name is OTHER_HOST: a monitor on another login node."""
    log = (autoexp.tmp / f"monitor-{len(autoexp.procs) + 1}.log").open("wb")
    argv = ["unshare", "--uts", "sh", "-c", f'hostname {OTHER_HOST} && exec "$@"', "sh", *autoexp.argv(*args)]
    proc = subprocess.Popen(argv, cwd=autoexp.tmp, env=autoexp.env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)  # fmt: skip
    log.close()
    autoexp.procs.append(proc)
    return proc


def slurm_spans(job_ids: set[str]) -> list[tuple[datetime, datetime]]:
    """(start, end) of each job from sacct, oldest first."""
    lines = slurm_lines(["sacct", "--noheader", "--parsable2", "-X", "--format=Start,End", "--jobs",
                         ",".join(sorted(job_ids))])  # fmt: skip
    spans = [tuple(datetime.fromisoformat(v) for v in line.split("|")) for line in lines]
    return sorted(spans)  # type: ignore[arg-type]


def test_a_paused_monitor_is_fenced_off_when_another_host_took_over(autoexp: AutoexpEnv) -> None:
    """The monitor is SIGSTOPped; a second monitor on another host takes the stale lock, sees the
    first attempt fail and restarts it. When the first monitor wakes it judges nothing, submits
    nothing and exits 3 saying it was taken over; the run completes under the second monitor with
    exactly two attempts that never ran at once, and the failure charged once."""
    require_unshare(("--uts",), "a second monitor on another host name")
    script = autoexp.script(
        'if [ "$n" -eq 1 ]; then wait_for fail1; echo "attempt 1 fails" >&2; exit 1; fi\n'
        'wait_for release\necho "attempt $n done"\n'
    )
    first = autoexp.start("run", str(autoexp.experiment(["bash", str(script)], FAST)))
    autoexp.running(1)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        time.sleep(7)  # past the stale limit: its lock may be taken
        second = start_on_other_host(autoexp, "monitor-session", "--session-id", "1")

        def taken_over() -> bool:
            nonlocal second
            if second.poll() == 2:  # refused: on a loaded machine the lock looked fresh yet; again
                second = start_on_other_host(autoexp, "monitor-session", "--session-id", "1")
            session = autoexp.read(lambda st: st.get_session(1))
            return session is not None and session.monitor_host == OTHER_HOST

        wait_until(taken_over, "the second monitor holding the lock", 90)
        autoexp.flag("fail1")
        autoexp.running(2)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert autoexp.finish(first, timeout_s=60) == 3, autoexp.output(first)
    woke = autoexp.output(first)
    assert "taken over" in woke or "fenced" in woke, woke
    autoexp.flag("release")
    assert autoexp.finish(second) == 0, autoexp.output(second)
    attempts = autoexp.attempts()
    assert [a.attempt_no for a in attempts] == [1, 2]
    assert autoexp.reasons() == [
        ("restart", "Transient failure detected (error_type=crash)"),
        ("stop", COMPLETED),
    ]
    jobs = slurm_jobs_with_tags(autoexp.tags())
    assert jobs == {a.executor_job_id for a in attempts}
    (_, end1), (start2, _) = slurm_spans(jobs)
    assert start2 >= end1, "two attempts of one job ran at once"


def test_the_only_monitors_own_pause_is_not_the_jobs_hang(autoexp: AutoexpEnv) -> None:
    """The only monitor is SIGSTOPped for twice the hang limit while the job keeps training. On
    waking it says it stood still, reads the iterations written meanwhile and polls Slurm before any
    verdict: no hang is declared, nothing is cancelled, and the job completes in one attempt."""
    script = autoexp.script(
        'for i in $(seq 1 50); do echo " iteration $i/ 50 | lm loss: 1.0 |"; sleep 0.5; done\n'
        'echo "attempt $n done"\n'
    )
    monitoring = {"hang": {"no_output_timeout_s": 8}}
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)], monitoring)))
    autoexp.running(1)
    time.sleep(2)
    os.kill(monitor.pid, signal.SIGSTOP)
    try:
        time.sleep(18)
    finally:
        os.kill(monitor.pid, signal.SIGCONT)
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    said = autoexp.output(monitor)
    assert "stood still" in said and "hang detected" not in said, said
    assert len(autoexp.attempts()) == 1
    assert autoexp.reasons() == [("stop", COMPLETED)]


def test_autoexp_cancel_finds_every_job_of_the_session_by_its_tag(autoexp: AutoexpEnv) -> None:
    """A second live job carrying a tag the store recorded for the job (a submission no monitor saw:
    a fenced-off monitor's, a copy) is cancelled by `autoexp cancel` together with the tracked
    attempt, while jobs whose tags the store never recorded are left alone: another session's, and
    one with this job's numbers (another state dir's session 1 job 1, whose running job a cancel
    here used to kill). No monitor runs: its stray net would cancel the copy itself."""
    script = autoexp.script("wait_for never\n")
    submitted = autoexp.cli("submit", str(autoexp.experiment(["bash", str(script)])), "--no-monitor")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = autoexp.job()
    [attempt] = autoexp.attempts()
    tracked = attempt.executor_job_id or ""
    wrap = ["sbatch", "--parsable", "--wrap", "sleep 300", "-o", "/dev/null"]
    stray = slurm_lines([*wrap, f"--comment={attempt.submit_tag}"])[0]
    other = slurm_lines([*wrap, f"--comment=autoexp-{job.session_id + 100}-{job.id}-1-0badf00d"])[0]
    elsewhere = slurm_lines([*wrap, f"--comment=autoexp-{job.session_id}-{job.id}-7-0badf00d-g9"])[0]
    autoexp.extra_jobs += [stray, other, elsewhere]
    cancelled = autoexp.cli("cancel", timeout_s=30)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert tracked in cancelled.stdout and stray in cancelled.stdout, cancelled.stdout
    states = {
        i: slurm_lines(["squeue", "--noheader", "--states=all", "--jobs", i, "-o", "%T"])
        for i in (tracked, stray, other, elsewhere)
    }
    live = (["RUNNING"], ["PENDING"])
    assert states[other] in live and states[elsewhere] in live, states
    assert states[stray] in ([], ["CANCELLED"], ["COMPLETING"]), states
    if states[tracked] == ["COMPLETED"]:
        # Slurm started the pending attempt between the cancel's stop file and its scancel: the job script
        # saw the stop file and exited without training (core/templates/sbatch.sh.j2), as it must
        log = Path(attempt.log_path or "")
        assert "this job was stopped; exiting without training" in log.read_text(encoding="utf-8"), states
    else:
        assert states[tracked] in ([], ["CANCELLED"], ["COMPLETING"]), states
