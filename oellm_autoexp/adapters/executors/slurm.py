"""SlurmExecutor: the ONLY module that runs sbatch, squeue, sacct and scancel.

Every call goes through `run_slurm_command`, which has a timeout and turns any
failure into ExecutorError, so a flaky controller is "no information this
poll" for the monitor, never a failed job. Parsing lives in core/slurm_parse.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.executors import command_timing
from oellm_autoexp.adapters.executors.base import ExecutorError, ExecutorTimeout
from oellm_autoexp.adapters.executors.command_timing import CommandFailure
from oellm_autoexp.adapters.executors.parent_death import die_with_parent
from oellm_autoexp.core.decide.exclusions import scontrol_exclude_command
from oellm_autoexp.core.decide.spend import SPEND_SACCT_FORMAT, AttemptUsage, parse_usage
from oellm_autoexp.core.decide.successor import start_time_command
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState, has_ended_in_squeue
from oellm_autoexp.core.jobs.slurm_nodes import (
    NodeEvent,
    NodeHealth,
    node_events_command,
    parse_node_events,
    parse_partition_nodes,
    parse_scontrol_nodes,
)
from oellm_autoexp.core.jobs.slurm_parse import (
    SACCT_FORMAT,
    SEP,
    SQUEUE_FORMAT,
    find_comment,
    parse_job_gpu_types,
    parse_sacct,
    parse_sbatch_parsable,
    parse_squeue,
    parse_squeue_tagged,
)
from oellm_autoexp.core.jobs.strays import TAG_PREFIX, TaggedJob
from oellm_autoexp.plan.strategies import Estimate, parse_test_only, test_only_note

COMMAND_TIMEOUT_S = 30.0
# How long after sbatch returns a job can still be missing from squeue/sacct (the accounting
# loop runs every few seconds; busy controllers lag more).
CONTROLLER_LAG_S = 15.0
# Printed by squeue/scancel for ids the controller has already forgotten (MinJobAge).
# sbatch's answers for a shape the cluster can never give (not "busy": impossible).
_REFUSED = ("Requested node configuration is not available", "Invalid partition", "Invalid generic resource",
            "Invalid account", "Invalid qos")  # fmt: skip
_FORGOTTEN = ("Invalid job id", "already completing or completed", "Job/step already")


def run_slurm_command(
    argv: Sequence[str],
    timeout_s: float = COMMAND_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    *,
    base_env: Mapping[str, str] | None = None,
    stdin_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one Slurm CLI command; ExecutorError if it is missing or fails, ExecutorTimeout if it hangs.

    The command dies with the thread that started it (a SIGKILLed monitor leaves no
    sbatch behind to submit a job nobody tracks), and a timeout kills its whole
    process group (a wrapper script's children too). `env` is added to `base_env` (default:
    this process's environment); `stdin_text` is written to its input. Every run is reported
    (adapters/executors/command_timing.py) with its time and how it failed.
    """
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL if stdin_text is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=None
            if env is None and base_env is None
            else {**(os.environ if base_env is None else base_env), **(env or {})},
            start_new_session=True,
            preexec_fn=die_with_parent(os.getpid()),
        )
    except FileNotFoundError as exc:
        command_timing.report_since(argv[0], started, CommandFailure.MISSING)
        raise ExecutorError(f"{argv[0]}: command not found (is Slurm installed?)") from exc
    try:
        stdout, stderr = proc.communicate(stdin_text, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        _kill_group(proc)
        command_timing.report_since(argv[0], started, CommandFailure.TIMEOUT)
        raise ExecutorTimeout(f"{argv[0]} did not answer within {timeout_s:g} s") from exc
    except BaseException:
        _kill_group(proc)
        raise
    command_timing.report_since(argv[0], started, CommandFailure.EXIT_STATUS if proc.returncode else None)
    if proc.returncode != 0:
        raise ExecutorError(f"{argv[0]} failed ({proc.returncode}): {(stderr or stdout).strip()}")
    return subprocess.CompletedProcess(list(argv), proc.returncode, stdout, stderr)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


class SlurmExecutor:
    name = "slurm"

    def __init__(self, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self.settle_s = timeout_s + CONTROLLER_LAG_S

    def submit(
        self, script: Path, *, extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> str:
        done = run_slurm_command(["sbatch", "--parsable", *extra_args, str(script)], self.timeout_s, env)
        job_id = parse_sbatch_parsable(done.stdout)
        if not job_id:
            raise ExecutorError(f"sbatch printed no job id: {done.stdout.strip()!r}")
        return job_id

    def query(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}
        # A preempted job squeue still lists is over (has_ended_in_squeue): sacct has its end.
        live = {i: r for i, r in self._squeue(ids).items() if r.state is not JobState.PREEMPTED}
        missing = [i for i in ids if i not in live]
        done = self._sacct(missing) if missing else {}
        none = {i: JobRecord(i, JobState.UNKNOWN, "none") for i in ids}
        return {i: live.get(i) or done.get(i) or none[i] for i in ids}

    def query_tagged(self, job_ids: Sequence[str]) -> tuple[dict[str, JobRecord], list[TaggedJob]]:
        """query(), plus every live job of ours that carries a submit tag: ONE squeue call.

        squeue lists all of this user's jobs with their comments; the requested ids it
        does not list are asked of sacct (one call), as in query().
        """
        ids = list(dict.fromkeys(job_ids))
        argv = ["squeue", "--noheader", "--me", "--states=all", "-o", f"{SQUEUE_FORMAT}{SEP}%k"]
        text = run_slurm_command(argv, self.timeout_s).stdout
        listed, tagged = parse_squeue_tagged(text)
        # `--states=all` also lists jobs that just ended, without their exit code: those are
        # asked of sacct like the ones squeue no longer lists (and stay UNKNOWN until sacct knows).
        # A preempted job that is not requeued is one of them (waiting for squeue to forget it
        # took MinJobAge).
        live = {i: r for i, r in listed.items() if not has_ended_in_squeue(r.state)}
        missing = [i for i in ids if i not in live]
        done = self._sacct(missing) if missing else {}
        # slurmdbd lags the controller: a job squeue already shows ended can still read PENDING or
        # RUNNING in sacct for a moment. That row says nothing of the end (and a PENDING after RUNNING
        # would read as a requeue, whose new run forgets the log read so far): UNKNOWN until sacct knows.
        done = {i: r for i, r in done.items() if i not in listed or has_ended_in_squeue(r.state)}
        records = {i: live.get(i) or done.get(i) or JobRecord(i, JobState.UNKNOWN, "none") for i in ids}
        return records, [
            TaggedJob(i, tag, listed[i].state) for i, tag in tagged.items() if tag.startswith(TAG_PREFIX)
        ]

    def find_by_tag(self, tag: str) -> str | None:
        """The job submitted with `--comment=<tag>`: squeue first, then sacct (ended jobs).

        sacct keeps comments only with AccountingStoreFlags=job_comment; without
        it an ended job is not found, and the caller resubmits (the old one ended).
        """
        live = run_slurm_command(["squeue", "--noheader", "--states=all", "-o", "%i|%k"], self.timeout_s)
        found = find_comment(live.stdout, tag)
        if found is None:
            argv = [
                "sacct",
                "--noheader",
                "--parsable2",
                "-X",
                "--format=JobID,Comment",
                "--starttime=now-7days",
            ]
            found = find_comment(run_slurm_command(argv, self.timeout_s).stdout, tag)
        return found

    def cancel(self, job_id: str) -> None:
        self._scancel([job_id])

    def signal_tasks(self, job_id: str, signal_name: str) -> None:
        """Send a signal to every task of the job's steps (not the batch shell: scancel sends a
        signal other than KILL to the steps alone unless asked for --batch or --full)."""
        self._scancel_args(["--signal", signal_name, job_id])

    def _scancel(self, job_ids: list[str]) -> None:
        self._scancel_args(job_ids)

    def _scancel_args(self, args: list[str]) -> None:
        try:
            run_slurm_command(["scancel", *args], self.timeout_s)
        except ExecutorError as exc:
            if not any(text in str(exc) for text in _FORGOTTEN):
                raise

    def usage(self, job_ids: Sequence[str]) -> list[AttemptUsage]:
        """What every run of these ids held, and for how long (one sacct; core/decide/spend.py).

        `--duplicates` lists each run of a requeued id; a running job's elapsed time is its
        time so far.
        """
        if not job_ids:
            return []
        argv = ["sacct", "--allocations", "--duplicates", "--noheader", "--parsable2",
                "--format", SPEND_SACCT_FORMAT, "--jobs", ",".join(dict.fromkeys(job_ids))]  # fmt: skip
        return parse_usage(run_slurm_command(argv, self.timeout_s).stdout)

    def estimate(self, script: Path, extra_args: Sequence[str] = ()) -> Estimate:
        """When Slurm expects this submission to start (`sbatch --test-only`; nothing is queued).

        A refused shape is `refused`; a command that fails otherwise, or says no start, is "unknown".
        """
        argv = ["sbatch", "--test-only", *extra_args, str(script)]
        try:
            done = run_slurm_command(argv, self.timeout_s)
        except ExecutorTimeout as exc:
            return Estimate(None, note=str(exc))
        except ExecutorError as exc:
            refused = any(text in str(exc) for text in _REFUSED)
            # "sbatch failed (1): <stderr>": the stderr's reason, on one line (one table row each)
            return Estimate(None, note=test_only_note(str(exc).split(": ", 1)[-1]), refused=refused)
        return parse_test_only(done.stderr + done.stdout, tz=datetime.now().astimezone().tzinfo)

    def cancel_many(self, job_ids: Sequence[str]) -> None:
        """Cancel several jobs with ONE scancel (a fan-out's losers in the poll that found the winner)."""
        if job_ids:
            self._scancel(list(job_ids))

    def allocated_gpu_types(self, job_id: str) -> tuple[str, ...]:
        """The GPU types a running job was given (`scontrol show job -d`: JOB_GRES); () if untyped."""
        done = run_slurm_command(["scontrol", "show", "job", "-d", job_id], self.timeout_s)
        return parse_job_gpu_types(done.stdout)

    def unhealthy_nodes(self, nodes: Sequence[str]) -> list[NodeHealth]:
        """Which of `nodes` Slurm reports DOWN/DRAIN/FAIL (`scontrol show node`), with its reason."""
        if not nodes:
            return []
        done = run_slurm_command(["scontrol", "show", "node", ",".join(nodes)], self.timeout_s)
        return parse_scontrol_nodes(done.stdout)

    def node_events(self, nodes: Sequence[str], since: datetime) -> list[NodeEvent]:
        """The down/drain periods slurmdbd recorded for `nodes` since `since` (`sacctmgr show event`)."""
        if not nodes:
            return []
        done = run_slurm_command(node_events_command(nodes, since), self.timeout_s)
        return parse_node_events(done.stdout, tz=datetime.now().astimezone().tzinfo or UTC)

    def partition_nodes(self, partition: str | None) -> int | None:
        """How many nodes `partition` has (None: the default one); None if Slurm does not say."""
        done = run_slurm_command(["scontrol", "show", "partition", "-o"], self.timeout_s)
        return parse_partition_nodes(done.stdout, partition)

    def update_excluded_nodes(self, job_id: str, nodes: str) -> None:
        """Set a PENDING job's excluded nodes (`nodes` is the whole list: it replaces, not adds)."""
        run_slurm_command(scontrol_exclude_command(job_id, nodes), self.timeout_s)

    def started_at(self, job_id: str) -> datetime | None:
        """When the job started (sacct's Start); None while it has not, or sacct does not know it yet."""
        record = self._sacct([job_id]).get(job_id)
        return record.start if record else None

    def set_start_time(self, job_ids: Sequence[str], from_now_s: int) -> None:
        """Hold queued jobs until `from_now_s` from now (0: release them); ONE scontrol call."""
        if job_ids:
            run_slurm_command(start_time_command(job_ids, from_now_s), self.timeout_s)

    def _squeue(self, ids: list[str]) -> dict[str, JobRecord]:
        argv = ["squeue", "--noheader", "--jobs", ",".join(ids), "-o", SQUEUE_FORMAT]
        try:
            done = run_slurm_command(argv, self.timeout_s)
        except ExecutorError as exc:
            # squeue refuses a list whose only ids have been purged; that means "none live".
            if "Invalid job id" in str(exc):
                return {}
            raise
        return parse_squeue(done.stdout)

    def _sacct(self, ids: list[str]) -> dict[str, JobRecord]:
        argv = ["sacct", "--noheader", "--parsable2", "--format", SACCT_FORMAT, "--jobs", ",".join(ids)]
        return parse_sacct(run_slurm_command(argv, self.timeout_s).stdout)
