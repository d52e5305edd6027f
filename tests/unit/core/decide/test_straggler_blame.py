"""A hung collective's broken node named from torch's own NCCL watchdog lines.

The lines are torch's formats (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp,
`WorkNCCL::checkTimeout` and the watchdog loop), as logs show them: torch 2.3 (`[Rank R]
Watchdog caught ...`, `[PG 0 Rank R] Timeout at NCCL work ...`), 2.4-2.5 (the group's prefix
`[PG ID 0 PG GUID 0(default_pg) Rank R]` on the second line) and 2.6 and later (`failure detected
by watchdog at work sequence id`, our own torch 2.11 run); each behind the `[rankN]:` prefix torch
puts on every line of a rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.node_blame import blame_nodes
from oellm_autoexp.core.decide.straggler_blame import rank_timeouts, stragglers
from tests.paths import REPO

ALLOC = ("gpu01", "gpu02", "gpu03", "gpu04")  # 4 ranks per node: 16 ranks
LAYOUT = "autoexp: rank layout: 4 ranks per node (node rank = SLURM_NODEID)"
WORK = "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000"


def torch23(rank: int, seq: int, enqueued: int | None = None) -> list[str]:
    """torch 2.3: the watchdog line names only the group rank; the second line the group."""
    return [
        f"[rank{rank}]:[E ProcessGroupNCCL.cpp:574] [Rank {rank}] Watchdog caught collective operation "
        f"timeout: WorkNCCL(SeqNum={seq}, {WORK}) ran for 600031 milliseconds before timing out.",
        f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {rank}] Timeout at NCCL work: {seq}, "
        f"last enqueued NCCL work: {enqueued if enqueued is not None else seq}, last completed NCCL work: {seq - 1}.",
    ]


def torch25(rank: int, seq: int, enqueued: int | None = None, pg: str = "ID 0 PG GUID 0(default_pg)",
            group_rank: int | None = None) -> list[str]:  # fmt: skip
    """torch 2.4-2.5: `[Rank R]` (the rank in the group) on the watchdog line, the group's prefix
    (`[PG 0 (default_pg) Rank R]`, 2.5: `[PG ID 2 PG GUID 3 Rank R]`) on the others."""
    own = rank if group_rank is None else group_rank
    stamp = "[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp"
    return [
        f"[rank{rank}]:{stamp}:607] [Rank {own}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, {WORK}) ran for 600017 milliseconds before timing out.",
        f"[rank{rank}]:{stamp}:1664] [PG {pg} Rank {own}] Exception (either an error or timeout) detected by "
        f"watchdog at work: {seq}, last enqueued NCCL work: {enqueued or seq}, last completed NCCL work: {seq - 1}.",
        f"[rank{rank}]:{stamp}:1834] [PG {pg} Rank {own}] Timeout at NCCL work: {seq}, last enqueued NCCL work: "
        f"{enqueued or seq}, last completed NCCL work: {seq - 1}.",
        f"[rank{rank}]:{stamp}:621] [Rank {own}] Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
    ]


def torch211(rank: int, seq: int, enqueued: int | None = None) -> list[str]:
    """torch 2.6 and later (these from torch 2.11 on 2x H100, tests/fixtures/logs/gpu_monitor/hang_pg30.log):
    `failure detected by watchdog at work sequence id` instead of `Timeout at NCCL work`."""
    stamp = "[E1123 08:38:46.549946731 ProcessGroupNCCL.cpp"
    return [
        f"[rank{rank}]:{stamp}:689] [Rank {rank}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, {WORK}) ran for 30073 milliseconds before timing out.",
        f"[rank{rank}]:{stamp}:2303] [PG ID 0 PG GUID 0(default_pg) Rank {rank}]  failure detected by watchdog at "
        f"work sequence id: {seq} PG status: last enqueued work: {enqueued or seq}, last completed work: {seq - 1}",
    ]


FORMATS = pytest.mark.parametrize(
    "fmt", [torch23, torch25, torch211], ids=["torch2.3", "torch2.5", "torch2.11"]
)
Fmt = Callable[..., list[str]]


def classify(lines: Iterable[str]) -> list[Signal]:
    return classify_lines(list(lines), load_patterns(), source="job.log")


def log(fmt: Fmt, seqs: dict[int, int], layout: bool = True) -> list[Signal]:
    """A hang's log: the layout line, then each rank's watchdog lines (rank -> timed-out SeqNum)."""
    lines = [LAYOUT] if layout else []
    for rank, seq in seqs.items():
        lines += fmt(rank, seq)
    return classify(lines)


@FORMATS
def test_the_shipped_patterns_read_rank_group_and_collective(fmt: Fmt) -> None:
    """Every format gives the global rank, the group and the SeqNum; torch >= 2.3 the last enqueued."""
    (t,) = rank_timeouts(classify(fmt(37, 1580, enqueued=1582)))
    assert (t.rank, t.pg, t.seq, t.last_enqueued) == (37, "0", 1580, 1582)


@FORMATS
def test_the_node_whose_ranks_printed_nothing_is_blamed(fmt: Fmt) -> None:
    """Every rank but node 3's (ranks 8-11) timed out in collective 1580: node 3 is the straggler."""
    signals = log(fmt, {r: 1580 for r in range(16) if not 8 <= r <= 11})
    result = blame_nodes(signals, ALLOC)
    assert result.nodes == ("gpu03",)
    assert result.blamed[0].evidence == (
        "rank 8 never reached collective 1580 that 12 ranks timed out in (it printed no watchdog line)"
        " (4 ranks per node: node 2 of the allocation)"
    )


@FORMATS
def test_one_silent_rank_names_its_node(fmt: Fmt) -> None:
    """A single rank stuck on the CPU (nothing pending, no timeout line) is enough."""
    signals = log(fmt, {r: 1580 for r in range(16) if r != 13})
    assert blame_nodes(signals, ALLOC).nodes == ("gpu04",)


@FORMATS
def test_the_node_whose_ranks_timed_out_one_work_earlier_is_blamed(fmt: Fmt) -> None:
    """Node 2's ranks still wait in collective 1579 while the rest wait in 1580."""
    signals = log(fmt, {r: 1579 if 4 <= r <= 7 else 1580 for r in range(16)})
    result = blame_nodes(signals, ALLOC)
    assert result.nodes == ("gpu02",)
    assert (
        "rank 4 never reached collective 1580 that 12 ranks timed out in (it timed out in collective 1579"
        in (result.blamed[0].evidence)
    )
    assert result.blamed[0].evidence.startswith("job.log line ")


@FORMATS
def test_every_rank_on_the_same_collective_blames_no_one(fmt: Fmt) -> None:
    """All 16 ranks timed out in 1580 and none is missing: a link or a switch, not one node."""
    assert blame_nodes(log(fmt, dict.fromkeys(range(16), 1580)), ALLOC).nodes == ()


@pytest.mark.parametrize(
    ("seqs", "layout", "why"),
    [
        ({r: 1580 for r in range(8)}, True, "half the ranks printed: the rest may still be printing"),
        ({r: 1580 for r in range(16) if r // 4 != 2}, False, "no rank layout: ranks name no node"),
        ({r: 1579 if r < 8 else 1580 for r in range(16)}, True, "no clear majority to be behind of"),
        ({r: 1580 for r in range(16) if r not in (1, 6, 9, 14)}, True, "silent ranks on every node"),
    ],
)
def test_no_blame_without_clear_evidence(seqs: dict[int, int], layout: bool, why: str) -> None:
    """Too few ranks heard from, no layout, a split vote, or stragglers everywhere: nobody."""
    assert blame_nodes(log(torch25, seqs, layout), ALLOC).nodes == (), why


def test_stragglers_on_many_nodes_are_a_job_wide_event() -> None:
    """Behind ranks on 3 of 8 nodes pass the share guard (25 %): nobody is blamed, and it says why."""
    alloc = tuple(f"gpu{i:02d}" for i in range(1, 9))
    seqs = {r: 1579 if r // 4 in (1, 4, 6) else 1580 for r in range(32)}
    result = blame_nodes(log(torch25, seqs), alloc)
    assert result.nodes == ()
    assert result.withheld is not None and "evidence names 3 of 8 nodes" in result.withheld


@pytest.mark.parametrize(
    "root",
    [
        "[rank9]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "[rank9]: KeyError: 'input_ids'",  # a catch-all exception line: the rank raised and died
    ],
)
def test_a_root_cause_in_the_log_leaves_the_hole_to_that_cause(root: str) -> None:
    """Rank 9 died of its own error; the peers' watchdog lines miss it, but that error is the cause."""
    lines = [LAYOUT, root]
    for rank in range(16):
        if rank != 9:
            lines += torch25(rank, 1580)
    assert blame_nodes(classify(lines), ALLOC).nodes == ()


def test_a_sub_group_counts_by_global_rank() -> None:
    """In a sub-group (`PG ID 2`), `Rank N` is the rank in the group: the `[rankN]:` prefix is used."""
    lines = [LAYOUT]
    for rank in range(16):
        lines += torch25(rank, 31 if rank // 4 == 3 else 32, pg="ID 2 PG GUID 3", group_rank=rank % 4)
    signals = classify(lines)
    assert {t.rank for t in rank_timeouts(signals)} == set(range(16))
    assert blame_nodes(signals, ALLOC).nodes == ("gpu04",)


def test_a_group_rank_without_a_global_prefix_is_not_taken() -> None:
    """No `[rankN]:` prefix and a sub-group's `[PG ID 2 ...Rank 1]`: that rank is no global rank."""
    line = torch25(9, 32, pg="ID 2 PG GUID 3", group_rank=1)[2].split(":", 1)[1]
    assert rank_timeouts(classify([line])) == []


def test_missing_ranks_need_the_world_size() -> None:
    """Without a world size only the ranks behind count; with it the silent ones too."""
    signals = log(torch25, {r: 1580 for r in range(16) if r != 5})
    assert stragglers(signals) == ()
    assert [s.rank for s in stragglers(signals, world_size=16)] == [5]


def test_our_own_two_gpu_hang_shows_the_silent_rank_but_names_no_node() -> None:
    """torch 2.11 on 2x H100, rank 1 stopped: rank 0 printed its watchdog lines, rank 1 none. One
    rank of two heard from is too few to call the other silent, and one node is all there is."""
    lines = (REPO / "tests/fixtures/logs/gpu_monitor/hang_pg30.log").read_text().splitlines()
    signals = classify(lines)
    assert [(t.rank, t.pg, t.seq, t.last_enqueued) for t in rank_timeouts(signals)] == [(0, "0", 469, 469)]
    assert stragglers(signals, world_size=2) == ()
