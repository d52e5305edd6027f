"""Launcher/rank prefixes, the launcher's own SIGKILL of a stuck rank, and config errors that stop.

Lines are quoted from the public threads named beside them (also in tests/corpus/).
"""

from __future__ import annotations

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.prefixes import nccl_host, strip_prefix
from oellm_autoexp.core.classify.root_cause import root_cause
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, decide, load_policy
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import Outcome
from tests.paths import REPO

PATTERNS = load_patterns(["megatron_production"])
RESTART = REPO / "config" / "restart"


@pytest.mark.parametrize(
    ("line", "bare", "rank"),
    [
        ("[rank4]: AssertionError: 2 is not divisible by 4", "AssertionError: 2 is not divisible by 4", 4),
        ("[default3]:RuntimeError: boom", "RuntimeError: boom", 3),
        (
            "0: ModuleNotFoundError: No module named 'torch'",
            "ModuleNotFoundError: No module named 'torch'",
            0,
        ),
        ("[1,19]<stderr>:Traceback (most recent call last):", "Traceback (most recent call last):", 19),
        (
            "[2023-07-10 04:26:35,999] [ERROR] [launch.py:324:sigkill_handler] ['python'] exits with return code = -11",
            "['python'] exits with return code = -11",
            None,
        ),
        ('(RayTrainWorker pid=2809)   File "run.py", line 728', 'File "run.py", line 728', None),
        ("(pid=19780, ip=10.0.0.1) NaN detected", "NaN detected", None),
        # a time stamp a logger, a CI runner, syslog or dmesg put before the line goes too; a log level stays
        (" [2026-11-22 04:00:01] iteration        5/  500000 |", "iteration        5/  500000 |", None),
        ("2023-11-20T16:03:25.1234567Z RuntimeError: boom", "RuntimeError: boom", None),
        ("Nov 20 16:03:25 RuntimeError: boom", "RuntimeError: boom", None),
        (
            "2019-02-21 16:43:26.973428: E tensorflow/core/x.cc:1] boom",
            "E tensorflow/core/x.cc:1] boom",
            None,
        ),
        (
            "[  402.306487] amdgpu 0000:2f:00.0: amdgpu: page fault",
            "amdgpu 0000:2f:00.0: amdgpu: page fault",
            None,
        ),
        ("[Wed Jan 27 23:04:35 2021] NVRM: Xid (PCI:0000:3b:00): 79", "NVRM: Xid (PCI:0000:3b:00): 79", None),
        ("[2024-08-20 01:49:18,235] WARNING boom", "WARNING boom", None),
        ("[rank2]: 2024-01-01 10:00:00 FileNotFoundError: x", "FileNotFoundError: x", 2),
        ("05:54:36 Sending processes 15", "05:54:36 Sending processes 15", None),
        ("gpu004: RuntimeError: [14] is setting up", "RuntimeError: [14] is setting up", None),
        (
            "srun: error: nid04277: task 1: Segmentation fault",
            "srun: error: nid04277: task 1: Segmentation fault",
            None,
        ),
        ("RuntimeError: boom", "RuntimeError: boom", None),
    ],
)
def test_strip_prefix_removes_launcher_prefixes_and_keeps_the_rank(
    line: str, bare: str, rank: int | None
) -> None:
    """Rank and launcher prefixes go; the rank they name is returned; other lines are untouched."""
    assert strip_prefix(line) == (bare, rank)


# NCCL's debug prefix (src/debug.cc "%s:%d:%d [%d] "): NVIDIA/nccl#1405's completion error.
NCCL_COMPLETION = (
    "{host}:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> "
    "with status=12 opcode=0 len=0 vendor err 129 (Recv)"
)
PORT_EVENT = (
    "{host}:3468:3905 [4] transport/net_ib/common.cc:179 (ncclIbAsyncThreadMain) NCCL WARN NET/IB : "
    "mlx5_0:1 Got non-fatal async event: port error(10)"
)


@pytest.mark.parametrize(
    ("body", "host"),
    [
        (NCCL_COMPLETION.format(host="node7"), "node7"),
        (NCCL_COMPLETION.format(host="gpu-a12.cluster"), "gpu-a12.cluster"),  # a dotted name as written
        (
            "gpu07:1201:1377 [3] include/socket.h:194 WARN Call to recv failed : Connection reset by peer",
            "gpu07",
        ),
        # not NCCL's prefix: a pid without a tid, no device, a pdsh host, an Xid line
        ("node7:3468 [4] NCCL WARN NET/IB : port error", None),
        ("node7:3468:3905 NCCL WARN NET/IB : port error", None),
        ("node7: iteration 10/100", None),
        ("gpu03 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", None),
        # only at the start of the bare line
        ("see node7:3468:3905 [4] NCCL WARN NET/IB : port error", None),
    ],
)
def test_nccl_host_reads_the_host_of_nccl_s_own_prefix(body: str, host: str | None) -> None:
    assert nccl_host(body) == host


@pytest.mark.parametrize(
    ("line", "host"),
    [
        (NCCL_COMPLETION.format(host="node7"), "node7"),
        ("[rank3]: " + NCCL_COMPLETION.format(host="gpu-a12.cluster"), "gpu-a12.cluster"),
        ("3: " + PORT_EVENT.format(host="gpu02"), "gpu02"),
        ("[1,19]<stderr>:" + PORT_EVENT.format(host="gpu04"), "gpu04"),
        (
            "[rank17]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3763, remote process "
            "exited or there was a network error, NCCL version 2.28.8",
            None,
        ),
    ],
)
def test_a_signal_keeps_the_host_nccl_s_prefix_names_behind_any_launcher_prefix(
    line: str, host: str | None
) -> None:
    """The classifier reads NCCL's prefix once, after the launcher's, and keeps its host on each signal
    of the line (node blame and recurring blame read it there); the patterns still see the prefix."""
    signals = classify_lines([line], PATTERNS)
    assert signals and {s.nccl_host for s in signals} == {host}
    assert all(s.to_dict()["nccl_host"] == host for s in signals)


def test_pdsh_host_prefixed_exception_reaches_the_anchored_pattern() -> None:
    """DeepSpeed's multi-node runner (pdsh) puts `host: ` first; the traceback's last line still counts."""
    cause = root_cause(classify_lines(["gpu004: ValueError: bad shape"], PATTERNS))
    assert cause is not None and cause.error_type == "exception"


def test_duplicate_gpu_is_a_config_error_not_nccl() -> None:
    """Two ranks on one GPU (NVIDIA/Megatron-LM#661) fail the same way on every retry."""
    lines = [
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
        "Last error:",
        "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device f000",
    ]
    cause = root_cause(classify_lines(lines, PATTERNS))
    assert cause is not None and (cause.error_type, cause.rank) == ("config_error", 3)


def test_mpirun_prefixed_exception_is_seen_with_its_rank() -> None:
    """An mpirun --tag-output line reaches the anchored exception pattern and blames rank 19."""
    cause = root_cause(classify_lines(["[1,19]<stderr>:ValueError: bad shape"], PATTERNS))
    assert cause is not None
    assert (cause.error_type, cause.rank) == ("exception", 19)


def test_deepspeed_launcher_exit_codes_are_classified() -> None:
    """DeepSpeed's `exits with return code = -11` is a segfault and `= -9` a kill (deepspeedai/DeepSpeed#3232)."""
    prefix = "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['python', 'main.py'] "
    kinds = [
        root_cause(classify_lines([prefix + f"exits with return code = {c}"], PATTERNS)) for c in (-11, -9)
    ]
    assert [k.error_type if k else None for k in kinds] == ["segfault", "killed"]


FROZEN_RANK = [
    "W1122 04:21:03.468000 1208 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process 1657 closing signal SIGTERM",
    "[rank1]:[E1122 04:21:33.331456701 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=16, OpType=ALLREDUCE, NumelIn=49600, NumelOut=49600, Timeout(ms)=30000) ran for 30093 milliseconds before timing out.",
    "W1122 04:21:33.469000 1208 torch/distributed/elastic/multiprocessing/api.py:1031] Unable to shutdown process 1657 via 15, forcefully exiting via 9",
    "E1122 04:21:33.608000 1208 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: -9) local_rank: 1 (pid: 1657) of binary: python",
    "  traceback : Signal 9 (SIGKILL) received by PID 1657",
]


def test_a_stuck_rank_killed_by_torchrun_is_a_timeout_not_killed() -> None:
    """torchrun's SIGKILL of the pid it could not stop with SIGTERM is teardown; the watchdog timeout is the cause."""
    cause = root_cause(classify_lines(FROZEN_RANK, PATTERNS))
    assert cause is not None
    assert cause.error_type == "nccl_timeout"


def test_a_rank_killed_from_outside_stays_killed() -> None:
    """A SIGKILL of a pid torchrun did not kill itself (the OOM killer, a fault) is still the cause."""
    lines = [FROZEN_RANK[1], FROZEN_RANK[3].replace("pid: 1657", "pid: 1700"), FROZEN_RANK[2]]
    cause = root_cause(classify_lines(lines, PATTERNS))
    assert cause is not None
    assert cause.error_type == "killed"


@pytest.mark.parametrize("policy", ["default", "megatron_transient"])
def test_shipped_policies_stop_on_config_errors_with_a_reason(policy: str) -> None:
    """A config error stops at once under the shipped policies, and the reason says to change the config."""
    rules = load_policy(yaml.safe_load((RESTART / f"{policy}.yaml").read_text()))
    outcome = Outcome(JobState.FAILED, "config_error", signal="scheduler_checkpoint_mismatch")
    decision = decide(rules, outcome, RestartHistory(), now=0.0)
    assert decision.action is DecisionAction.STOP
    assert "excluded error_type: config_error" in decision.reason
    assert "scheduler_checkpoint_mismatch" in decision.reason


def test_config_error_stops_even_when_a_policy_does_not_list_it() -> None:
    """A user policy that restarts everything still stops on a config error: a retry cannot help."""
    rules = load_policy({"rules": [{"name": "all", "action": "restart", "max_retries": 5}]})
    decision = decide(
        rules, Outcome(JobState.FAILED, "config_error", signal="storage_full"), RestartHistory(), now=0.0
    )
    assert decision.action is DecisionAction.STOP


@pytest.mark.parametrize(
    "line",
    [
        # Megatron's _check_and_set joins "checkpoint" and "value" without a space.
        "AssertionError: OptimizerParamScheduler: class input value 640 and checkpointvalue 384 "
        "for total number of weight decay iterations do not match",
        "ft_launcher: error: unrecognized arguments: --rdvz-backend",
        "AssertionError: Number of layers should be divisible by the pipeline-model-parallel size",
    ],
)
def test_setup_failures_are_config_errors(line: str) -> None:
    """The scheduler mismatch on resume, a rejected launcher argument and a PP check read as config_error."""
    cause = root_cause(classify_lines([line], PATTERNS))
    assert cause is not None
    assert cause.error_type == "config_error"
