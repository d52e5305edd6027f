"""The node NCCL's network errors name in two failed attempts: blamed. Pure.

One attempt's NCCL network errors single out no node (core/decide/node_blame.py): both ends of
a broken connection print them, each with NCCL's `host:pid:tid [dev]` prefix naming the end
that printed (`node7:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer
10.0.0.2<54862> with status=12 ...`). But a node whose HCA, port or cable is bad is an end of
every connection that breaks, attempt after attempt, while its peers change (a restart lands
the ranks elsewhere and the ring is rebuilt). So when an attempt fails on an NCCL network error,
the nodes whose NCCL lines were also in an earlier failed attempt of the last `WINDOW_S` are the
broken end. Not only the attempt just before: at thousands of GPUs other faults strike between
two landings on the broken node (the simulated Kokolis year: half the second landings came after
another fault), and a node out of one allocation comes back in a later one. A healthy node is
seldom named twice by chance: each failure names its two ends, out of hundreds of nodes.

On a large allocation (`FIRST_SIGHT_NODES` or more) the ends one failed attempt names (at most
`FIRST_SIGHT_ENDS`: one broken link) are blamed at once. The costs are lopsided there: a healthy
node kept out costs one node of a pool of hundreds, while a broken one left in costs a whole
attempt when the restart lands on it (on 2,048 nodes, ~25 min of 16,384 GPUs; the simulated
Kokolis year: 0.8 ETTR points, docs/simulate_defaults.md). On a small one a healthy node kept out
may be what the job cannot spare, so two failures are asked for.

Only when nothing else singles a node out, and only for a network cause (an NCCL error, a
collective timeout or a hang): an attempt whose root is a crash has NCCL lines from every peer
of the rank that died. The share guard of node_blame still applies: a switch that fails names
many nodes, twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oellm_autoexp.core.classify.signals import Signal
from oellm_autoexp.core.decide.nameless_causes import SUSPECT_CAUSES
from oellm_autoexp.core.decide.node_blame import (
    DEFAULT_MAX_SHARE,
    Blame,
    BlameResult,
    blame_limit,
    short_name,
)
from oellm_autoexp.core.decide.policy import RestartRecord

NCCL_ERROR_TYPE = "nccl"  # the classifier's error type of NCCL's own transport errors
WINDOW_S = 24 * 3600.0  # how far back an earlier failure's NCCL lines count (one day of restarts)
# From this allocation size one failure's named ends are blamed (as first_exception_at_scale).
FIRST_SIGHT_NODES = 128
# The ends of one link; more named nodes at once may be a switch: ask for a second failure.
FIRST_SIGHT_ENDS = 2


def network_named(signals: Iterable[Signal], allocation: Sequence[str], cause: str | None) -> tuple[str, ...]:
    """The allocation's nodes whose own NCCL network errors are in this attempt's lines.

    Empty unless the attempt ended on a network cause (`cause`, its error type). Host names are
    matched to the allocation by their short name (`node7` for `node7.cluster`); a host the
    allocation lacks is another job's and is left out.
    """
    if cause not in SUSPECT_CAUSES:  # a network fault ends an attempt as one of these
        return ()
    alloc = {short_name(n): n for n in allocation}
    named: list[str] = []
    for signal in signals:
        if signal.error_type != NCCL_ERROR_TYPE:
            continue
        host = signal.nccl_host  # the end that printed it (core/classify/prefixes.py)
        node = alloc.get(short_name(host)) if host else None
        if node is not None and node not in named:
            named.append(node)
    return tuple(sorted(named))


def named_before(
    restarts: Sequence[RestartRecord], now_s: float, window_s: float = WINDOW_S
) -> tuple[str, ...]:
    """The nodes NCCL's network errors named in the restarted failures of the last `window_s`."""
    named: list[str] = []
    for restart in restarts:
        if now_s - restart.time_s <= window_s:
            named.extend(n for n in restart.named_nodes if n not in named)
    return tuple(named)


def blame_again(
    named: Sequence[str],
    restarts: Sequence[RestartRecord],
    now_s: float,
    allocation_size: int,
    max_share: float = DEFAULT_MAX_SHARE,
) -> BlameResult:
    """judge()'s and the fleet simulation's question: the nodes this attempt's NCCL network errors
    named (`network_named`) that a restarted failure of the last `WINDOW_S` named too; on a large
    allocation, the (at most `FIRST_SIGHT_ENDS`) nodes this attempt named, at once."""
    if not named:
        return BlameResult(())
    if allocation_size >= FIRST_SIGHT_NODES and len(named) <= FIRST_SIGHT_ENDS:
        return BlameResult(
            tuple(
                Blame(
                    node,
                    f"NCCL's network errors came from this node, an end of a broken connection "
                    f"(on {allocation_size} nodes one failure is enough: keeping a healthy node out costs little)",
                    "log",
                )
                for node in named
            )
        )
    return recurring_blame(named, named_before(restarts, now_s), allocation_size, max_share)


def recurring_blame(
    named: Sequence[str],
    previous: Sequence[str],
    allocation_size: int,
    max_share: float = DEFAULT_MAX_SHARE,
) -> BlameResult:
    """Blame the nodes named by this attempt's NCCL network errors and by an earlier failure's.

    `previous`: `named_before` the job's restarts (what `network_named` gave for each, stored).
    """
    common = [n for n in named if n in set(previous)]
    if not common:
        return BlameResult(())
    limit = blame_limit(allocation_size, max_share) if allocation_size else 1
    if len(common) > limit:
        return BlameResult(
            (),
            f"NCCL's network errors named {len(common)} nodes in this failed attempt and an earlier one "
            f"(more than {limit}): a job-wide network failure, no node blamed",
        )
    return BlameResult(
        tuple(
            Blame(
                node,
                "NCCL's network errors came from this node in this failed attempt and an earlier one",
                "log",
            )
            for node in common
        )
    )
