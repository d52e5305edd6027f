"""Which ranks a collective hang waited on, read from torch's own NCCL watchdog lines. Pure.

When a collective hangs, the watchdog of every rank that has the collective pending fires once
the process group's timeout has passed (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp,
`WorkNCCL::checkTimeout` and `ProcessGroupNCCL::watchdogHandler`):

    [rank5]:[E ProcessGroupNCCL.cpp:574] [Rank 5] Watchdog caught collective operation timeout:
        WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)
        ran for 600031 milliseconds before timing out.
    [rank5]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 5] Timeout at NCCL work: 1580,
        last enqueued NCCL work: 1580, last completed NCCL work: 1579.

(each one line in the log; torch 2.3-2.5; the second line's group prefix is `[PG 0 (default_pg)
Rank 5]` in 2.4 and `[PG ID 0 PG GUID 0(default_pg) Rank 5]` from 2.5). torch 2.6 and later
(2.11 measured on our GPUs) print `[PG ID 0 PG GUID 0(default_pg) Rank 5]  failure detected by
watchdog at work sequence id: 1580 PG status: last enqueued work: 1580, last completed work:
1579` instead of the second line. `SeqNum` counts the collectives of one process group, the same on
every rank of an SPMD program. A rank that never reached the collective the others wait in
leaves one of two marks:
- behind: its own pending collective is older (it times out on SeqNum 1579 while the rest time
  out on 1580: its stream never finished 1579, so it never got to 1580). A rank's timed-out
  work is never past its `last enqueued NCCL work`, so that number adds no second test; it is
  kept for the reason shown;
- missing: it has nothing pending (stuck on the CPU before it could enqueue, or its process
  vanished with its node), so its watchdog prints no timeout line at all. Seen only when the
  log tells the world size (the rendered script's rank layout times the job's nodes) and nearly
  every rank printed.
When every rank timed out on the same collective and none is missing, the lines single no rank
out (a link or a switch): nobody is a straggler.

A rank is the process's global rank from torch's `[rankN]:` line prefix. The `[Rank N]` inside
the line is the rank within its process group; it is taken only where the line says it is the
default group (`PG 0`), or where torch printed no `[rankN]:` prefix and no group at all (torch
before 2.2 printed both only for the default group's global ranks in the common case).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from oellm_autoexp.core.classify.classifier import PER_RANK_PATTERNS
from oellm_autoexp.core.classify.prefixes import torch_rank
from oellm_autoexp.core.classify.signals import Signal

# config/monitoring/base.yaml: the watchdog's timeout line, its `Timeout at NCCL work` line and
# the newer `failure detected by watchdog` line (the classifier keeps the first of each per rank
# past its signal cap).
WATCHDOG_PATTERNS = PER_RANK_PATTERNS - {"stack_dump"}  # the probe's dumps: stack_dump_blame.py
# The share of the world that must have printed a timeout line before the ranks that did not
# count as missing (three in four: one node of four may be the silent one; node_blame's share
# guard then keeps the blame to a few nodes). Peers that entered the collective within seconds
# of each other time out within seconds of each other; a judgement made while the rest are
# still printing must not read the ranks not yet heard from as stragglers.
MIN_PRINTED_SHARE = 0.75
DEFAULT_PG = "0"


@dataclass(frozen=True)
class RankTimeout:
    """One rank's timed-out collective, from its watchdog lines."""

    rank: int
    pg: str | None  # the process group's id as torch printed it (`PG 0`, `PG ID 0`); None: not printed
    seq: int  # the SeqNum of its oldest timed-out collective
    last_enqueued: int | None  # `last enqueued NCCL work` (torch >= 2.3), None when not printed
    signal: Signal


@dataclass(frozen=True)
class Straggler:
    """A rank the others waited on, and why its lines (or their absence) say so."""

    rank: int
    reason: str
    signal: Signal | None  # its own line (behind); None when it printed none (missing)


def rank_timeouts(signals: Iterable[Signal]) -> list[RankTimeout]:
    """Each rank's oldest timed-out collective per process group, from the watchdog signals."""
    oldest: dict[tuple[int, str | None], RankTimeout] = {}
    for signal in signals:
        found = _timeout_of(signal) if signal.pattern in WATCHDOG_PATTERNS else None
        if found is None:
            continue
        known = oldest.get((found.rank, found.pg))
        if known is None or found.seq < known.seq:
            oldest[found.rank, found.pg] = found
        elif found.seq == known.seq and known.last_enqueued is None:
            oldest[found.rank, found.pg] = _with(known, found)
    return _merge_groupless(list(oldest.values()))


def stragglers(signals: Iterable[Signal], world_size: int | None = None) -> tuple[Straggler, ...]:
    """The ranks a collective hang waited on: behind the majority, or (with `world_size`) silent.

    Empty when every rank that printed timed out on the same collective and none is missing,
    or when the lines do not show a clear majority to be behind of.
    """
    timeouts = rank_timeouts(signals)
    if not timeouts:
        return ()
    group = _main_group(timeouts)
    in_group = [t for t in timeouts if t.pg == group]
    majority_seq, majority = Counter(t.seq for t in in_group).most_common(1)[0]
    if 2 * majority <= len(in_group):
        return ()  # no clear majority: the ranks disagree too much to single any out
    out: list[Straggler] = []
    for t in sorted(in_group, key=lambda t: t.rank):
        if t.seq < majority_seq:
            out.append(Straggler(t.rank, _behind(t, majority_seq, majority), t.signal))
    out.extend(_missing(timeouts, world_size, majority_seq, majority))
    return tuple(out)


def _missing(
    timeouts: list[RankTimeout], world_size: int | None, majority_seq: int, majority: int
) -> list[Straggler]:
    if world_size is None or world_size <= 0:
        return []
    printed = {t.rank for t in timeouts}
    if len(printed) < MIN_PRINTED_SHARE * world_size or any(r >= world_size for r in printed):
        return []  # too few heard from yet, or a world size that does not fit the ranks printed
    reason = "never reached collective {seq} that {n} ranks timed out in (it printed no watchdog line)"
    return [
        Straggler(rank, f"rank {rank} {reason.format(seq=majority_seq, n=majority)}", None)
        for rank in range(world_size)
        if rank not in printed
    ]


def _behind(t: RankTimeout, majority_seq: int, majority: int) -> str:
    enqueued = f", its last enqueued NCCL work: {t.last_enqueued}" if t.last_enqueued is not None else ""
    return (
        f"rank {t.rank} never reached collective {majority_seq} that {majority} ranks timed out in "
        f"(it timed out in collective {t.seq}{enqueued})"
    )


def _main_group(timeouts: list[RankTimeout]) -> str | None:
    """The process group most ranks timed out in (the default group on a tie)."""
    counts = Counter(t.pg for t in timeouts)
    return max(counts, key=lambda pg: (counts[pg], pg == DEFAULT_PG))


def _timeout_of(signal: Signal) -> RankTimeout | None:
    groups = signal.groups
    seq = groups.get("seq", "")
    if not seq.isdigit():
        return None
    pg = groups.get("pg") or None
    rank = _global_rank(signal, pg)
    if rank is None:
        return None
    enqueued = groups.get("last_enqueued", "")
    last = int(enqueued) if enqueued.lstrip("-").isdigit() else None
    return RankTimeout(rank, pg, int(seq), last, signal)


def _global_rank(signal: Signal, pg: str | None) -> int | None:
    """The `[rankN]:` prefix's rank, else the in-line `[Rank N]` only where it is a global rank."""
    prefix_rank = torch_rank(signal.line, {})
    if prefix_rank is not None:
        return prefix_rank
    inline = signal.groups.get("rank", "")
    if inline.isdigit() and pg in (None, DEFAULT_PG):
        return int(inline)
    return None


def _with(base: RankTimeout, other: RankTimeout) -> RankTimeout:
    """`base` with the `last enqueued` that only `other` printed."""
    return RankTimeout(base.rank, base.pg, base.seq, other.last_enqueued, base.signal)


def _merge_groupless(timeouts: list[RankTimeout]) -> list[RankTimeout]:
    """Fold a rank's group-less line (torch's `[Rank N] Watchdog caught ...` before its PG prefix)
    into the same rank's line that names the group, when both speak of one collective."""
    named = {(t.rank, t.seq): t for t in timeouts if t.pg is not None}
    out = []
    for t in timeouts:
        if t.pg is None and (t.rank, t.seq) in named:
            continue
        out.append(t)
    return out
