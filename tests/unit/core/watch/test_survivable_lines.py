"""Lines a run may survive are no line to act on while it goes on (fallback readings).

A DataLoader worker's own last words (`ERROR: Unexpected segmentation fault encountered in worker.`)
say that a worker died, not the run: the monitor does not act on them while the run goes on
(catalogs/dataloader.yaml, fallback entries). The main process's report of the death is the fatal line;
with nothing else in the log they are the failed attempt's cause."""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import log_cause
from oellm_autoexp.core.classify.uncaught import acts_while_running
from oellm_autoexp.core.watch.attempt_view import AttemptView, EarlySettings
from oellm_autoexp.core.watch.verdict import Trigger

PATTERNS = load_patterns(["megatron_production"])

LAST_WORDS = {
    "segfault": "ERROR: Unexpected segmentation fault encountered in worker.",
    "oom": "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
}
MAIN_REPORT = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Segmentation fault."


def iteration(i: int) -> str:
    return f" [2026-11-22 04:21:0{i % 10}] iteration        {i}/      12 | lm loss: 5.0E+00 |"


def view() -> AttemptView:
    v = AttemptView(PATTERNS, early=EarlySettings(settle_s=5.0))
    v.mark_running(0.0)
    v.read([iteration(1), iteration(2)], 1.0)
    return v


@pytest.mark.parametrize("line", LAST_WORDS.values())
def test_a_workers_last_words_open_no_settle_window(line: str) -> None:
    """The run goes on after them (a loader that respawns its workers): no verdict, ever."""
    v = view()
    v.read([line], 10.0)
    assert v.fatal_due_s() is None
    assert v.fatal_verdict(100.0) is None
    v.read([iteration(3)], 120.0)
    assert v.fatal_verdict(200.0) is None


def test_the_main_process_report_is_the_fatal_line() -> None:
    """torch's main process reports the worker's death: that line opens the window, judged segfault."""
    v = view()
    v.read([LAST_WORDS["segfault"], MAIN_REPORT], 10.0)
    assert v.fatal_due_s() == 15.0
    verdict = v.fatal_verdict(15.0)
    assert verdict is not None and verdict.trigger is Trigger.FATAL_LINE
    assert verdict.cause is not None and verdict.cause.error_type == "segfault"


@pytest.mark.parametrize(("error_type", "line"), LAST_WORDS.items())
def test_alone_in_a_failed_log_they_are_the_cause(error_type: str, line: str) -> None:
    """A failed attempt that no other line explains: the worker's last words name its class."""
    signals = classify_lines(["Epoch 3: 40%", line], PATTERNS)
    cause = log_cause(signals)
    assert cause is not None and cause.error_type == error_type
    assert not acts_while_running(signals)


# A helper program or a set-up step of the job script that failed while the script goes on: the loader's,
# bash's, the module system's and conda's words (catalogs/environment.yaml, base.yaml).
SET_UP = [
    "nvidia-smi: error while loading shared libraries: libnvidia-ml.so.1: cannot open shared object file: No such file or directory",
    "/usr/local/bin/healthcheck: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by /usr/local/bin/healthcheck)",
    "slurm_script: line 12: /proc/sys/vm/drop_caches: Permission denied",
    "slurm_script: ./prolog.sh: /opt/old/bin/python3: bad interpreter: No such file or directory",
    'Lmod has detected the following error:  The following module(s) are unknown: "cuda/12.4"',
    "EnvironmentNameNotFound: Could not find conda environment: megatron",
]


@pytest.mark.parametrize("line", SET_UP)
def test_a_failed_set_up_step_is_no_line_to_act_on(line: str) -> None:
    """The training goes on after it: no settle window, no verdict; a real cause later still wins."""
    v = view()
    v.read([line], 10.0)
    assert v.fatal_due_s() is None and v.fatal_verdict(100.0) is None
    signals = classify_lines(
        [line, iteration(3), "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"],
        PATTERNS,
    )
    cause = log_cause(signals)
    assert cause is not None and cause.error_type == "oom"
    alone = log_cause(classify_lines([line], PATTERNS))
    assert alone is not None and alone.error_type == "config_error"


def iterations_around(line: str) -> list[str]:
    return [iteration(1), iteration(2), line, iteration(3), iteration(4)]


@pytest.mark.parametrize(
    ("lines", "acts"),
    [
        # an uncaught exception's line that progress follows: withdrawn, as the monitor withdraws it
        (iterations_around("[rank0]: RuntimeError: checkpoint writer thread failed: disk busy"), False),
        # with no progress after it, the monitor acts once the settle window passes
        ([iteration(1), "[rank0]: RuntimeError: checkpoint writer thread failed: disk busy"], True),
        # a fatal line is acted on whatever follows
        (iterations_around("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        # a worker's last words are not acted on
        (iterations_around(LAST_WORDS["segfault"]), False),
        # Megatron-LLM's skipped step of a non-finite grad norm: the run goes on (a fallback)
        (iterations_around("***WARNING*** Bad grad_norm detected (grad_norm=nan)"), False),
    ],
)
def test_acts_while_running_agrees_with_the_monitor(lines: list[str], acts: bool) -> None:
    """The corpus score's reading of a healthy excerpt (core/classify/uncaught.py) is the attempt view's."""
    from oellm_autoexp.core.classify.classifier import Classifier

    classifier = Classifier(PATTERNS)
    classifier.feed(lines)
    last = classifier.last_progress.line_no if classifier.last_progress is not None else None
    assert acts_while_running(classifier.signals, last) is acts
    v = AttemptView(PATTERNS, early=EarlySettings(settle_s=5.0))
    v.mark_running(0.0)
    for i, line in enumerate(lines):
        v.read([line], 1.0 + i)
    assert (v.fatal_verdict(1000.0) is not None) is acts


# Lines about any process or node of the cluster, not necessarily the job's (session 12's review), with the
# class each gives a failed attempt that nothing else explains.
ABOUT_ANY_PROCESS = [
    (
        "[12345.6] traps: chrome[40213] trap int3 ip:7f3a1c2b4e11 sp:7ffd2b1a7c80 error:0 in libc.so.6",
        "segfault",
    ),
    (
        "[ 8123.2] node[31337]: segfault at 0 ip 00007f3a1c2b4e10 sp 00007ffd2b1a7c80 error 4 in node",
        "segfault",
    ),
    ("Illegal instruction", "segfault"),
    ("slurm_script: line 22:  4568 Trace/breakpoint trap   (core dumped) nvidia-bug-report.sh", "segfault"),
    ("gpu017 1 gpu* drained  Kill task failed", "node_failure"),
    (
        "   State=DOWN+DRAIN ThreadsPerCore=2 Reason=Not responding [slurm@2024-04-20T09:10:37]",
        "node_failure",
    ),
    (
        "srun: error: slurm_receive_msgs: [[gpu017]:6818] failed: Socket timed out on send/recv operation",
        "node_failure",
    ),
    ("wandb: ERROR Error while calling W&B API: [Errno 5] Input/output error", "filesystem"),
]


@pytest.mark.parametrize(("line", "error_type"), ABOUT_ANY_PROCESS)
def test_a_line_about_any_process_is_no_line_to_act_on(line: str, error_type: str) -> None:
    """No settle window while the run goes on; alone in a failed log, the class it names."""
    v = view()
    v.read([line], 10.0)
    assert v.fatal_due_s() is None and v.fatal_verdict(100.0) is None
    cause = log_cause(classify_lines([line], PATTERNS))
    assert cause is not None and cause.error_type == error_type


def test_a_successful_curand_status_is_no_error() -> None:
    """cuRAND's statuses are listed one by one: SUCCESS is none of them."""
    assert log_cause(classify_lines(["curand init: CURAND_STATUS_SUCCESS"], PATTERNS)) is None
