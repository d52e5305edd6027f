"""The monitor against the real localhost Slurm: restarts, stops, resumes, outages and the session CLI.

Every test writes its own experiment YAML and job script under tmp_path, runs `autoexp` as a
subprocess (the product as users run it) with its state dir under tmp_path, and reads the
outcome back from the SQLite store, `sacct` and the CLI. Jobs wait on flag files the test
creates, so nothing depends on fixed sleeps; every wait polls with a deadline. The
`autoexp` fixture (conftest.py) stops any monitor still running and scancels every job the session
submitted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from oellm_autoexp.adapters.executors.factory import submit_plan
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.adapters.store.sqlite_store import AttemptInfo, DecisionInfo, JobInfo, SQLiteStore
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.daemon.session import create_session
from oellm_autoexp.daemon.submitter import submit_tag
from oellm_autoexp.plan.plan import build_plans

pytestmark = pytest.mark.slurm

NCCL_LINE = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3"
)
NCCL_RESTART = "Transient failure detected (error_type=nccl)"
COMPLETED = "Job completed successfully"
RUN_DEADLINE_S = 90.0  # one monitor run of a few short attempts; generous for a loaded 2-core machine
WAIT_POLL_S = 0.2
OUTAGE_POLLS = 8  # at least this many polls that fail, then that hang, in the outage test
OUTAGE_PHASE_S = 60.0  # and each phase lasts this long: two minutes of Slurm outage in all
SETTINGS = {"poll_interval_s": 1, "heartbeat_interval_s": 1, "log_poll_interval_s": 0.5}

T = TypeVar("T")

# A job script for the tests below. The attempt number is counted in a file next to the
# script (the monitor gives no hint to the job); `wait_for FLAG` blocks until the test
# creates FLAG, with a cap so that a broken test never leaves a job running for long.
SCRIPT_HEAD = """\
#!/bin/bash
here="$(dirname "$0")"
n=$(( $(cat "$here/attempts" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$here/attempts"
echo "attempt $n on $(hostname) (slurm job ${SLURM_JOB_ID:-none})"
wait_for() { for _ in $(seq 1200); do [ -e "$here/$1" ] && return 0; sleep 0.1; done; return 1; }
"""


def wait_until(condition: Callable[[], T | None], what: str, timeout_s: float = RUN_DEADLINE_S) -> T:
    """Poll `condition` until it returns something truthy; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(WAIT_POLL_S)


def slurm_lines(argv: list[str]) -> list[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    return [line for line in done.stdout.splitlines() if line.strip()]


def squeue_state(job_id: str) -> str | None:
    lines = slurm_lines(["squeue", "--noheader", "--states=all", "--jobs", job_id, "-o", "%T"])
    return lines[0].strip() if lines else None


def sacct_state(job_id: str) -> str | None:
    lines = slurm_lines(["sacct", "--noheader", "--parsable2", "-X", "--format=State", "--jobs", job_id])
    return lines[0].split()[0] if lines else None


def slurm_jobs_with_tags(tags: set[str]) -> set[str]:
    """Slurm ids of every job (live or ended) whose --comment is one of `tags`."""
    found = set()
    sacct = ["sacct", "--noheader", "--parsable2", "-X", "--format=JobID,Comment", "--starttime=now-1days"]
    squeue = ["squeue", "--noheader", "--states=all", "-o", "%i|%k"]
    for line in [*slurm_lines(sacct), *slurm_lines(squeue)]:
        job_id, _, comment = line.partition("|")
        if comment.strip() in tags:
            found.add(job_id.strip())
    return found


@dataclass
class AutoexpEnv:
    """One test's experiment, state dir and monitors; `store` reads what the monitor recorded."""

    tmp: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    extra_jobs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    def script(self, body: str, name: str = "job.sh") -> Path:
        path = self.tmp / name
        path.write_text(SCRIPT_HEAD + body, encoding="utf-8")
        path.chmod(0o755)
        return path

    def experiment(self, command: list[str], monitoring: dict[str, Any] | None = None, **extra: Any) -> Path:
        data = {
            "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
            "experiment": {"name": "mon", "output_dir": str(self.tmp / "out")},
            "executor": "slurm",
            "backend": {"command": command},
            "monitoring": {**SETTINGS, **(monitoring or {})},
            **extra,
        }
        path = self.tmp / "experiment.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(self.state), *args]

    def cli(self, *args: str, timeout_s: float = RUN_DEADLINE_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), cwd=self.tmp, env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)  # fmt: skip

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """`autoexp ARGS` in the background; its output goes to tmp/monitor-N.log."""
        log = (self.tmp / f"monitor-{len(self.procs) + 1}.log").open("wb")
        proc = subprocess.Popen(self.argv(*args), cwd=self.tmp, env=env or self.env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        index = self.procs.index(proc) + 1
        return (self.tmp / f"monitor-{index}.log").read_text(errors="replace")

    def finish(self, proc: subprocess.Popen[bytes], timeout_s: float = RUN_DEADLINE_S) -> int:
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"monitor still running after {timeout_s:g} s:\n{self.output(proc)[-3000:]}")

    def flag(self, name: str, text: str = "") -> None:
        (self.tmp / name).write_text(text, encoding="utf-8")

    # -- reading the store ----------------------------------------------------------------------

    def read(self, fn: Callable[[SQLiteStore], T]) -> T:
        with SQLiteStore(self.state) as store:
            return fn(store)

    def job(self) -> JobInfo:
        jobs = self.read(lambda s: s.jobs_for_session(1))
        assert len(jobs) == 1, jobs
        return jobs[0]

    def attempts(self) -> list[AttemptInfo]:
        return self.read(lambda s: s.attempts_for_job(self.job().id))

    def decisions(self) -> list[DecisionInfo]:
        return self.read(lambda s: s.decisions_for_job(self.job().id))

    def reasons(self) -> list[tuple[str, str]]:
        return [(d.action, d.reason) for d in self.decisions()]

    def running(self, attempt_no: int) -> str:
        """Wait until attempt `attempt_no` is RUNNING in the store AND in squeue; its Slurm id."""

        def seen() -> str | None:
            if not self.state.joinpath("autoexp.db").exists() or not self.read(
                lambda s: s.jobs_for_session(1)
            ):
                return None
            found = [a for a in self.attempts() if a.attempt_no == attempt_no]
            if not found or found[0].state.value != "RUNNING" or not found[0].executor_job_id:
                return None
            job_id = found[0].executor_job_id
            return job_id if squeue_state(job_id) == "RUNNING" else None

        return wait_until(seen, f"attempt {attempt_no} RUNNING")

    def script_started(self, attempt_no: int) -> str:
        """`running`, and the job's script (SCRIPT_HEAD) has counted itself as run `attempt_no`.

        Slurm reports RUNNING before the batch script's first line: a test that interrupts the
        run from outside (requeue, a node set down) waits for this, or the interrupted run never
        counted itself and the next one takes its place as run 1 (a CI flake, 2026-11-26)."""
        job_id = self.running(attempt_no)
        counter = self.tmp / "attempts"
        wait_until(lambda: counter.exists() and counter.read_text().strip() == str(attempt_no),
                   f"run {attempt_no}'s script to start")  # fmt: skip
        return job_id

    def tags(self) -> set[str]:
        return {a.submit_tag for a in self.read(lambda s: s.attempts_for_session(1))}

    # -- cleaning up ----------------------------------------------------------------------------

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        ids = set(self.extra_jobs)
        if self.state.joinpath("autoexp.db").exists():
            ids |= {a.executor_job_id for a in self.read(lambda s: s.attempts_for_session(1))
                    if a.executor_job_id}  # fmt: skip
            ids |= slurm_jobs_with_tags(self.tags())
        if ids:
            subprocess.run(["scancel", *sorted(ids)], capture_output=True, timeout=30, check=False)


def autoexp_environ() -> dict[str, str]:
    """This process's environment without the user's config dirs: tests see only the shipped config."""
    return {k: v for k, v in os.environ.items() if k not in ("AUTOEXP_CONFIG_DIR", "AUTOEXP_SHIPPED_CONFIG")}


def nccl_then_success(ax: AutoexpEnv) -> Path:
    """Attempt 1 prints a real NCCL error and exits 1; attempt 2 succeeds."""
    return ax.script(
        f"""\
sleep 1
if [ "$n" -eq 1 ]; then
  echo "iteration 1: training" ; echo {json.dumps(NCCL_LINE)} >&2
  exit 1
fi
echo "attempt $n trains to the end"
"""
    )


# ---------------------------------------------------------------------------------- 1 and 10


@pytest.fixture(scope="module")
def nccl_run(tmp_path_factory: pytest.TempPathFactory, slurm_cluster: object) -> Iterator[dict[str, Any]]:
    """One `autoexp run` of a job whose first attempt dies of NCCL and whose second succeeds.

    Shared by the restart test (1) and the state-file/CLI test (10): one run, two views.
    """
    ax = AutoexpEnv(tmp_path_factory.mktemp("nccl"), env=autoexp_environ())
    try:
        script = nccl_then_success(ax)
        done = ax.cli("run", str(ax.experiment(["bash", str(script)])))
        yield {"ax": ax, "done": done}
    finally:
        ax.cleanup()


def test_nccl_failure_is_restarted_as_a_new_slurm_job(nccl_run: dict[str, Any]) -> None:
    """A job that prints a real NCCL error and exits 1 is restarted as a new Slurm job with the
    reason `Transient failure detected (error_type=nccl)`; the second attempt completes, so the run
    exits 0 and the job is recorded completed."""
    ax, done = nccl_run["ax"], nccl_run["done"]
    assert done.returncode == 0, done.stdout + done.stderr
    attempts = ax.attempts()
    assert [a.attempt_no for a in attempts] == [1, 2]
    assert len({a.executor_job_id for a in attempts}) == 2
    assert [a.state.value for a in attempts] == ["FAILED", "COMPLETED"]
    assert ax.reasons() == [("restart", NCCL_RESTART), ("stop", COMPLETED)]
    assert ax.job().status == "completed"
    assert ax.job().restart_count == 1
    assert sacct_state(attempts[1].executor_job_id or "") == "COMPLETED"


def test_state_file_status_and_explain_show_the_decisions(nccl_run: dict[str, Any]) -> None:
    """After the run, `monitor_state.json` in the state dir is valid JSON naming the session, the
    job, both attempts with their Slurm ids and the restart reason; `autoexp status --json` and
    `autoexp explain JOB` show the same decisions."""
    ax: AutoexpEnv = nccl_run["ax"]
    snapshot = json.loads((ax.state / "monitor_state.json").read_text())
    text = json.dumps(snapshot)
    attempts = ax.attempts()
    session = ax.read(lambda s: s.get_session(1))
    assert session is not None and session.name in text
    assert ax.job().name in text
    for a in attempts:
        assert f'"{a.executor_job_id}"' in text
    assert NCCL_RESTART in text and COMPLETED in text

    status = ax.cli("status", "--json")
    assert status.returncode == 0, status.stderr
    row = json.loads(status.stdout)["jobs"][0]
    assert row["status"] == "completed"
    assert row["attempt"] == 2 and row["slurm_id"] == attempts[1].executor_job_id
    assert row["last_decision"] == f"stop: {COMPLETED}"
    assert row["restarts"] == 1

    explain = ax.cli("explain", ax.job().name)
    assert explain.returncode == 0, explain.stderr
    assert f"RESTART: {NCCL_RESTART}" in explain.stdout
    assert f"STOP: {COMPLETED}" in explain.stdout
    assert "NCCL error in:" in explain.stdout  # the evidence line
    for a in attempts:
        assert f"job {a.executor_job_id}" in explain.stdout


# ---------------------------------------------------------------------------------- 2


@pytest.mark.torch
def test_real_oom_is_not_restarted(autoexp: AutoexpEnv) -> None:
    """The train workload runs out of host memory for real at step 2 (RLIMIT_AS, then a huge
    tensor): the allocator's error is classified oom, which the policy excludes, so the job is
    stopped with `Permanent failure detected (excluded error_type: oom)` after exactly one attempt."""
    command = [sys.executable, "-m", "oellm_autoexp.workloads.train", "--steps", "5", "--fault", "oom",
               "--fault-at-step", "2", "--device", "cpu", "--ckpt-dir", str(autoexp.tmp / "ckpt")]  # fmt: skip
    done = autoexp.cli("run", str(autoexp.experiment(command)), timeout_s=180)
    assert done.returncode == 1, done.stdout + done.stderr
    attempts = autoexp.attempts()
    assert len(attempts) == 1 and attempts[0].state.value == "FAILED"
    assert autoexp.reasons() == [("stop", "Permanent failure detected (excluded error_type: oom)")]
    assert autoexp.job().status == "stopped"


# ---------------------------------------------------------------------------------- 3


def test_four_scancels_spend_the_retry_budget(autoexp: AutoexpEnv) -> None:
    """A RUNNING job scancelled from outside autoexp is restarted (kind cancelled); the 4th scancel
    finds the budget of 3 spent: `retry budget exhausted (attempt 4/3)`, 4 attempts, 4 Slurm ids."""
    script = autoexp.script('wait_for never\necho "not cancelled?"\n')
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    ids = []
    for attempt_no in range(1, 5):
        ids.append(autoexp.running(attempt_no))
        subprocess.run(["scancel", ids[-1]], check=True, timeout=30)
    assert autoexp.finish(monitor) == 1, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert [a.executor_job_id for a in attempts] == ids
    assert len(set(ids)) == 4
    reasons = autoexp.reasons()
    assert [r[0] for r in reasons] == ["restart"] * 3 + ["stop"]
    assert all(r[1].startswith("Transient failure detected") for r in reasons[:3]), reasons
    assert reasons[-1][1] == "retry budget exhausted (attempt 4/3)"
    assert autoexp.job().status == "stopped"


# ---------------------------------------------------------------------------------- 4


def test_monitor_killed_mid_session_loses_and_duplicates_nothing(autoexp: AutoexpEnv) -> None:
    """`autoexp submit --no-monitor`, then `monitor-session` is SIGKILLed while the job runs. The job
    fails (NCCL) while no monitor watches. A new `monitor-session` judges that ended attempt, restarts
    it once, and the restart completes: 2 attempts, and exactly 2 Slurm jobs carry the session's tags."""
    script = autoexp.script(
        f"""\
if [ "$n" -eq 1 ]; then
  wait_for fail_now
  echo {json.dumps(NCCL_LINE)} >&2
  exit 1
fi
echo "attempt $n done"
"""
    )
    submitted = autoexp.cli("submit", str(autoexp.experiment(["bash", str(script)])), "--no-monitor")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    first = autoexp.start("monitor-session", "--session-id", "1")
    job_id = autoexp.running(1)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)  # reaped: its pid is really gone, so the lock counts as dead

    autoexp.flag("fail_now")
    wait_until(lambda: sacct_state(job_id) == "FAILED", "attempt 1 to fail in sacct")
    assert [a.ended_at for a in autoexp.attempts()] == [None]  # nobody saw the end yet

    second = autoexp.cli("monitor-session", "--session-id", "1")
    assert second.returncode == 0, second.stdout + second.stderr
    attempts = autoexp.attempts()
    assert [a.attempt_no for a in attempts] == [1, 2]
    assert attempts[0].executor_job_id == job_id
    assert [a.state.value for a in attempts] == ["FAILED", "COMPLETED"]
    assert autoexp.reasons() == [("restart", NCCL_RESTART), ("stop", COMPLETED)]
    recorded = {a.executor_job_id for a in attempts}
    assert slurm_jobs_with_tags(autoexp.tags()) == recorded


def test_intent_recorded_but_not_confirmed_is_adopted_by_tag(autoexp: AutoexpEnv) -> None:
    """A monitor that died between recording the intent and recording sbatch's job id: the job is
    in Slurm with the intent's tag as --comment, the store has no id. `monitor-session` adopts that
    job by its tag instead of submitting a second one, and watches it to the end."""
    script = autoexp.script('echo "attempt $n done"\n')
    path = autoexp.experiment(["bash", str(script)])
    plans = build_plans(load_jobs(str(path), []), str(autoexp.tmp))
    now = datetime.now(UTC)
    with SQLiteStore(autoexp.state) as store:
        _, jobs = create_session(store, plans, name="crashed", config_path=str(path), now=now)
        tag = submit_tag(1, jobs[0].id, 1)
        store.record_intent(jobs[0].id, 1, tag, now=now)
    job_id = submit_plan(SlurmExecutor(), plans[0], [f"--comment={tag}"])  # then the "crash"
    autoexp.extra_jobs.append(job_id)

    done = autoexp.cli("monitor-session", "--session-id", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "adopted job" in done.stdout
    attempts = autoexp.attempts()
    assert len(attempts) == 1
    assert attempts[0].executor_job_id == job_id and attempts[0].submit_tag == tag
    assert attempts[0].state.value == "COMPLETED"
    assert autoexp.reasons() == [("stop", COMPLETED)]
    assert slurm_jobs_with_tags(autoexp.tags()) == {job_id}


def test_monitor_killed_between_a_stop_decision_and_its_effect(autoexp: AutoexpEnv) -> None:
    """A database holding `stop: Job completed successfully` with the job still active (an older
    monitor wrote the two in separate steps and died between them): the next `monitor-session`
    carries the recorded stop out (job completed) and exits, instead of waiting forever."""
    script = autoexp.script('echo "attempt $n done"\n')
    submitted = autoexp.cli("submit", str(autoexp.experiment(["bash", str(script)])), "--no-monitor")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    attempt = autoexp.attempts()[0]
    job_id = attempt.executor_job_id or ""
    wait_until(lambda: sacct_state(job_id) == "COMPLETED", "the job to complete")
    now = datetime.now(UTC)
    with SQLiteStore(autoexp.state) as store:  # what the dead monitor got as far as writing
        store.update_attempt_state(attempt.id, JobState.COMPLETED, exit_code=0, ended_at=now)
        store.record_decision(attempt.job_id, attempt_id=attempt.id, action="stop", reason=COMPLETED, now=now,
                              evidence={"kind": "success", "state": "COMPLETED"})  # fmt: skip

    done = autoexp.cli("monitor-session", "--session-id", "1", timeout_s=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert autoexp.job().status == "completed"
    assert autoexp.reasons() == [("stop", COMPLETED)]
    assert len(autoexp.attempts()) == 1


# ---------------------------------------------------------------------------------- 5


def slurm_wrapper(bin_dir: Path, name: str, mode_file: Path) -> None:
    """`name` on PATH that fails (mode `fail`), hangs (`hang`) or runs the real command, by mode_file."""
    real = shutil.which(name)
    assert real, f"{name} not found"
    wrapper = bin_dir / name
    wrapper.write_text(
        f"""#!/bin/bash
mode="$(cat {str(mode_file)!r} 2>/dev/null)"
case "$mode" in
  fail) echo "{name}: error: Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
  hang) exec sleep 60 ;;
esac
exec {real!r} "$@"
""",
        encoding="utf-8",
    )
    wrapper.chmod(0o755)


@pytest.mark.slow
def test_squeue_and_sacct_outage_is_not_a_failure(autoexp: AutoexpEnv) -> None:
    """For two minutes squeue and sacct first fail (exit 1), then hang past the executor's timeout,
    while the job runs and then completes unseen. The monitor only warns; once Slurm answers again it records the
    job COMPLETED. No restart."""
    bin_dir = autoexp.tmp / "bin"
    bin_dir.mkdir()
    mode = autoexp.tmp / "slurm_mode"
    for name in ("squeue", "sacct"):
        slurm_wrapper(bin_dir, name, mode)
    script = autoexp.script('while [ ! -e "$here/release" ]; do echo "step $n"; sleep 0.5; done\necho done\n')
    env = {
        **autoexp.env,
        "PATH": f"{bin_dir}{os.pathsep}{autoexp.env['PATH']}",
        "AUTOEXP_SLURM_TIMEOUT_S": "2",
    }
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])), env=env)
    job_id = autoexp.running(1)

    mode.write_text("fail")
    phase_end = time.monotonic() + OUTAGE_PHASE_S
    wait_until(lambda: time.monotonic() > phase_end and
               autoexp.output(monitor).count("Unable to contact slurm controller") >= OUTAGE_POLLS,
               "failed polls")  # fmt: skip
    mode.write_text("hang")
    autoexp.flag("release")  # the job ends while the monitor is blind
    phase_end = time.monotonic() + OUTAGE_PHASE_S
    wait_until(lambda: time.monotonic() > phase_end and
               autoexp.output(monitor).count("did not answer within 2 s") >= OUTAGE_POLLS,
               "hung polls")  # fmt: skip
    assert sacct_state(job_id) == "COMPLETED"
    mode.write_text("ok")

    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert len(attempts) == 1 and attempts[0].state.value == "COMPLETED"
    assert autoexp.reasons() == [("stop", COMPLETED)]
    assert autoexp.job().restart_count == 0


# ---------------------------------------------------------------------------------- 6


def test_second_monitor_on_the_same_session_is_refused(autoexp: AutoexpEnv) -> None:
    """While `autoexp run` monitors a session, `monitor-session` for the same session exits 2 with
    a message naming the holder's pid; the first monitor is unaffected and finishes the job."""
    script = autoexp.script('wait_for release\necho "attempt $n done"\n')
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    autoexp.running(1)
    second = autoexp.cli("monitor-session", "--session-id", "1", timeout_s=30)
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"already monitored by pid {monitor.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    autoexp.flag("release")
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    assert autoexp.reasons() == [("stop", COMPLETED)]


def test_stale_lock_is_taken_after_the_configured_time(autoexp: AutoexpEnv) -> None:
    """A lock whose holder (a live process) stopped heartbeating longer ago than
    `monitoring.lock_stale_after_s` is free: `monitor-session` takes it and finishes the job."""
    script = autoexp.script('echo "attempt $n done"\n')
    path = autoexp.experiment(["bash", str(script)], {"lock_stale_after_s": 5})
    submitted = autoexp.cli("submit", str(path), "--no-monitor")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    stale = datetime.now(UTC) - timedelta(seconds=30)  # held by this (live) test process, long silent
    assert autoexp.read(lambda s: s.acquire_monitor_lock(1, pid=os.getpid(), host=socket.gethostname(),
                                                         now=stale, stale_after_s=60))  # fmt: skip
    done = autoexp.cli("monitor-session", "--session-id", "1", timeout_s=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert autoexp.reasons() == [("stop", COMPLETED)]


# ---------------------------------------------------------------------------------- 7


def test_autoexp_cancel_stops_the_job_for_good(autoexp: AutoexpEnv) -> None:
    """`autoexp cancel` ends the running job and the monitor does not restart it: one attempt,
    CANCELLED in Slurm, job status cancelled_by_user, and no other Slurm job with the session's tags."""
    script = autoexp.script('wait_for never\necho "not cancelled?"\n')
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    job_id = autoexp.running(1)
    cancelled = autoexp.cli("cancel", timeout_s=30)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert autoexp.finish(monitor) == 1, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert len(attempts) == 1
    assert autoexp.job().status == "cancelled_by_user"
    assert autoexp.reasons() == [("stop", "Cancelled by user (autoexp cancel); not restarting")]
    wait_until(lambda: sacct_state(job_id) == "CANCELLED", "the job CANCELLED in sacct", 30)
    assert attempts[0].state.value == "CANCELLED"
    assert slurm_jobs_with_tags(autoexp.tags()) == {job_id}


def test_autoexp_cancel_during_a_restart_cooldown_prevents_the_restart(autoexp: AutoexpEnv) -> None:
    """A job whose attempt failed and whose restart waits out a cooldown is cancelled with
    `autoexp cancel` before the cooldown ends: the monitor does not submit the restart."""
    script = autoexp.script("exit 1\n")
    restart = {"rules": [{"name": "transient", "match": {"kinds": ["crash"]}, "action": "restart",
                          "cooldown_s": 6}]}  # fmt: skip
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)], restart=restart)))
    wait_until(lambda: autoexp.state.joinpath("autoexp.db").exists() and autoexp.read(
        lambda s: s.jobs_for_session(1)) and [a for a, _ in autoexp.reasons()] == ["restart"],
        "the restart decision")  # fmt: skip
    cancelled = autoexp.cli("cancel", timeout_s=30)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert autoexp.finish(monitor) == 1, autoexp.output(monitor)
    assert len(autoexp.attempts()) == 1, autoexp.output(monitor)
    assert autoexp.job().status == "cancelled_by_user"
    assert len(slurm_jobs_with_tags(autoexp.tags())) == 1


def test_monitor_whose_lock_was_taken_over_stops(autoexp: AutoexpEnv) -> None:
    """When another monitor takes the session's lock (this one's heartbeat looked stale), the
    next heartbeat tells this monitor so and it stops instead of deciding beside the new holder."""
    script = autoexp.script("wait_for release\n")
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    autoexp.running(1)
    taken = autoexp.read(lambda s: s.acquire_monitor_lock(
        1, pid=1, host="elsewhere", now=datetime.now(UTC) + timedelta(hours=1), stale_after_s=60))  # fmt: skip
    assert taken
    assert autoexp.finish(monitor, timeout_s=30) == 3
    assert "lock" in autoexp.output(monitor)
    session = autoexp.read(lambda s: s.get_session(1))
    assert session is not None and (session.monitor_pid, session.monitor_host) == (1, "elsewhere")
    assert autoexp.decisions() == []


# ---------------------------------------------------------------------------------- 8


def test_job_that_fails_before_it_is_seen_running_is_judged(autoexp: AutoexpEnv) -> None:
    """Jobs that exit 3 at once go PENDING -> FAILED between two polls (the monitor never sees them
    RUNNING); each is still judged from sacct: three restarts, then the budget stops the job."""
    script = autoexp.script("exit 3\n")
    done = autoexp.cli("run", str(autoexp.experiment(["bash", str(script)], {"poll_interval_s": 2})))
    assert done.returncode == 1, done.stdout + done.stderr
    attempts = autoexp.attempts()
    assert len(attempts) == 4
    assert all(a.state.value == "FAILED" and a.exit_code == 3 for a in attempts)
    assert any(a.started_at is None for a in attempts)  # at least one was never seen RUNNING
    assert autoexp.reasons() == [("restart", "Transient failure detected (error_type=crash)")] * 3 + [
        ("stop", "retry budget exhausted (attempt 4/3)")
    ]


# ---------------------------------------------------------------------------------- 9


def test_silent_job_is_detected_as_hung_and_restarted(autoexp: AutoexpEnv) -> None:
    """A job that logs a few Megatron iterations and then goes silent is judged hung after
    `monitoring.hang.no_output_timeout_s` (10 s), cancelled and restarted with the reason
    `Transient failure detected (error_type=hang)`; the second attempt completes."""
    script = autoexp.script(
        """\
for i in 1 2 3; do echo " iteration        $i/       3 | lm loss: 1.0 |"; sleep 0.3; done
if [ "$n" -eq 1 ]; then wait_for never; fi
echo "attempt $n done"
"""
    )
    monitoring = {"hang": {"no_output_timeout_s": 10}}
    done = autoexp.cli("run", str(autoexp.experiment(["bash", str(script)], monitoring)))
    assert done.returncode == 0, done.stdout + done.stderr
    attempts = autoexp.attempts()
    assert len(attempts) == 2
    assert attempts[0].state.value == "CANCELLED" and attempts[1].state.value == "COMPLETED"
    assert autoexp.reasons() == [
        ("restart", "Transient failure detected (error_type=hang)"),
        ("stop", COMPLETED),
    ]
    assert "hang detected" in done.stdout


def test_manual_nccl_error_timeout_injection_restarts_the_job(autoexp: AutoexpEnv) -> None:
    """The seed's "Manual Test 2": appending `[default0]:NCCL ERROR timeout` to a running job's log is
    classified and restarts the job at once (the first attempt still ran: it is cancelled), and the
    second attempt completes."""
    script = autoexp.script(
        """\
for i in 1 2 3; do echo " iteration        $i/       3 | lm loss: 1.0 |"; sleep 0.2; done
if [ "$n" -eq 1 ]; then wait_for never; fi
echo "attempt $n done"
"""
    )
    monitor = autoexp.start("run", str(autoexp.experiment(["bash", str(script)])))
    job_id = autoexp.running(1)
    log = wait_until(lambda: autoexp.attempts()[0].log_path, "the first attempt's log path")
    wait_until(lambda: "iteration        3/" in Path(log).read_text(errors="replace"), "the third iteration")
    with open(log, "a", encoding="utf-8") as handle:  # what the seed's tester did by hand
        handle.write("[default0]:NCCL ERROR timeout\n")
    assert autoexp.finish(monitor) == 0, autoexp.output(monitor)
    attempts = autoexp.attempts()
    assert [a.state.value for a in attempts] == ["CANCELLED", "COMPLETED"]
    assert attempts[0].executor_job_id == job_id
    assert autoexp.reasons() == [
        ("restart", "Transient failure detected (error_type=nccl_timeout)"),
        ("stop", COMPLETED),
    ]
    restart = autoexp.decisions()[0].evidence
    assert restart["trigger"] == "fatal_line" and restart["lines"] == ["[default0]:NCCL ERROR timeout"]


# ---------------------------------------------------------------------------------- replay


def replayed(ax: AutoexpEnv) -> list[dict[str, Any]]:
    """`autoexp replay --session 1 JOB --json`: per attempt, the recorded and the replayed decisions."""
    done = ax.cli("replay", "--session", "1", ax.job().name, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def test_replay_of_a_session_gives_the_decisions_the_monitor_took(nccl_run: dict[str, Any]) -> None:
    """`autoexp replay --session` over the NCCL run (attempt 1 dies, attempt 2 completes) replays both
    attempts from the monitor's timing record: the same decisions, at the same log offsets."""
    rows = replayed(nccl_run["ax"])
    assert [r["attempt"] for r in rows] == [1, 2]
    assert [[d["reason"] for d in r["replayed"]] for r in rows] == [[NCCL_RESTART], [COMPLETED]]
    for row in rows:
        assert row["same"], row
        assert [d["offset"] for d in row["replayed"]] == [d["offset"] for d in row["recorded"]]


def test_replay_of_an_early_decision_stops_at_the_same_offset(autoexp: AutoexpEnv) -> None:
    """A job prints an NCCL watchdog timeout and then blocks (as NCCL survivors do): the monitor acts on
    the settled fatal line while the job still runs. Its replay from the timing record takes the same
    restart at the same log offset, before the lines the cancel added to the log."""
    watchdog = (
        "[rank0]:[E1122 04:21:32.820484898 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=16, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=30000) "
        "ran for 30012 milliseconds before timing out."
    )
    script = autoexp.script(
        f"""\
for i in 1 2 3; do echo " iteration        $i/       3 | lm loss: 1.0 |"; sleep 0.3; done
if [ "$n" -eq 1 ]; then echo {json.dumps(watchdog)} >&2; wait_for never; fi
echo "attempt $n done"
"""
    )
    done = autoexp.cli("run", str(autoexp.experiment(["bash", str(script)], {"fatal_settle_s": 1})))
    assert done.returncode == 0, done.stdout + done.stderr
    restart = ("restart", "Transient failure detected (error_type=nccl_timeout)")
    assert autoexp.reasons() == [restart, ("stop", COMPLETED)]
    rows = replayed(autoexp)
    first = rows[0]
    assert first["same"], first
    [decision] = first["replayed"]
    assert (decision["action"], decision["reason"], decision["trigger"]) == (*restart, "fatal_line")
    assert decision["after_first_fatal_s"] == 1.0
    assert decision["offset"] == first["recorded"][0]["offset"]
    assert decision["offset"] < Path(autoexp.attempts()[0].log_path or "").stat().st_size
    assert rows[1]["same"], rows[1]
