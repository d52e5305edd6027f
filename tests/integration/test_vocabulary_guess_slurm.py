"""The word-model guess (issue #26) on the real localhost Slurm, as a user relies on it.

An attempt that Slurm ends FAILED, whose log no pattern explains, is named by the class its words
read as (core/classify/guess.py): an InfiniBand queue pair failure as nccl (transient: restarted);
a diverged loss as numerical_instability, which megatron_transient would stop, but a guess never
stops a run: it is restarted as a crash, the reason naming the guess and why it did not stop.
`autoexp explain` shows the reason, and `autoexp replay --session` guesses alike. With the pattern
set's `vocabulary: false` in the experiment's `monitoring:` section the same log is a plain crash.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from oellm_autoexp.core.watch.evidence import Evidence
from tests.integration.test_monitor_slurm import (
    COMPLETED,
    AutoexpEnv,
    autoexp_environ,
    sacct_state,
    slurm_jobs_with_tags,
)

pytestmark = pytest.mark.slurm

DIVERGED = "ERROR:root:training diverged at iteration 120: the loss exploded to 3.1e+38, stopping the run"
INFINIBAND = "ERROR: InfiniBand queue pair transition failed on mlx5_0, peer unreachable"
GUESSED = "guessed from the words of line"
NEVER_STOPS = "; a guess never stops a run"  # the judge's note where a guessed stop became a restart
CRASH_RESTART = "Transient failure detected (error_type=crash)"  # a failed attempt no line explains
NO_GUESS = {"vocabulary": False}  # the shipped patterns (the default set, modified), no word model


def fail_once_with(ax: AutoexpEnv, line: str) -> str:
    """A job script: attempt 1 prints `line` to stderr and exits 1; later attempts succeed."""
    body = f'if [ "$n" -eq 1 ]; then echo {json.dumps(line)} >&2; exit 1; fi\necho "attempt $n done"\n'
    return str(ax.script(body))


def guess_reason(ax: AutoexpEnv, reason: str, error_type: str, line: str) -> bool:
    """`reason` names `error_type` as guessed from `line` (in full), by its number in attempt 1's log.

    The number is read from the log: srun's own lines about the step's end come before the
    script's stderr there."""
    log = ax.attempts()[0].log_path
    assert log is not None
    line_no = Path(log).read_text(encoding="utf-8").splitlines().index(line) + 1
    named = f"{error_type} {GUESSED} {line_no} (no pattern matched it; p="
    return named in reason and (reason.endswith(f"): {line}") or reason.endswith(f"): {line}{NEVER_STOPS}"))


@pytest.fixture(scope="module")
def diverged_run(tmp_path_factory: pytest.TempPathFactory, slurm_cluster: object) -> Iterator[AutoexpEnv]:
    """One `autoexp run` of a job whose attempt 1 prints DIVERGED and exits 1 (shared by the stop
    test and the replay test: one run, two views); its output is in `run.out`, its exit status in `run.rc`."""
    ax = AutoexpEnv(tmp_path_factory.mktemp("diverged"), env=autoexp_environ())
    try:
        done = ax.cli("run", str(ax.experiment(["bash", fail_once_with(ax, DIVERGED)])))
        ax.flag("run.out", done.stdout + done.stderr)
        ax.flag("run.rc", str(done.returncode))
        yield ax
    finally:
        ax.cleanup()


def test_a_diverged_loss_guessed_permanent_is_restarted_not_stopped(diverged_run: AutoexpEnv) -> None:
    """The line matches no pattern; Slurm ends the attempt FAILED; its words read as
    numerical_instability, which megatron_transient would stop. A guess is not evidence enough to
    stop: the attempt is restarted as a crash (a second Slurm job, which completes), and the reason
    (also in `autoexp explain` and `status`) names the guess, its line, and why it did not stop."""
    ax = diverged_run
    assert (ax.tmp / "run.rc").read_text() == "0", (ax.tmp / "run.out").read_text()
    attempts = ax.attempts()
    assert [a.state.value for a in attempts] == ["FAILED", "COMPLETED"]
    assert sacct_state(attempts[0].executor_job_id or "") == "FAILED"
    assert slurm_jobs_with_tags(ax.tags()) == {a.executor_job_id for a in attempts}
    assert (ax.tmp / "attempts").read_text().strip() == "2"
    restart, stop = ax.decisions()
    assert (restart.action, stop.action) == ("restart", "stop"), (restart, stop)
    assert restart.reason.startswith(f"{CRASH_RESTART}; ") and restart.reason.endswith(NEVER_STOPS), restart
    assert guess_reason(ax, restart.reason, "numerical_instability", DIVERGED), restart.reason
    evidence = Evidence.from_json(restart.evidence)
    assert (evidence.signal, evidence.error_type, evidence.kind, evidence.trigger) == (
        None,
        None,
        "crash",
        "end",
    )
    explain = ax.cli("explain", ax.job().name)
    assert explain.returncode == 0, explain.stderr
    assert f"RESTART: {restart.reason}" in explain.stdout, explain.stdout


def test_the_replay_of_the_session_guesses_alike(diverged_run: AutoexpEnv) -> None:
    """`autoexp replay --session` reads the attempt from the monitor's timing record and takes the same
    decision: the restart, with the same reason naming the guess."""
    ax = diverged_run
    done = ax.cli("replay", "--session", "1", ax.job().name, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(done.stdout)
    assert rows and all(row["same"] for row in rows), rows
    first = rows[0]
    (recorded,) = first["recorded"]
    (replayed,) = first["replayed"]
    assert (replayed["action"], replayed["trigger"]) == ("restart", "end"), replayed
    assert replayed["reason"] == recorded["reason"], first
    assert guess_reason(ax, replayed["reason"], "numerical_instability", DIVERGED), replayed


def test_with_vocabulary_false_the_same_log_is_a_crash_and_restarted(autoexp: AutoexpEnv) -> None:
    """The experiment's `monitoring:` section carries the pattern keys `include` (the shipped set)
    and `vocabulary: false`: nothing guesses, the failed attempt is a crash with no cause line,
    restarted under the transient rule; attempt 2 completes."""
    config = autoexp.experiment(["bash", fail_once_with(autoexp, DIVERGED)], NO_GUESS)
    done = autoexp.cli("run", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert [a.state.value for a in autoexp.attempts()] == ["FAILED", "COMPLETED"]
    assert (autoexp.tmp / "attempts").read_text().strip() == "2"
    assert autoexp.reasons() == [("restart", CRASH_RESTART), ("stop", COMPLETED)]
    restart = Evidence.from_json(autoexp.decisions()[0].evidence)
    # No cause at all: no pattern, no guess.
    assert (restart.signal, restart.error_type, restart.kind) == (None, None, "crash"), restart


def test_an_infiniband_failure_no_pattern_names_is_guessed_nccl_and_restarted(autoexp: AutoexpEnv) -> None:
    """The InfiniBand line matches no pattern; its words read as nccl, a transient class: the
    attempt is restarted as a new Slurm job with the guess in the reason, and attempt 2 completes."""
    done = autoexp.cli("run", str(autoexp.experiment(["bash", fail_once_with(autoexp, INFINIBAND)])))
    assert done.returncode == 0, done.stdout + done.stderr
    attempts = autoexp.attempts()
    assert [a.state.value for a in attempts] == ["FAILED", "COMPLETED"]
    assert len({a.executor_job_id for a in attempts}) == 2
    (restart, stop) = autoexp.reasons()
    assert restart[0] == "restart" and restart[1].startswith("Transient failure detected (error_type=nccl); ")
    assert guess_reason(autoexp, restart[1], "nccl", INFINIBAND), restart
    assert stop == ("stop", COMPLETED)
    assert Evidence.from_json(autoexp.decisions()[0].evidence).signal == "vocabulary_guess"


# XLA's allocator line as a narrow terminal wrapped it: neither half is a message any pattern knows
WRAPPED_OOM = (
    "2019-06-13 01:17:08.886805: E tensorflow/compiler/xla/python/local_client.cc:672] Execution of replica 0 "
    "failed: Resource exhausted: Out ",
    "of memory while trying to allocate 5520758552 bytes.",
)


def test_a_wrapped_out_of_memory_line_is_read_whole_and_stops(autoexp: AutoexpEnv) -> None:
    """An attempt Slurm ends FAILED whose only failure line a terminal cut in two: before guessing from words,
    the monitor reads the log's tail with wrapped lines joined (core/classify/wrapped.py). Joined, the line is
    the allocator's out-of-memory: a pattern reading, not a guess, so the permanent class stops the run (the
    shipped policy excludes oom) and no second Slurm job is submitted."""
    head, tail = WRAPPED_OOM
    body = f"echo {json.dumps(head)} >&2\necho {json.dumps(tail)} >&2\nexit 1\n"
    done = autoexp.cli("run", str(autoexp.experiment(["bash", str(autoexp.script(body))])))
    attempts = autoexp.attempts()
    assert [a.state.value for a in attempts] == ["FAILED"], done.stdout + done.stderr
    assert slurm_jobs_with_tags(autoexp.tags()) == {attempts[0].executor_job_id}
    ((action, reason),) = autoexp.reasons()
    assert action == "stop" and "error_type: oom" in reason and GUESSED not in reason, reason
    evidence = Evidence.from_json(autoexp.decisions()[0].evidence)
    assert evidence.error_type == "oom" and (evidence.signal or "").startswith("allocators."), evidence


# A raised exception no rule knows (python_exception reads it a catch-all `exception`); its words read cuda_error
CATCH_ALL_CUDA = "RuntimeError: the device kernel returned an illegal instruction on the GPU"


def test_a_catch_all_exception_refined_to_a_cuda_error_is_restarted(autoexp: AutoexpEnv) -> None:
    """A catch-all `exception` stops under the shipped policy (a Python exception repeats). Here its own
    words read as cuda_error: the failed attempt is restarted as a CUDA error is (a second Slurm job, which
    completes), and the reason says the class refines a catch-all exception whose class and message no
    rule knows."""
    done = autoexp.cli("run", str(autoexp.experiment(["bash", fail_once_with(autoexp, CATCH_ALL_CUDA)])))
    assert done.returncode == 0, done.stdout + done.stderr
    attempts = autoexp.attempts()
    assert [a.state.value for a in attempts] == ["FAILED", "COMPLETED"]
    assert slurm_jobs_with_tags(autoexp.tags()) == {a.executor_job_id for a in attempts}
    (restart, stop) = autoexp.reasons()
    assert restart[0] == "restart" and restart[1].startswith(
        "Transient failure detected (error_type=cuda_error); "
    )
    log = attempts[0].log_path
    assert log is not None
    line_no = Path(log).read_text(encoding="utf-8").splitlines().index(CATCH_ALL_CUDA) + 1
    named = (
        f"cuda_error {GUESSED} {line_no} (a catch-all exception: its class and message matched no rule; p="
    )
    assert named in restart[1] and restart[1].endswith(f"): {CATCH_ALL_CUDA}"), restart
    assert stop == ("stop", COMPLETED)
    assert Evidence.from_json(autoexp.decisions()[0].evidence).signal == "vocabulary_guess"
