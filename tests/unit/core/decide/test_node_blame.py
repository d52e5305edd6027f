"""Node blame on evidence that singles a node out, the share guard, exclusions, and the Slurm text they read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import log_cause
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.exclusions import (
    Exclusion,
    active_nodes,
    describe,
    exclude_list,
    exclusions_from_blame,
    merge_exclusions,
    scontrol_exclude_command,
)
from oellm_autoexp.core.decide.node_blame import Blame, blame_limit, blame_nodes
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, decide, load_policy
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_nodes import (
    NodeHealth,
    RunNodes,
    parse_requeue_runs,
    parse_scontrol_nodes,
    parse_sinfo_nodes,
    state_words,
)
from oellm_autoexp.core.watch.outcome import Outcome
from tests.paths import REPO

# Localhost Slurm 22.05, node2 drained by hand while a job ran on it, then resumed:
# sinfo -N --noheader -o '%N|%T|%E'
SINFO_DRAINING = """\
node1|idle|none
node2|draining|Xid 79 GPU fallen off the bus
"""
# the same, a moment after `scontrol update NodeName=node2 State=RESUME` (slurmd not yet pinged)
SINFO_NOT_RESPONDING = """\
node1|idle|none
node2|mixed*|none
"""
# scontrol show node -o node2 (same moment as SINFO_DRAINING)
SCONTROL_ONELINE = (
    "NodeName=node2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUEfctv=8 CPUTot=8 CPULoad=0.37 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:4 NodeAddr=127.0.0.1 NodeHostName=vm Port=6829 "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=1024 "
    "FreeMem=22733 Sockets=8 Boards=1 State=MIXED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=debug  BootTime=2026-11-23T08:14:16 SlurmdStartTime=2026-11-23T08:16:16 "
    "LastBusyTime=2026-11-23T08:22:58 CfgTRES=cpu=8,mem=62.50G,billing=8 AllocTRES=cpu=1,mem=1G CapWatts=n/a "
    "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
    "Reason=Xid 79 GPU fallen off the bus [root@2026-11-23T08:23:59]\n"
)
# scontrol show node, multi-line: node1 from the localhost cluster, gpu02 as quoted in
# SckyzO/slurm_exporter#198 (Slurm 23.11, a node slurmctld downed for not responding).
SCONTROL_MULTILINE = """\
NodeName=node1 Arch=x86_64 CoresPerSocket=1
   CPUAlloc=2 CPUEfctv=8 CPUTot=8 CPULoad=0.16
   Gres=gpu:4
   NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05.8
   State=MIXED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug

NodeName=gpu02 Arch=x86_64 CoresPerSocket=4
   CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.00
   Gres=gpu:1080:7,gpu:block:1
   NodeAddr=gpu02 NodeHostName=gpu02 Version=23.11.4
   RealMemory=250000 AllocMem=0 FreeMem=38206 Sockets=2 Boards=1
   State=DOWN+NOT_RESPONDING ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=ifn,dll
"""
# Localhost: job 11 requeued three times by hand (the 3rd time with ExcNodeList=node1 while
# PENDING, so its last run landed on node2), then cancelled:
# sacct --duplicates --noheader --parsable2 --format JobID,State,NodeList,Start,End -j 11
SACCT_DUPLICATES = """\
11|REQUEUED|node1|2026-11-23T08:22:54|2026-11-23T08:23:00
11.batch|CANCELLED|node1|2026-11-23T08:22:54|2026-11-23T08:23:00
11|REQUEUED|node1|2026-11-23T08:23:11|2026-11-23T08:23:14
11.batch|CANCELLED|node1|2026-11-23T08:23:11|2026-11-23T08:23:14
11|REQUEUED|node1|2026-11-23T08:23:25|2026-11-23T08:23:32
11.batch|CANCELLED|node1|2026-11-23T08:23:25|2026-11-23T08:23:32
11|CANCELLED by 0|node2|2026-11-23T08:23:43|2026-11-23T08:23:49
11.batch|CANCELLED|node2|2026-11-23T08:23:43|2026-11-23T08:23:49
"""

NOW = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
ALLOC4 = ("gpu01", "gpu02", "gpu03", "gpu04")


SHIPPED = load_patterns(["megatron_production"])


def sig(pattern: str, line: str, line_no: int = 7, **groups: str) -> Signal:
    """A signal of the shipped pattern `pattern`, carrying its `blames_node` as the classifier does."""
    shipped = SHIPPED.get(pattern)
    blames_node = shipped.blames_node if shipped is not None else None
    return Signal(pattern, "gpu_hardware", "gpu", "root", line, line_no, groups, source="job.log",
                  blames_node=blames_node)  # fmt: skip


@pytest.mark.parametrize(
    ("signals", "allocation", "blamed"),
    [
        (
            [sig("xid", "gpu03 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1", node="gpu03")],
            ALLOC4,
            ["gpu03"],
        ),
        ([sig("srun_node_failure", "srun: error: Node failure on gpu02", node="gpu02")], ALLOC4, ["gpu02"]),
        # a host-less hardware line singles out the node only when there is one
        ([sig("gpu_fallen_off_bus", "GPU has fallen off the bus")], ("gpu07",), ["gpu07"]),
        ([sig("gpu_fallen_off_bus", "GPU has fallen off the bus")], ALLOC4, []),
        # every rank's exit line, and the batch host named by slurmstepd, are never evidence
        (
            [
                sig("srun_task_exit", f"srun: error: {n}: task 0: Exited with exit code 1", node=n)
                for n in ALLOC4
            ],
            ALLOC4,
            [],
        ),
        (
            [
                sig(
                    "slurm_node_failure",
                    "*** JOB 5 ON gpu01 CANCELLED AT 2026 DUE TO NODE FAILURE ***",
                    node="gpu01",
                )
            ],
            ALLOC4,
            [],
        ),
        # a fully qualified host name in a kernel line maps onto the allocation's short name
        (
            [sig("xid", "gpu04.cluster kernel: NVRM: Xid (PCI:0000:3b:00): 48", node="gpu04.cluster")],
            ALLOC4,
            ["gpu04"],
        ),
        # a node outside the allocation (another job's kernel log) is not ours to blame
        ([sig("xid", "gpu99 kernel: NVRM: Xid (PCI:0000:3b:00): 79", node="gpu99")], ALLOC4, []),
    ],
)
def test_blame_from_log_signals(
    signals: list[Signal], allocation: tuple[str, ...], blamed: list[str]
) -> None:
    """Only lines that name one node for a fault of its own blame it."""
    assert list(blame_nodes(signals, allocation).nodes) == blamed


def test_blame_carries_the_evidence_line() -> None:
    """The blame says which file and line singled the node out."""
    result = blame_nodes(
        [sig("xid", "gpu03 kernel: NVRM: Xid (PCI:0000:3b:00): 79", 12, node="gpu03")], ALLOC4
    )
    assert result.blamed == (
        Blame("gpu03", "job.log line 12: gpu03 kernel: NVRM: Xid (PCI:0000:3b:00): 79", "log"),
    )


def test_guard_blames_no_one_when_evidence_is_job_wide() -> None:
    """Hardware lines naming 300 of 1,024 nodes are a job-wide event: nobody is blamed, and it says why."""
    nodes = tuple(f"n{i:04d}" for i in range(1024))
    signals = [sig("xid", f"{n} kernel: NVRM: Xid (PCI:0000:3b:00): 79", node=n) for n in nodes[:300]]
    result = blame_nodes(signals, nodes)
    assert result.blamed == ()
    assert (
        result.withheld
        == "evidence names 300 of 1024 nodes (29 % > 25 %): a job-wide failure, no node blamed"
    )
    assert len(blame_nodes(signals[:256], nodes).blamed) == 256


@pytest.mark.parametrize(("size", "limit"), [(1, 1), (2, 1), (4, 1), (8, 2), (1024, 256)])
def test_blame_limit_allows_at_least_one_node(size: int, limit: int) -> None:
    """The share guard never stops a single node from being blamed, even on small allocations."""
    assert blame_limit(size) == limit


def test_blame_from_slurm_state_only_within_the_allocation() -> None:
    """A DRAIN/DOWN node of this allocation is blamed with Slurm's reason; other drained nodes are not ours."""
    health = [*parse_sinfo_nodes(SINFO_DRAINING), NodeHealth("gpu77", "down", "")]
    result = blame_nodes([], ("node1", "node2"), unhealthy=health)
    assert result.blamed == (
        Blame("node2", "Slurm reports node2 draining: Xid 79 GPU fallen off the bus", "slurm_state"),
    )


def test_blame_from_requeued_runs() -> None:
    """The node common to every NODE_FAIL run of a requeued job is blamed; a manual requeue is no evidence."""
    runs = [
        RunNodes("9", JobState.NODE_FAIL, ("a1", "a2"), "t1"),
        RunNodes("9", JobState.NODE_FAIL, ("a2", "a3"), "t2"),
        RunNodes("9", JobState.RUNNING, ("a4", "a5"), "t3"),
    ]
    assert blame_nodes([], ("a4", "a5"), requeue_runs=runs).nodes == ("a2",)
    manual = parse_requeue_runs(SACCT_DUPLICATES)
    assert blame_nodes([], ("node2",), requeue_runs=manual).nodes == ()
    forced = frozenset({JobState.REQUEUED})
    assert blame_nodes([], ("node2",), requeue_runs=manual, failed_run_states=forced).nodes == ("node1",)


def test_parse_requeue_runs_on_real_sacct_duplicates() -> None:
    """sacct --duplicates gives one line per run; steps are skipped, node lists expanded."""
    runs = parse_requeue_runs(SACCT_DUPLICATES)
    assert [(r.state, r.nodes) for r in runs] == [
        (JobState.REQUEUED, ("node1",)),
        (JobState.REQUEUED, ("node1",)),
        (JobState.REQUEUED, ("node1",)),
        (JobState.CANCELLED, ("node2",)),
    ]


@pytest.mark.parametrize(
    ("text", "parse", "expected"),
    [
        (SINFO_DRAINING, parse_sinfo_nodes, [("node2", "draining", "Xid 79 GPU fallen off the bus")]),
        (SINFO_NOT_RESPONDING, parse_sinfo_nodes, [("node2", "mixed*", "")]),
        (SCONTROL_ONELINE, parse_scontrol_nodes, [("node2", "MIXED+DRAIN", "Xid 79 GPU fallen off the bus")]),
        (SCONTROL_MULTILINE, parse_scontrol_nodes, [("gpu02", "DOWN+NOT_RESPONDING", "")]),
    ],
)
def test_parse_unhealthy_nodes(text: str, parse: object, expected: list[tuple[str, str, str]]) -> None:
    """Real sinfo/scontrol output: only DRAIN/DOWN/FAIL/not-responding nodes come back, with Slurm's reason."""
    found = parse(text)  # type: ignore[operator]
    assert [(h.node, h.state, h.reason) for h in found] == expected


def test_state_words() -> None:
    """Slurm's state spellings split into words; sinfo's trailing `*` means not responding."""
    assert state_words("MIXED+DRAIN") == {"MIXED", "DRAIN"}
    assert state_words("down*") == {"DOWN", "NOT_RESPONDING"}


def test_exclusions_expire_and_keep_the_newest_evidence() -> None:
    """An exclusion lasts 7 days at most by default; blaming the node again refreshes its evidence and bound."""
    first = exclusions_from_blame("job-a", [Blame("gpu03", "line 1", "log")], NOW)
    assert first[0].expires_at == NOW + timedelta(days=7)
    later = NOW + timedelta(hours=20)
    again = exclusions_from_blame("job-a", [Blame("gpu03", "line 9", "log")], later)
    merged = merge_exclusions(first, again, later)
    assert [(e.evidence, e.expires_at) for e in merged] == [("line 9", later + timedelta(days=7))]
    assert active_nodes(first, "job-a", NOW + timedelta(days=7) - timedelta(seconds=1)) == ("gpu03",)
    assert active_nodes(first, "job-a", NOW + timedelta(days=7)) == ()
    assert merge_exclusions(first, [], NOW + timedelta(days=8)) == []
    assert active_nodes(first, "job-b", NOW) == ()


def test_exclusion_record_round_trip() -> None:
    """The store-facing record is flat and reads back to the same exclusion."""
    item = exclusions_from_blame("job-a", [Blame("gpu03", "job.log line 12: Xid 79", "log")], NOW)[0]
    record = item.to_record()
    assert record["expires_at"] == "2026-11-30T08:00:00+00:00"  # 7 days at most
    assert Exclusion.from_record(record) == item
    assert describe(item, NOW + timedelta(hours=1, minutes=30)) == (
        "gpu03 excluded until repaired, 166 h 30 min more at most: job.log line 12: Xid 79"
    )


def test_exclude_list_and_scontrol_command() -> None:
    """--exclude joins the configured list and the exclusions; scontrol sets the whole list on a queued job."""
    assert exclude_list("gpu01,gpu02", ["gpu02", "gpu03"]) == "gpu01,gpu02,gpu03"
    assert exclude_list(None, []) is None
    assert scontrol_exclude_command("4711", "gpu01,gpu03") == [
        "scontrol",
        "update",
        "JobId=4711",
        "ExcNodeList=gpu01,gpu03",
    ]
    with pytest.raises(ValueError, match="at least one node"):
        scontrol_exclude_command("4711", "")


# -- a host-less GPU fault line blamed through the rank layout the rendered script announces --------

LAYOUT = Signal("rank_layout", None, "torchrun", "info", "autoexp: rank layout: 4 ranks per node", 3,
                {"ranks_per_node": "4"})  # fmt: skip


@pytest.mark.parametrize(
    ("line", "with_layout", "blamed"),
    [
        # torch's own `[rankN]:` prefix: rank 13 with 4 ranks per node ran on node 13 // 4 = 3
        ("[rank13]: RuntimeError: CUDA error: uncorrectable ECC error encountered", True, ["gpu04"]),
        ("[rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered", True, ["gpu01"]),
        # without the layout line the rank says nothing about the node
        ("[rank13]: RuntimeError: CUDA error: uncorrectable ECC error encountered", False, []),
        # srun's task number and torchrun --tee's local rank are other numberings: never mapped
        ("13: RuntimeError: CUDA error: uncorrectable ECC error encountered", True, []),
        ("[default1]: RuntimeError: CUDA error: uncorrectable ECC error encountered", True, []),
        # a rank past the allocation (a layout that does not fit it) blames nobody
        ("[rank16]: RuntimeError: CUDA error: uncorrectable ECC error encountered", True, []),
    ],
)
def test_a_rank_prefixed_gpu_fault_blames_the_node_of_its_rank(
    line: str, with_layout: bool, blamed: list[str]
) -> None:
    signals = [*([LAYOUT] if with_layout else []), sig("ecc_error", line, 40)]
    assert list(blame_nodes(signals, ALLOC4).nodes) == blamed


def test_rank_blame_says_how_it_found_the_node() -> None:
    """The evidence names the rank and the layout, so an operator can check the mapping."""
    line = "[rank13]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
    (blame,) = blame_nodes([LAYOUT, sig("ecc_error", line, 40)], ALLOC4).blamed
    assert blame.evidence == f"job.log line 40: {line} (rank 13, 4 ranks per node: node 3 of the allocation)"


def test_shipped_patterns_read_the_layout_line_and_blame_the_rank_s_node() -> None:
    """The lines as the rendered script and torch print them, through the shipped patterns."""
    lines = [
        "autoexp: rank layout: 8 ranks per node (node rank = SLURM_NODEID)",
        " [2026-11-23 08:32:38.004485] iteration    12001/ 2000000 | consumed samples: 1 |",
        "[rank21]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3763, "
        "remote process exited or there was a network error, NCCL version 2.28.8",
        "srun: error: gpu01: task 0: Exited with exit code 1",
    ]
    signals = classify_lines(lines, load_patterns(["megatron_production"]))
    assert list(blame_nodes(signals, ALLOC4).nodes) == ["gpu03"]


SITE_PATTERNS = """\
include: [megatron_production]
patterns:
  - name: site_health_check
    regex: '^healthcheck: (?P<node>[\\w-]+) failed: (?P<what>.+)'
    error_type: gpu_hardware
    subsystem: host
    blames_node: host
  - name: site_scratch_full
    regex: 'No space left on device: .?/local_scratch'
    error_type: filesystem
    subsystem: host
    blames_node: rank
"""


@pytest.mark.parametrize(
    ("line", "blamed"),
    [
        # `blames_node: host`: the node its match names
        ("healthcheck: gpu02 failed: nvidia-smi timed out", ["gpu02"]),
        # `blames_node: rank`: the node of the rank that printed it (13 // 4 = node 3)
        ("[rank13]: OSError: [Errno 28] No space left on device: '/local_scratch/shard_3'", ["gpu04"]),
    ],
)
def test_a_user_pattern_with_blames_node_blames_its_node(
    tmp_path: Path, line: str, blamed: list[str]
) -> None:
    """A user's own pattern file names nodes the way the shipped ones do: the key, not the name, decides."""
    mine = tmp_path / "site.yaml"
    mine.write_text(SITE_PATTERNS)
    layout = "autoexp: rank layout: 4 ranks per node (node rank = SLURM_NODEID)"
    signals = classify_lines([layout, line], load_patterns([mine]))
    assert list(blame_nodes(signals, ALLOC4).nodes) == blamed
    # the same pattern without the key names no node
    plain = tmp_path / "plain.yaml"
    plain.write_text(
        SITE_PATTERNS.replace("    blames_node: host\n", "").replace("    blames_node: rank\n", "")
    )
    assert list(blame_nodes(classify_lines([layout, line], load_patterns([plain])), ALLOC4).nodes) == []


MOUNT = "OSError: [Errno 107] Transport endpoint is not connected: '/ckpt/iter_0012000'"


@pytest.mark.parametrize(
    ("lines", "allocation", "blamed"),
    [
        # one rank's lost mount names its node through the layout (13 // 4 = node 3)
        ([f"[rank13]: {MOUNT}"], ALLOC4, ["gpu04"]),
        # without a rank the line names no node, not even the only one (the mount may be shared)
        ([MOUNT], ("gpu07",), []),
        ([MOUNT], ALLOC4, []),
        # ranks of two of four nodes: the file system is down for the job, no node is blamed
        ([f"[rank13]: {MOUNT}", f"[rank1]: {MOUNT}"], ALLOC4, []),
    ],
)
def test_a_lost_mount_blames_the_node_of_its_rank_only(lines: list[str], allocation: tuple[str, ...],
                                                        blamed: list[str]) -> None:  # fmt: skip
    patterns = load_patterns(["megatron_production"])
    signals = classify_lines(
        ["autoexp: rank layout: 4 ranks per node (node rank = SLURM_NODEID)", *lines], patterns
    )
    assert [s.error_type for s in signals if s.pattern == "mount_lost"] == ["filesystem"] * len(lines)
    assert list(blame_nodes(signals, allocation).nodes) == blamed


def test_an_io_error_reads_as_the_file_system_and_blames_no_node() -> None:
    """EIO (an evicted Lustre client, a failing disk) is the file system's, but on a shared mount often only the
    rank writing the checkpoint sees it: no node is named (base.yaml io_error, a fallback)."""
    patterns = load_patterns(["megatron_production"])
    line = "[rank6]: OSError: [Errno 5] Input/output error: '/lustre/ckpt/iter_0012000'"
    signals = classify_lines(
        ["autoexp: rank layout: 4 ranks per node (node rank = SLURM_NODEID)", line], patterns
    )
    cause = log_cause(signals)
    assert cause is not None and (cause.pattern, cause.error_type) == ("io_error", "filesystem")
    assert list(blame_nodes(signals, ALLOC4).nodes) == []


@pytest.mark.parametrize("policy", ["default", "megatron_transient", "fleet"])
def test_the_shipped_policies_restart_a_lost_mount_without_its_node(policy: str) -> None:
    """A lost mount is the node's, not the code's: restarted (not an exception's stop), off the node."""
    rules = load_policy(yaml.safe_load((REPO / "config" / "restart" / f"{policy}.yaml").read_text()))
    outcome = Outcome(JobState.RUNNING, "filesystem", signal="mount_lost", still_running=True)
    decision = decide(rules, outcome, RestartHistory(attempt=1), 0.0, blamed=("gpu04",))
    assert decision.action is DecisionAction.RESTART and decision.exclude_nodes == ("gpu04",)


# -- NCCL's own InfiniBand async event names the node whose port or HCA failed ----------------------

WATCHDOG = (
    "[rank9]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 9] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) "
    "ran for 600060 milliseconds before timing out."
)


@pytest.mark.parametrize(
    ("lines", "blamed"),
    [
        # NCCL >= 2.23 (src/transport/net_ib/common.cc): the port's non-fatal event, then the peers' watchdog
        (
            [
                "gpu03:3468:3905 [4] transport/net_ib/common.cc:179 (ncclIbAsyncThreadMain) NCCL WARN NET/IB : "
                "mlx5_0:1 Got non-fatal async event: port error(10)",
                WATCHDOG,
            ],
            ["gpu03"],
        ),
        # NCCL 2.19-2.22 (src/transport/net_ib.cc) and 2.18 (no device)
        (
            [
                "gpu02:1201:1377 [3] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_2:1 Got async event : port error"
            ],
            ["gpu02"],
        ),
        (
            [
                "gpu04:1201:1377 [3] transport/net_ib.cc:95 NCCL WARN NET/IB : Got async event : local catastrophic error"
            ],
            ["gpu04"],
        ),
        # the HCA's own fatal event (a root cause as well: nccl_net_ib)
        (
            [
                "gpu01:1:2 [0] transport/net_ib/common.cc:123 (ncclIbAsyncThreadMain) NCCL WARN NET/IB : mlx5_0:1 "
                "async fatal event: local catastrophic error"
            ],
            ["gpu01"],
        ),
        # a completion error names no node: both ends of every broken connection print one
        (
            [
                "gpu03:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer "
                "10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
            ],
            [],
        ),
        # a port that came back (PORT_ACTIVE) is not evidence; nor another job's node
        (
            [
                "gpu03:3468:3905 [4] transport/net_ib/common.cc:179 (ncclIbAsyncThreadMain) NCCL WARN NET/IB : "
                "mlx5_0:1 Got non-fatal async event: port active(9)"
            ],
            [],
        ),
        (
            [
                "gpu77:3468:3905 [4] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_2:1 Got async event : port error"
            ],
            [],
        ),
    ],
)
def test_nccl_s_port_event_blames_the_host_that_printed_it(lines: list[str], blamed: list[str]) -> None:
    signals = classify_lines(lines, load_patterns(["megatron_production"]))
    assert list(blame_nodes(signals, ALLOC4).nodes) == blamed


@pytest.mark.parametrize(
    ("line", "blamed"),
    [
        # catalogs/nccl_gloo.yaml entries only the failing node prints: its NVML, its NVLink pair, its HCA
        (
            "gpu02:81:113 [2] misc/nvmlwrap.cc:142 NCCL WARN nvmlInit_v2() failed: Driver/library version mismatch",
            ["gpu02"],
        ),
        (
            "gpu04:81:113 [1] graph/paths.cc:396 NCCL WARN P2P is disabled between NVLINK connected GPUs 1 and 2. This "
            "should not be the case given their connectivity, and is probably due to a hardware issue.",
            ["gpu04"],
        ),
        (
            "gpu03:81:113 [0] transport/net_ib/common.cc:140 NCCL WARN NET/IB : mlx5_2:1 async fatal event on QP "
            "(0x55d1c2a0) qpn=1234 handle=3 send_cq=5 recv_cq=6 state=6 sq_psn=77 rq_psn=78: local work queue "
            "catastrophic error",
            ["gpu03"],
        ),
        # a peer that went away is reported by every survivor: no node
        (
            "gpu03:81:113 [0] misc/socket.cc:58 NCCL WARN socketProgress: Connection closed by remote peer gpu01<4051>",
            [],
        ),
    ],
)
def test_nccl_catalog_lines_of_the_node_s_own_hardware_blame_its_host(line: str, blamed: list[str]) -> None:
    signals = classify_lines([line], load_patterns(["megatron_production"]))
    assert list(blame_nodes(signals, ALLOC4).nodes) == blamed


def test_a_port_error_alone_is_not_fatal_but_is_the_cause_once_the_job_ends() -> None:
    """NCCL goes on after a port's non-fatal event (a link that flaps comes back): it does not end the
    attempt by itself, but it is the network cause when the job fails or hangs after it."""
    line = ("gpu03:3468:3905 [4] transport/net_ib/common.cc:179 (ncclIbAsyncThreadMain) NCCL WARN NET/IB : "
            "mlx5_0:1 Got non-fatal async event: port error(10)")  # fmt: skip
    (signal,) = classify_lines([line], load_patterns(["megatron_production"]))
    assert (signal.pattern, signal.error_type, signal.is_cause_candidate) == (
        "nccl_ib_port_event",
        "nccl",
        True,
    )
    assert not signal.is_fatal
    catastrophic = line.replace(
        "Got non-fatal async event: port error(10)", "async fatal event: local catastrophic error"
    )
    fatal = {
        s.pattern: s.is_fatal for s in classify_lines([catastrophic], load_patterns(["megatron_production"]))
    }
    assert fatal["nccl_ib_fatal_event"] is True


RERUN = "ERROR:megatron.core.rerun_state_machine:"


@pytest.mark.parametrize(
    ("line", "blamed"),
    [
        # the rerun reproduced the NaN on the same GPU: Megatron exits 16 and names that GPU's host
        (
            f"{RERUN}Rank 9, node gpu03, device 1, iteration #12034: First rerun: unexpected result is "
            "reproducible within the tolerance (nan = nan). Need to rerun on a different GPU to verify correctness.!",
            ["gpu03"],
        ),
        # the resume landed on that GPU again
        (
            f"{RERUN}Got rescheduled on the same GPU. Need to resume again from the same checkpoint "
            "(node: gpu02.cluster.example, gpu: 3)",
            ["gpu02"],
        ),
        # not reproducible: a transient error, no node to keep out
        (
            f"{RERUN}Rank 9, node gpu03, device 1, iteration #12034: First rerun: unexpected result is not "
            "reproducible within the tolerance (nan != 2.1)!",
            [],
        ),
        # the first sighting names a rank only, and a NaN on many ranks is the run's own
        (f"{RERUN}Unexpected result nan on rank 9 at iteration #3 invocation #2 (message='found NaN')", []),
    ],
)
def test_megatron_s_rerun_names_the_host_of_the_gpu_that_reproduced_it(line: str, blamed: list[str]) -> None:
    signals = classify_lines([line], load_patterns(["megatron_production"]))
    assert list(blame_nodes(signals, ALLOC4).nodes) == blamed
