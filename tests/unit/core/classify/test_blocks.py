"""Structured failure reports parsed into fields, and the class the fields give (core/classify/blocks.py)."""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.blocks import (
    ElasticFailure,
    decide_xid_code,
    elastic_cause,
    elastic_root,
    expand_tasks,
    parse_elastic_failures,
    parse_srun_task_end,
    parse_stepd_cancel,
    parse_xid,
    srun_task_cause,
    stepd_cause,
    xid_cause,
    xid_root_code,
)
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import log_cause

# torchrun's block as torch 2.x prints it (tests/corpus/elastic.yaml: lzhxmu/CPPO#6), one other failure added.
BLOCK = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-05-21_15:43:03
  host      : worker-1
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 14751)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 14751
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-05-21_15:43:03
  host      : worker-0
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 14750)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 14750
============================================================""".splitlines()


def test_the_elastic_block_is_read_field_by_field() -> None:
    """Each `[N]:` entry becomes its rank, exit code, pid and signal; the root is marked."""
    assert parse_elastic_failures(BLOCK) == [
        ElasticFailure(rank=1, local_rank=1, exitcode=-15, pid=14751, signal=15, root=False),
        ElasticFailure(rank=0, local_rank=0, exitcode=-9, pid=14750, signal=9, root=True),
    ]
    root = elastic_root(BLOCK)
    assert root is not None and (root.rank, elastic_cause(root)) == (0, "killed")


@pytest.mark.parametrize(
    ("exitcode", "signal_number", "expected"),
    [
        (-9, 9, "killed"),  # SIGKILL: the OOM killer or the scheduler
        (-11, 11, "segfault"),
        (-11, None, "segfault"),  # no traceback line: the exit code alone decides
        (-7, 7, "oom"),  # SIGBUS: shared memory
        (-15, 15, None),  # SIGTERM: the launcher's own teardown
        (-6, None, None),  # SIGABRT: an abort after an error printed elsewhere
        (1, None, "exception"),  # the worker raised: the exception above is the cause
        (0, None, None),
        (None, None, None),
    ],
)
def test_an_elastic_failure_class_comes_from_its_fields(
    exitcode: int | None, signal_number: int | None, expected: str | None
) -> None:
    """The exit code and the traceback's signal decide, not the block's first line."""
    assert elastic_cause(ElasticFailure(exitcode=exitcode, signal=signal_number)) == expected


XID_TABLE = {13: "cuda_error", 45: None, 79: "gpu_hardware", 149: "gpu_hardware"}


@pytest.mark.parametrize(
    ("line", "code", "root_code", "process", "expected"),
    [
        ("[ 8823.1] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
         79, 79, "<unknown>", "gpu_hardware"),
        ("kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
         45, 149, "python3", "gpu_hardware"),  # the earlier Xid is the root
        ("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001",
         45, 45, "python3", None),  # a teardown on its own
        ("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception",
         13, 13, "<unknown>", "cuda_error"),
        ("NVRM: Xid (PCI:0000:01:00): 62, 323f0f30 0000c3d8 00000000 206dae68", 62, 62, None, None),  # not in this table
    ],
)  # fmt: skip
def test_an_xid_line_is_read_and_its_root_code_decides(
    line: str, code: int, root_code: int, process: str | None, expected: str | None
) -> None:
    """The code, the process and `caused by previous Xid N`; the class is the root code's."""
    event = parse_xid(line)
    assert event is not None
    assert (event.code, event.root_code, event.process) == (code, root_code, process)
    assert xid_cause(event, XID_TABLE) == expected


def test_a_line_without_an_xid_is_none() -> None:
    assert parse_xid("NVRM: GPU 0000:01:00.0: RmInitAdapter failed!") is None


@pytest.mark.parametrize(
    ("line", "entity", "node", "reason", "ends_job", "expected"),
    [
        ("slurmstepd: error: *** JOB 494583 ON gpu017 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
         "JOB", "gpu017", "TIME LIMIT", True, "time_limit"),
        ("slurmstepd: error: *** STEP 32233190.0 ON nid01934 CANCELLED AT 2020-07-03T02:59:56 DUE TO TIME LIMIT ***",
         "STEP", "nid01934", "TIME LIMIT", False, "time_limit"),
        ("slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
         "JOB", "n1", "NODE FAILURE", True, "node_failure"),
        ("slurmstepd: error: *** JOB 1 CANCELLED AT 2016-01-01T00:00:00 DUE TO NODE n7 FAILURE ***",
         "JOB", None, "NODE FAILURE", True, "node_failure"),  # Slurm < 17 names the node inside
        ("slurmstepd: error: *** JOB 3 ON c1 CANCELLED AT 2025-02-13T15:47:35 ***",
         "JOB", "c1", None, True, "cancelled"),  # scancel: the job is over
        ("slurmstepd: error: *** STEP 3.0 ON c1 CANCELLED AT 2025-02-13T15:47:35 ***",
         "STEP", "c1", None, False, None),  # srun's step only: the cause is elsewhere, the job may live on
        ("slurmstepd: error: *** STEP 5.0 ON c1 CANCELLED AT 2025-02-13T15:47:35 DUE to SIGNAL Terminated ***",
         "STEP", "c1", "SIGNAL Terminated", False, "cancelled"),
        ("slurmstepd: error: *** STEP 5.0 ON c1 CANCELLED AT 2025-02-13T15:47:35 DUE TO TASK FAILURE ***",
         "STEP", "c1", "TASK FAILURE", False, None),  # --kill-on-bad-exit: a task's own line is the cause
        ("slurmstepd: error: *** JOB 9 ON c1 CANCELLED AT 2025-02-13T15:47:35 DUE TO PREEMPTION ***",
         "JOB", "c1", "PREEMPTION", True, "preempted"),
        ("slurmstepd: *** JOB 830329 CANCELLED AT 2018-08-06T17:21:44 DUE TO TIME LIMIT on n447 ***",
         "JOB", "n447", "TIME LIMIT", True, "time_limit"),  # an older layout, the node after the reason
    ],
)  # fmt: skip
def test_a_slurmstepd_cancel_is_read_and_its_reason_decides(
    line: str, entity: str, node: str | None, reason: str | None, ends_job: bool, expected: str | None
) -> None:
    """Who was cancelled (job or step), where, why, and what class that is."""
    cancel = parse_stepd_cancel(line)
    assert cancel is not None
    assert (cancel.entity, cancel.node, cancel.reason, cancel.ends_job) == (entity, node, reason, ends_job)
    assert stepd_cause(cancel) == expected


@pytest.mark.parametrize(
    ("line", "node", "tasks", "how", "core", "expected"),
    [
        ("srun: error: c002: task 0: Killed", "c002", (0,), "Killed", False, "killed"),
        ("srun: error: gpu017: tasks 0-3: Out Of Memory", "gpu017", (0, 1, 2, 3), "Out Of Memory", False, "oom"),
        ("srun: error: cn125: task 0: Segmentation fault (core dumped)", "cn125", (0,), "Segmentation fault", True,
         "segfault"),
        ("srun: error: nid01934: tasks 2,4-5,7: Terminated", "nid01934", (2, 4, 5, 7), "Terminated", False, None),
        ("srun: error: n1: task 3: Exited with exit code 1", "n1", (3,), "Exited with exit code 1", False, None),
        ("srun: error: n1: task 1: Bus error", "n1", (1,), "Bus error", False, "oom"),
    ],
)  # fmt: skip
def test_an_srun_task_end_is_read_and_how_it_ended_decides(
    line: str, node: str, tasks: tuple[int, ...], how: str, core: bool, expected: str | None
) -> None:
    """The node, the task ids, strsignal's text or the exit code; the class is the signal's."""
    end = parse_srun_task_end(line)
    assert end is not None
    assert (end.node, end.tasks, end.how, end.core_dumped) == (node, tasks, how, core)
    assert srun_task_cause(end) == expected


def test_slurm_task_lists_expand() -> None:
    assert expand_tasks("0-2,5") == (0, 1, 2, 5)
    assert expand_tasks("[3-4]") == (3, 4)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("srun: error: n1: task 2: Illegal instruction (core dumped)", "segfault"),  # no pattern names it
        ("srun: error: n1: tasks 0-3: Trace/breakpoint trap (core dumped)", "segfault"),  # strsignal(SIGTRAP)
        ("srun: error: n1: tasks 0-3: Terminated", None),  # srun's teardown
        ("  exitcode  : -4 (pid: 5)", "segfault"),  # SIGILL, by its number alone
        ("  traceback : Signal 7 (SIGBUS) received by PID 5", "oom"),
        ("  exitcode  : -15 (pid: 5)", None),  # SIGTERM: torchrun's own
        # a bare STEP cancel is no cause by its fields; alone in a log it is the step cancelled from outside
        # (root_cause.outside_cancel; with a failed task in view it stays srun's teardown: test_fitted_review)
        ("slurmstepd: error: *** STEP 3.0 ON c1 CANCELLED AT 2025-02-13T15:47:35 ***", "cancelled"),
        (
            "slurmstepd: error: *** JOB 3 ON c1 CANCELLED AT 2025-02-13T15:47:35 DUE TO PREEMPTION ***",
            "preempted",
        ),
    ],
)
def test_the_shipped_patterns_let_the_fields_decide(line: str, expected: str | None) -> None:
    """A `decide:` pattern's class is what the parsed fields give (none: the line is info)."""
    cause = log_cause(classify_lines([line], load_patterns(["megatron_production"])))
    assert (cause.error_type if cause is not None else None) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # the elastic agent's one-line report: the exit code decides (api.py)
        ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 9) of binary: x", "killed"),
        ("torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -11) local_rank: 0 (pid: 9) of binary:", "segfault"),
        ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 9) of binary: x", "exception"),
        # a DataLoader worker's strsignal() (torch/csrc/DataLoader.cpp)
        ("RuntimeError: DataLoader worker (pid 7) is killed by signal: Floating point exception.", "segfault"),
        ("RuntimeError: DataLoader worker (pid 7) is killed by signal: Bus error. It is possible that dataloader's", "oom"),
        ("RuntimeError: DataLoader worker (pid 7) is killed by signal: Interrupt.", None),  # Ctrl-C: teardown
        # fairseq's scaler: a scale whose next halving reaches --min-loss-scale (1e-4) is the last before it
        # raises (below the floor: a lowered floor, already collapsed); two halvings away, a routine skip
        ("| WARNING: overflow detected, setting loss scale to: 6.103515625e-05", "numerical_instability"),
        ("2021-05-02 08:15:30 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: 0.0001220703125", "numerical_instability"),
        ("2021-05-02 08:15:30 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: 0.000244140625", None),
        ("2020-03-23 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: 0.5", None),
        (" WARNING: Overflow detected, setting loss scale to 16384.0", None),
        # apex's scalers have no minimum: the same threshold reads their `reducing loss scale to X`
        ("Gradient overflow.  Skipping step, reducing loss scale to 3.0517578125e-05", "numerical_instability"),
        ("Gradient overflow.  Skipping step, reducing loss scale to 1024.0", None),
        ("OVERFLOW within closure! Skipping step, reducing loss scale to 6.103515625e-05", "numerical_instability"),
    ],
)  # fmt: skip
def test_the_widened_catalogs_let_the_fields_decide(line: str, expected: str | None) -> None:
    """Exit codes, signal names and loss-scale values decide (issue #26's catalogs from the emitters)."""
    cause = log_cause(classify_lines([line], load_patterns(["megatron_production"])))
    assert (cause.error_type if cause is not None else None) == expected


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("May 10 22:25:01 gpu7 kernel: [176830.774761] NVRM: Xid (0000:03:00): 13, 0003 00000000", 13),  # no `PCI:`
        ("[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained", 94),
        ("NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000001 caused by previous Xid 149", 149),
        ("ErrorCode:DCGM_FR_XID_ERROR GPU:4 Detected XID 31 for GPU 4 Please consult the documentation", 31),
        ("XidCriticalError: Xid=48 on Device=GPU-d23d91a3; marking device as unhealthy.", 48),
        ("NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:894)", None),
    ],
)  # fmt: skip
def test_the_xid_code_is_read_in_every_form_it_is_printed(line: str, code: int | None) -> None:
    """The driver's line (old and new bus-id forms), a later Xid's cause, DCGM's and the device plugin's reports."""
    assert xid_root_code(line) == code


def test_an_xid_code_takes_its_row_and_an_unlisted_one_is_the_gpus() -> None:
    """decide_xid_code: the row's class and role; a code without a row is gpu_hardware; no code is info."""
    codes = {13: ("cuda_error", "root"), 63: (None, "info")}
    assert decide_xid_code("NVRM: Xid (PCI:0000:01:00): 13, pid=1", codes) == ("cuda_error", "root")
    assert decide_xid_code("NVRM: Xid (PCI:0000:01:00): 63, pid=1", codes) == (None, "info")
    assert decide_xid_code("NVRM: Xid (PCI:0000:01:00): 57, pid=1", codes) == ("gpu_hardware", "root")
    assert decide_xid_code("no xid here", codes) == (None, "info")
