"""The signal library and root-cause selection, on literal log lines. No I/O but the shipped YAML."""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns, pattern_set_from_mapping
from oellm_autoexp.core.classify.classifier import Classifier, classify_line, classify_lines
from oellm_autoexp.core.classify.root_cause import root_cause
from oellm_autoexp.core.classify.signals import (
    PatternSet,
    Signal,
    SignalPattern,
    required_literals,
)
from oellm_autoexp.errors import UserError

PATTERNS = load_patterns(["megatron_production"])
DDP = load_patterns(["torch_ddp"])


def _types(line: str, patterns: PatternSet = PATTERNS) -> set[str | None]:
    return {
        s.error_type
        for s in classify_line(line, patterns)
        if s.role in ("root", "cascade") and not s.teardown
    }


# (line, error_type) — every generation of every message the library promises.
MATCHES = [
    # CUDA OOM, three generations (the 1.13-2.4 typo "capacty" is real)
    (
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; 74.01 GiB already allocated; 1.06 GiB free; 76.32 GiB reserved in total by PyTorch)",
        "oom",
    ),
    (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 1 has a total capacty of 79.15 GiB of which 1.08 GiB is free.",
        "oom",
    ),
    (
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 1 has a total capacity of 139.72 GiB of which 2.19 GiB is free.",
        "oom",
    ),
    ("RuntimeError: CUDA error: out of memory", "oom"),
    (
        "[rank1]: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)",
        "oom",
    ),
    (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes.",
        "oom",
    ),
    (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=123.0. Some of the step tasks have been OOM Killed.",
        "oom",
    ),
    (
        "slurmstepd: error: Detected 2 oom-kill event(s) in step 123.batch cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.",
        "oom",
    ),
    ("srun: error: node7: task 3: Out Of Memory", "oom"),
    ("MemoryError", "oom"),
    # NCCL
    (
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.21.5",
        "nccl",
    ),
    (
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "nccl",
    ),
    (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
        "nccl",
    ),
    (
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        "nccl",
    ),
    ("ncclInternalError: Internal check failed.", "nccl"),
    (
        "node3:1234:5678 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<40643> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        "nccl",
    ),
    (
        "[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:5258.",
        "nccl",
    ),
    # collective timeouts
    (
        "[rank0]:[E1114 10:23:41.771032113 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=92114, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
        "nccl_timeout",
    ),
    (
        "[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to complete",
        "nccl_timeout",
    ),
    # hangs
    (
        "[rank0]:[E1114 12:00:01.0 ProcessGroupNCCL.cpp:1484] [PG ID 0 PG GUID 0(default_pg) Rank 0] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=1",
        "hang",
    ),
    (
        "[PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.",
        "hang",
    ),
    # CUDA errors and hardware (a device-side assert aborts its process: a CUDA error, issue #26)
    ("RuntimeError: CUDA error: device-side assert triggered", "cuda_error"),
    ("[rank6]: RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
    ("RuntimeError: CUDA error: unspecified launch failure", "cuda_error"),
    (
        "Mar 14 10:41:07 gpu-node-009 kernel: NVRM: Xid (PCI:0000:ca:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "gpu_hardware",
    ),
    (
        "[ 8823.119403] NVRM: Xid (PCI:0000:3b:00): 48, pid=17731, name=python, An uncorrectable double bit error (DBE) has been detected on GPU",
        "gpu_hardware",
    ),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu_hardware"),
    # Slurm
    (
        "slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***",
        "time_limit",
    ),
    (
        "slurmstepd-node1: error: *** STEP 17.0 ON node1 CANCELLED AT 2026-11-22T04:09:42 DUE TO TIME LIMIT ***",
        "time_limit",
    ),
    (
        "slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO PREEMPTION ***",
        "preempted",
    ),
    (
        "slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
        "node_failure",
    ),
    (
        "slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO JOB REQUEUE ***",
        "requeue",
    ),
    ("slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-01-01T00:00:00 ***", "cancelled"),
    # crashes and kills
    ("Fatal Python error: Segmentation fault", "segfault"),
    (
        "/var/spool/slurmd/job1/slurm_script: line 4: 12345 Segmentation fault      (core dumped) python train.py",
        "segfault",
    ),
    ("srun: error: node1: task 1: Killed", "killed"),
    (
        "E1122 04:05:40.596000 8786 api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 8805) of binary: /usr/bin/python3",
        "killed",
    ),
    ("/var/spool/slurmd/job1/slurm_script: line 12:  4567 Killed                  python train.py", "killed"),
    # rendezvous
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "rendezvous"),
    (
        "[rank3]: torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 3/4 clients joined.",
        "rendezvous",
    ),
    (
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to (node1, 29500).",
        "rendezvous",
    ),
    # numerics
    (
        " [2026-01-01 00:00:00] iteration        6/      12 | lm loss: NAN | loss scale: 1.0 |",
        "numerical_instability",
    ),
    (" iteration      100/  500000 | lm loss: INF | loss scale: 1.0 |", "numerical_instability"),
    (
        "[rank0]: RuntimeError: Rank 0: found NaN in local grad norm in backward pass before data-parallel communication collective.",
        "numerical_instability",
    ),
    ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.3}", "numerical_instability"),
    # Python exceptions
    ("[rank1]: ValueError: shard index 6000 out of range for dataset with 5000 samples", "exception"),
    ("KeyError: 'decoder.layers.0.self_attention.linear_qkv.weight'", "exception"),
    ("0: AssertionError: micro batch size must divide global batch size", "exception"),
]


@pytest.mark.parametrize(("line", "error_type"), MATCHES)
def test_library_recognises_each_message(line: str, error_type: str) -> None:
    """Every message generation the library promises classifies to its error type."""
    assert error_type in _types(line)


# Healthy lines that must give no cause (progress lines may still match as progress).
HEALTHY = [
    " [2026-01-01 00:00:00] iteration      100/  500000 | consumed samples:       102400 | elapsed time per iteration (ms): 1234.5 | learning rate: 3.000000E-04 | global batch size:  1024 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "  validation loss at iteration 1000 | lm loss value: 2.301234E+00 | lm loss PPL: 9.987654E+00 |",
    "    --nccl-timeout 600 --distributed-timeout-minutes 10 --use-distributed-optimizer",
    "  loss_scale ............................................ None",
    "  nan_check_interval .................................... 100",
    "  check_for_nan_in_loss_and_grad ........................ True",
    "INFO: resolving nanoGPT config; finance dataset; banana",
    "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>",
    "NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7",
    "socket connection established; no error",
    "warning: connection failed once, retrying (1/5)",
    "saving checkpoint at iteration     100 to /ckpt in torch_dist format",
    "  successfully saved checkpoint from iteration     100 to /ckpt [ t 1/2, p 1/1 ]",
    "Traceback (most recent call last):",
    "UserWarning: TypedStorage is deprecated.",
    "> building train, validation, and test datasets for GPT ...",
    "srun: job 4412871 has been allocated resources",
    "W1122 04:05:07.577000 7203 api.py:1028] Sending process 7226 closing signal SIGTERM",
    "[rank0]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "[rank0]:[W1114 10:23:44.0 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources.",
    "slurmstepd-node1: error: *** STEP 1.0 ON node1 CANCELLED AT 2026-11-22T04:07:04 ***",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "  grad norm: inf | number of skipped iterations:   1 |",
]


@pytest.mark.parametrize("line", HEALTHY)
def test_healthy_and_teardown_lines_give_no_cause(line: str) -> None:
    """Healthy output, arguments that merely mention NCCL/NaN, and teardown noise are never a cause."""
    signals = classify_line(line, PATTERNS)
    assert [s for s in signals if s.is_cause_candidate] == []


@pytest.mark.parametrize(
    ("line", "pattern", "groups"),
    [
        (
            " iteration      100/  500000 | consumed samples: 1 | lm loss: 2.345678E+00 | loss scale: 1.0 |",
            "megatron_iteration",
            {"iteration": "100", "train_iters": "500000", "lm_loss": "2.345678E+00"},
        ),
        (
            "saving checkpoint at iteration     200 to /ckpt in torch_dist format",
            "megatron_checkpoint_save_start",
            {"iteration": "200"},
        ),
        (
            "  successfully saved checkpoint from iteration     200 to /ckpt [ t 1/2, p 1/1 ]",
            "megatron_checkpoint_saved",
            {"iteration": "200"},
        ),
        (
            "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 3 has a total capacity of 139.72 GiB",
            "cuda_oom",
            {"size": "4.00 GiB", "gpu": "3"},
        ),
        (
            "[rank2]:[E1114 03:12:09.5 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1190233, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
            "nccl_watchdog_timeout",
            {"rank": "2", "seq": "1190233", "op": "ALLREDUCE", "ran_ms": "600017"},
        ),
        (
            "Mar 14 10:41:07 gpu-node-009 kernel: NVRM: Xid (PCI:0000:ca:00): 79, pid=1, name=python, GPU has fallen off the bus.",
            "xid",
            {"node": "gpu-node-009", "pci": "PCI:0000:ca:00", "xid": "79"},
        ),
        (
            "slurmstepd: error: *** JOB 77 ON gpu-node-011 CANCELLED AT 2025-03-14T09:30:01 DUE TO TIME LIMIT ***",
            "slurm_time_limit",
            {"job": "77", "node": "gpu-node-011", "time": "2025-03-14T09:30:01"},
        ),
    ],
)
def test_named_groups_are_extracted(line: str, pattern: str, groups: dict[str, str]) -> None:
    """Named groups (iteration, size, gpu, node, xid, ...) come back as strings on the signal."""
    (signal,) = [s for s in classify_line(line, PATTERNS) if s.pattern == pattern]
    assert dict(signal.groups) == groups


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("[rank3]: ValueError: x", 3),
        ("[default5]:ValueError: x", 5),
        ("2: ValueError: x", 2),
        ("ValueError: x", None),
    ],
)
def test_rank_comes_from_the_launcher_prefix(line: str, rank: int | None) -> None:
    """torchrun's `[rankN]:`, `--tee`'s `[defaultN]:` and srun --label's `N: ` prefixes name the rank."""
    (signal,) = classify_line(line, PATTERNS)
    assert signal.rank == rank


def test_specific_pattern_suppresses_generic_exception_on_same_line() -> None:
    """A line a specific pattern explains is not also reported as a generic Python exception."""
    line = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 1"
    assert [s.pattern for s in classify_line(line, PATTERNS)] == ["cuda_oom"]


def test_a_cancel_during_step_launch_is_the_cancel_not_a_node_failure() -> None:
    """scancel while srun launches the step: srun says the launch failed on the node because the job's
    credential was revoked. That is the cancel's teardown (the end is `cancelled`), never a dead node
    (seen on the localhost cluster: the job was restarted as `node_failure` and its node blamed).
    A credential that EXPIRED (a rebooted node) stays a node failure."""
    log = [
        "slurmstepd-node1: error: *** JOB 2276 ON node1 CANCELLED AT 2026-11-23T18:25:09 ***",
        "srun: forcing job termination",
        "srun: error: Task launch for StepId=2276.0 failed on node node1: Job credential revoked",
        "srun: error: Application launch failed: Job credential revoked",
        "srun: Job step aborted",
    ]
    cause = root_cause(classify_lines(log, PATTERNS))
    assert cause is not None and (cause.pattern, cause.error_type) == ("slurm_cancelled", "cancelled")
    assert [s.teardown for s in classify_lines(log[2:4], PATTERNS)] == [True, True]
    expired = classify_line(
        "srun: error: Task launch for 36.0 failed on node cn131: Job credential expired", PATTERNS
    )
    # base.yaml's node_lost_elsewhere and the slurm catalog's entry both read it (issue #26)
    assert {(s.error_type, s.groups.get("node")) for s in expired} == {("node_failure", "cn131")}


def _sig(
    name: str,
    role: str,
    line_no: int,
    *,
    error_type: str | None = "x",
    priority: int = 0,
    rank: int | None = None,
    teardown: bool = False,
    groups: dict[str, str] | None = None,
) -> Signal:
    return Signal(
        pattern=name,
        error_type=error_type,
        subsystem="s",
        role=role,
        line=name,
        line_no=line_no,
        groups=groups or {},
        priority=priority,
        teardown=teardown,
        rank=rank,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        ([_sig("cascade_first", "cascade", 1), _sig("root_later", "root", 9)], "root_later"),
        ([_sig("low", "root", 1), _sig("high", "root", 9, priority=20)], "high"),
        ([_sig("early", "root", 1), _sig("late", "root", 9)], "early"),
        ([_sig("teardown", "cascade", 1, teardown=True), _sig("casc", "cascade", 5)], "casc"),
        ([_sig("progress", "progress", 1, error_type=None), _sig("info", "info", 2, error_type=None)], None),
        ([_sig("teardown", "cascade", 1, teardown=True)], None),
        (
            [
                _sig("rank0", "root", 1, rank=0),
                _sig("rank1", "root", 5, rank=1),
                _sig("summary", "info", 9, error_type=None, groups={"failed_rank": "1"}),
            ],
            "rank1",
        ),
    ],
)
def test_root_cause_ordering(signals: list[Signal], expected: str | None) -> None:
    """Roots beat cascades, then priority, then torchrun's first failed rank, then the earliest line; teardown, progress and info never win."""
    cause = root_cause(signals)
    assert (cause.pattern if cause else None) == expected


def test_oom_then_peer_timeouts_and_teardown_reports_the_oom() -> None:
    """One rank's OOM followed by the others' watchdog timeouts and torchrun's teardown is an OOM."""
    lines = [
        " iteration     1204/  500000 | lm loss: 2.9E+00 |",
        "[rank3]: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 79.15 GiB total capacity; 74.01 GiB already allocated)",
        "[rank0]:[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48213, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
        "[rank0]: torch.distributed.DistBackendError: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48213, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
        "W1122 04:05:07.577000 7203 api.py:1028] Sending process 7226 closing signal SIGTERM",
        "[rank0]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    ]
    cause = root_cause(classify_lines(lines, PATTERNS))
    assert cause is not None and (cause.error_type, cause.rank, cause.line_no) == ("oom", 3, 2)


def test_watchdog_timeout_alone_is_the_cause() -> None:
    """With no root at all (a true hang), the collective timeout cascade is reported."""
    line = "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=30000) ran for 30012 milliseconds before timing out."
    cause = root_cause(classify_lines([line], PATTERNS))
    assert cause is not None and cause.error_type == "nccl_timeout"


def test_after_pattern_needs_its_header_within_range() -> None:
    """torchrun's `rank : N` line counts as the first failed rank only just below `Root Cause (first observed failure):`."""
    block = [
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026",
        "  host      : node1",
        "  rank      : 1 (local_rank: 1)",
    ]
    assert any(s.groups.get("failed_rank") == "1" for s in classify_lines(block, PATTERNS))
    assert not any("failed_rank" in s.groups for s in classify_lines(block[1:], PATTERNS))
    assert classify_line(block[-1], PATTERNS) == []


def test_classifier_is_incremental_over_partial_chunks() -> None:
    """Feeding text in arbitrary chunks gives the same signals and line numbers as one block, and tracks the last iteration."""
    text = "".join(f" iteration {i:8d}/     100 | lm loss: 2.0E+00 |\n" for i in range(1, 6))
    text += "[rank1]: ValueError: bad shard\n saving checkpoint at iteration 5"
    classifier = Classifier(PATTERNS)
    for start in range(0, len(text), 7):
        classifier.feed_text(text[start : start + 7])
    classifier.flush()
    whole = classify_lines(text.split("\n"), PATTERNS)
    assert classifier.lines_seen == 7
    assert classifier.progress_count == 6 and classifier.last_iteration == 5
    assert (
        [s.line_no for s in classifier.signals] == [s.line_no for s in whole if s.role != "progress"] == [6]
    )
    cause = classifier.root_cause()
    assert cause is not None and cause.error_type == "exception"


def test_classifier_caps_kept_signals() -> None:
    """A storm of cascades is kept up to max_signals; the rest are counted, not stored."""
    classifier = Classifier(PATTERNS, max_signals=3)
    classifier.feed(["ncclRemoteError: peer gone"] * 10)
    assert len(classifier.signals) == 3 and classifier.dropped_signals == 7


@pytest.mark.parametrize(
    ("line", "iteration"),
    [
        ("step 120", "120"),
        ("Step 7/1000 loss=2.0", "7"),
        ("global_step=99 lr=1e-4", "99"),
        ("epoch 1 step: 12", "12"),
    ],
)
def test_generic_step_progress_in_torch_ddp_set(line: str, iteration: str) -> None:
    """torch_ddp.yaml adds a generic step counter as progress."""
    (signal,) = [s for s in classify_line(line, DDP) if s.role == "progress"]
    assert signal.groups["iteration"] == iteration


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: Detected 1 oom_kill event in StepId=5.0.",
        "StepId=5.0 finished",
        "stepping through 5 items",
    ],
)
def test_generic_step_ignores_slurm_step_ids(line: str) -> None:
    """`slurmstepd`, `StepId=` and `stepping` are not a step counter."""
    assert [s for s in classify_line(line, DDP) if s.role == "progress"] == []


@pytest.mark.parametrize(
    ("regex", "literals"),
    [
        (r"CUDA out of memory\. Tried (?P<x>\d+)", ["CUDA out of memory. Tried "]),
        (r"foo|barbaz", ["foo", "barbaz"]),
        (r"(?:ab|c)d", []),
        (r"x+yz?", []),
        (r"pre (?:alpha|beta)+ suffix_long_literal", [" suffix_long_literal"]),
    ],
)
def test_required_literals(regex: str, literals: list[str]) -> None:
    """The prefilter literal is something every match must contain (or nothing, meaning: always try)."""
    assert required_literals(regex) == literals


def test_prefilter_never_hides_a_match() -> None:
    """A line that contains two overlapping keywords still reaches both patterns."""
    patterns = PatternSet(
        patterns=[
            SignalPattern(name="a", regex="failed \\(exitcode: -?\\d+", error_type="a"),
            SignalPattern(name="b", regex="exitcode: -9\\)", error_type="b"),
        ]
    )
    line = "failed (exitcode: -9) local_rank: 1"
    assert {s.pattern for s in classify_line(line, patterns)} == {"a", "b"}
    assert {s.pattern for s in classify_lines([line], patterns)} == {"a", "b"}


def test_user_patterns_extend_include_and_disable() -> None:
    """A user mapping includes the shipped base, adds a pattern, replaces one by name and disables another."""
    ps = pattern_set_from_mapping(
        {
            "include": ["base"],
            "disable": ["python_exception"],
            "patterns": [
                {
                    "name": "loader_crash",
                    "regex": r"DataLoader worker \(pid (?P<pid>\d+)\) is killed",
                    "error_type": "killed",
                    "subsystem": "dataloader",
                },
                {"name": "segfault", "regex": "SEGV!", "error_type": "segfault", "priority": 99},
            ],
        },
        "user.yaml",
    )
    assert ps.get("python_exception") is None and ps.get("cuda_oom") is not None
    assert _types("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.", ps) == {"killed"}
    assert ps.get("segfault") is not None and ps.names().index("segfault") < ps.names().index("loader_crash")
    assert _types("ValueError: x", ps) == set()


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            {"name": "bad", "regex": "(unclosed"},
            "patterns[0] (name 'bad') key 'regex': invalid regular expression",
        ),
        ({"name": "g", "regex": "(?P<a>x)", "groups": ["b"]}, "patterns[0] (name 'g') key 'groups'"),
        ({"name": "r", "regex": "x", "role": "primary"}, "patterns[0] (name 'r') key 'role'"),
        ({"name": "t", "regex": "x", "typo_key": 1}, "patterns[0] (name 't') key 'typo_key'"),
        ({"name": "n", "regex": "x", "blames_node": "gpu"}, "patterns[0] (name 'n') key 'blames_node'"),
        # `host`: the node comes from a named group, and this regex has none
        (
            {"name": "h", "regex": "(?P<id>x)", "blames_node": "host"},
            "patterns[0] (name 'h') key 'blames_node'",
        ),
    ],
)
def test_bad_user_pattern_is_a_user_error_naming_file_pattern_and_key(
    entry: dict[str, object], expected: str
) -> None:
    """An invalid regex, unknown group, bad role or unknown key names the file, the pattern and the key."""
    with pytest.raises(UserError) as info:
        pattern_set_from_mapping({"patterns": [entry]}, "mine.yaml")
    assert str(info.value).startswith("mine.yaml: " + expected)


def test_missing_include_is_a_user_error() -> None:
    """An include that names no pattern file says so and lists the known ones."""
    with pytest.raises(
        UserError, match=r"mine.yaml: include: nope: pattern file not found \(known pattern sets: .*base"
    ):
        pattern_set_from_mapping({"include": ["nope"]}, "mine.yaml")


def test_past_the_cap_each_rank_s_first_watchdog_line_is_kept() -> None:
    """A 16k-rank hang passes the cap; one watchdog line per rank is still kept for straggler blame."""
    classifier = Classifier(load_patterns(), max_signals=3)
    lines = [
        f"[rank{r}]:[E ProcessGroupNCCL.cpp:574] [Rank {r}] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600029 milliseconds"
        for r in (0, 1, 2, 3, 4, 4, 5)
    ]
    classifier.feed([*lines, "ncclRemoteError: peer gone"])
    kept = [s.rank for s in classifier.signals if s.pattern == "nccl_watchdog_timeout"]
    assert kept == [0, 1, 2, 3, 4, 5]  # the repeat of rank 4 and the remote error are dropped
    assert classifier.dropped_signals == 2
