"""Launchers' and Slurm clients' one-line reports, read by their fields (core/classify/exit_reports.py)."""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.blocks import decide_worker_signal
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.exit_reports import (
    decide_launcher_exit,
    decide_negative_code,
    decide_slurm_refusal,
    decide_slurm_state,
    signal_class,
    signal_number,
)
from oellm_autoexp.core.classify.root_cause import log_cause


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[ERROR] [launch.py:320:sigkill_handler] ['python', 'train.py'] exits with return code = -9",
            "killed",
        ),
        ("] exits with return code = -11", "segfault"),
        ("] exits with return code = -15", None),  # SIGTERM: the launcher's own teardown
        ("] exits with return code = 1", "exception"),
        ("process 0 terminated with signal SIGKILL", "killed"),
        ("process 3 terminated with signal SIGBUS", "oom"),
        ("process 1 terminated with signal SIGTERM", None),
        ("process 0 terminated with exit code 1", "exception"),
        ("mpirun noticed that process rank 1 with PID 42 on node n1 exited on signal 9 (Killed).", "killed"),
        ("signal 11 (Segmentation fault).", "segfault"),  # the same line wrapped before `signal`
        (
            "prterun noticed that process rank 0 with PID xxxx on node n1 exited on signal 11 (Segmentation fault).",
            "segfault",
        ),
        ("=   EXIT CODE: 139", "segfault"),
        ("=   EXIT CODE: 137", "killed"),
        ("=   EXIT CODE: 1", "exception"),
        ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Bus error (signal 7)", "oom"),
        ("nothing a launcher printed", None),
    ],
)
def test_launcher_exit_reads_the_signal_or_code(line: str, expected: str | None) -> None:
    """A signal gives its class, a positive code an exception, a teardown signal nothing."""
    assert decide_launcher_exit(line) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("ERROR: error code -9", "killed"),
        ("worker finished with return code: -11", "segfault"),
        ("exit status=-7", "oom"),  # SIGBUS: shared memory
        ("return code: -15", None),  # SIGTERM: a teardown says nothing
        ("ERROR: exit code -1, error code -9", "killed"),  # the first code that names a class
        ("error code -110", None),  # no signal has that number: an errno (ETIMEDOUT)
        ("exitcode: -9", None),  # torchrun's own field: its patterns read it
    ],
)
def test_a_negative_return_code_is_the_signal_that_ended_the_process(line: str, expected: str | None) -> None:
    """Python's Popen.returncode: -N is "terminated by signal N"."""
    assert decide_negative_code(line) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
            "config_error",
        ),
        (
            "salloc: error: Job submit/allocate failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)",
            "config_error",
        ),
        ("sbatch: error: batch job submission failed: job violates accounting/qos policy", "config_error"),
        (
            "srun: error: Unable to create step for job xxxxx: Requested node configuration is not available",
            "config_error",
        ),
        ("srun: error: Unable to allocate resources: Socket timed out on send/recv operation", None),
        (
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            None,
        ),
        ("sbatch: Submitted batch job 42", None),
    ],
)
def test_slurm_refusal_is_config_unless_the_controller_was_not_reached(
    line: str, expected: str | None
) -> None:
    """A refusal on the request's merits is configuration; a controller that did not answer is no cause."""
    assert decide_slurm_refusal(line) == expected


def test_signal_helpers_know_names_and_numbers() -> None:
    """Signal names and numbers map to classes; unknown ones to None."""
    assert signal_number("SIGKILL") == 9
    assert signal_number("SIGNOTREAL") is None
    assert signal_class(9) == "killed"
    assert signal_class(5) == "segfault"  # SIGTRAP: a trap the process ran itself, a native crash
    assert signal_class(15) is None
    assert signal_class(999) is None


def test_a_wrapped_mpi_exit_line_is_read_from_its_second_half() -> None:
    """PRRTE's `... exited on` / `signal 9 (Killed).` split by a narrow terminal: the second line decides,
    and only right after the first (a bare `signal 9 (...)` elsewhere is nothing)."""
    patterns = load_patterns(["megatron_production"])
    head = "prterun noticed that process rank 0 with PID 3927 on node c1 exited on"
    cause = log_cause(classify_lines(["-" * 20, head, "signal 9 (Killed).", "-" * 20], patterns))
    assert cause is not None and (cause.error_type, cause.pattern) == ("killed", "mpi_exit_wrapped_signal")
    assert log_cause(classify_lines(["signal 9 (Killed).", head], patterns)) is None


@pytest.mark.parametrize(
    ("decider", "line", "expected"),
    [
        (decide_slurm_state, "123.0  python  gpu  acct  8 OUT_OF_ME+    0:125", "oom"),
        (decide_slurm_state, "   JobState=NODE_FAIL Reason=NodeDown Dependency=(null)", "node_failure"),
        (
            decide_slurm_state,
            "123  train  gpu  acct  8  FAILED  1:0",
            None,
        ),  # a state the table does not list
        (decide_slurm_state, "no state on this line", None),
        (
            decide_worker_signal,
            "DataLoader worker (pid 7) is killed by signal: Bus error. It is possible",
            "oom",
        ),
        (
            decide_worker_signal,
            "DataLoader worker (pid 7) is killed by signal: Segmentation fault. ",
            "segfault",
        ),
        (decide_worker_signal, "DataLoader worker (pid 7) is killed by signal: Hangup. ", None),  # not listed
        (decide_worker_signal, "DataLoader worker (pid 7) exited unexpectedly", None),
    ],
)
def test_a_field_deciders_class_is_its_value_s_row_and_none_off_the_table(
    decider, line: str, expected
) -> None:
    """Slurm's job state and a DataLoader worker's signal are one field looked up in a table of its values
    (exit_reports.class_of_field): a value the table lists gives its class, any other value or none gives None."""
    assert decider(line) == expected
