"""Which nodes to blame for a failed attempt, on evidence that singles them out. Pure.

Evidence that names one node for a reason of its own. A log line is evidence when its pattern
says how it names a node (`blames_node`, core/classify/signals.py; config/monitoring/*.yaml, a
user's pattern files too): the shipped ones are
- a GPU hardware line with its host (`<host> kernel: NVRM: Xid ...`, ECC, "fallen off the bus");
  a host-less one blames the node only when the allocation has a single node;
- srun's `Node failure on <node>`;
- the pre-flight's `preflight FAIL <node>: ...` (the node measured itself slow or broken);
- Megatron's rerun machinery: `Rank R, node <host>, device D, iteration #I: First rerun: unexpected
  result is reproducible ...` (it exits 16 and asks to resume on a different GPU);
- NCCL's own InfiniBand async event on a node (`<host>:<pid>:<tid> [0] ... NCCL WARN NET/IB :
  mlx5_0:1 Got non-fatal async event: port error(10)`): only the node that owns the port or HCA
  prints it, and NCCL's prefix names that host (Signal.nccl_host). Never NCCL's completion errors (`Got completion
  from peer ... status=12`): both ends of a broken connection print them;
- torch's NCCL watchdog lines of a hang: the ranks the others waited on (behind the majority's
  collective, or silent while nearly every other rank printed; core/decide/straggler_blame.py),
  through the same rank layout, and only while the log holds no root cause of its own;
- a silent hang's stack-dump probe: the ranks that printed no dump while most did
  (core/decide/stack_dump_blame.py), under the same layout and the same no-root-cause rule;
- a node Slurm itself reports DRAIN/DOWN/FAIL (core/jobs/slurm_nodes.py);
- the node lists of a job the cluster requeued after a node failure (`sacct --duplicates`):
  the nodes common to every NODE_FAIL run.
Never evidence: `srun: error: <node>: task N: Exited` (every rank of a crash prints it) and
slurmstepd's `CANCELLED ... DUE TO NODE FAILURE` (it names the batch host, not the node that
failed). The guard: when the evidence names more than `max_share` of the allocation (and more
than one node), it is a job-wide event and no one is blamed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from oellm_autoexp.core.classify.prefixes import torch_rank
from oellm_autoexp.core.classify.signals import NODE_GROUPS, Signal
from oellm_autoexp.core.decide.nameless_causes import HANG_CAUSES
from oellm_autoexp.core.decide.stack_dump_blame import unanswered
from oellm_autoexp.core.decide.straggler_blame import stragglers
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_nodes import NodeHealth, RunNodes

DEFAULT_MAX_SHARE = 0.25  # blame no one when evidence names more than this share of the allocation
NODE_FAILURE_STATES = frozenset({JobState.NODE_FAIL})  # runs of a requeued job that failed on a node
RANK_LAYOUT_PATTERN = "rank_layout"  # config/monitoring/base.yaml: `autoexp: rank layout: 8 ranks per node`


@dataclass(frozen=True)
class Blame:
    """One node to exclude and the evidence line that singles it out."""

    node: str
    evidence: str
    source: str  # log, slurm_state, sacct_duplicates


@dataclass(frozen=True)
class BlameResult:
    blamed: tuple[Blame, ...]
    withheld: str | None = None  # why nobody was blamed although evidence named nodes

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(b.node for b in self.blamed)


def blame_nodes(
    signals: Iterable[Signal],
    allocation: Sequence[str],
    unhealthy: Iterable[NodeHealth] = (),
    requeue_runs: Iterable[RunNodes] = (),
    max_share: float = DEFAULT_MAX_SHARE,
    failed_run_states: frozenset[JobState] = NODE_FAILURE_STATES,
) -> BlameResult:
    """The nodes to blame for one attempt, or none when the evidence is job-wide.

    `failed_run_states`: which earlier runs of a requeued job count as failed on a node.
    NODE_FAIL by default; on a cluster with ForceRequeueOnFail (a launch failure is requeued
    with no log) add REQUEUED when the monitor itself did not ask for the requeue.
    """
    alloc = {short_name(n): n for n in allocation}
    candidates: dict[str, Blame] = {}
    for blame in [
        *_from_signals(signals, allocation),
        *_from_slurm(unhealthy),
        *_from_requeues(requeue_runs, failed_run_states),
    ]:
        node = alloc.get(short_name(blame.node), blame.node)
        if alloc and node not in alloc.values() and blame.source != "sacct_duplicates":
            continue  # not this attempt's: another job's node, or a name we cannot map
        candidates.setdefault(node, Blame(node, blame.evidence, blame.source))
    return _guard(tuple(candidates.values()), len(alloc), max_share)


def blame_limit(allocation_size: int, max_share: float = DEFAULT_MAX_SHARE) -> int:
    """How many nodes evidence may name before it counts as job-wide (at least one)."""
    return max(1, int(allocation_size * max_share))


def _guard(candidates: tuple[Blame, ...], allocation_size: int, max_share: float) -> BlameResult:
    size = allocation_size or len(candidates)
    limit = blame_limit(allocation_size, max_share) if allocation_size else 1
    if len(candidates) <= limit:
        return BlameResult(candidates)
    share = 100.0 * len(candidates) / size
    return BlameResult(
        (),
        f"evidence names {len(candidates)} of {size} nodes ({share:.0f} % > {100 * max_share:.0f} %): "
        "a job-wide failure, no node blamed",
    )


def rank_layout(signals: Iterable[Signal]) -> int | None:
    """Ranks per node, from the rendered script's layout line (the first one), else None.

    The script prints it when it launches torchrun with a static rendezvous (backends/base.py):
    node rank = SLURM_NODEID, the node's place in the job's node list, and global rank
    r = node rank x N + local rank. So `[rank r]:` ran on node r // N of the list.
    """
    for signal in signals:
        if signal.pattern == RANK_LAYOUT_PATTERN:
            value = signal.groups.get("ranks_per_node", "")
            return int(value) if value.isdigit() and int(value) > 0 else None
    return None


def node_of_rank(rank: int, allocation: Sequence[str], ranks_per_node: int) -> str | None:
    """The node global `rank` ran on under that layout, or None when the rank is past the allocation."""
    place = rank // ranks_per_node
    return allocation[place] if 0 <= place < len(allocation) else None


def _from_signals(signals: Iterable[Signal], allocation: Sequence[str]) -> list[Blame]:
    signals = list(signals)
    layout = rank_layout(signals)
    out = []
    for signal in signals:
        names = signal.blames_node  # its pattern's `blames_node` (core/classify/signals.py)
        if names is None:
            continue
        node = _named_node(signal)
        how = ""
        if node is None and names in ("rank", "host_or_rank"):
            rank = torch_rank(signal.line, signal.groups)
            if len(allocation) == 1 and names == "host_or_rank":
                node = allocation[0]  # one node: the line can only be about it
            elif layout is not None and rank is not None:
                node = node_of_rank(rank, allocation, layout)
                how = f" (rank {rank}, {layout} ranks per node: node {rank // layout} of the allocation)"
        if node is not None:
            out.append(Blame(node, f"{_where(signal)}: {signal.line.strip()}{how}", "log"))
    return (
        out + _from_stragglers(signals, allocation, layout) + _from_stack_dumps(signals, allocation, layout)
    )


def _from_stragglers(signals: list[Signal], allocation: Sequence[str], layout: int | None) -> list[Blame]:
    """The nodes of the ranks a hung collective waited on (core/decide/straggler_blame.py).

    Only for a hang: when the log holds a root cause (a crash, an OOM, a GPU fault), the rank it
    killed leaves the same hole in the watchdog lines, and that cause (or its own blame) decides.
    """
    if layout is None or not allocation or any(_is_root(s) for s in signals):
        return []
    out = []
    for straggler in stragglers(signals, world_size=layout * len(allocation)):
        node = node_of_rank(straggler.rank, allocation, layout)
        if node is None:
            continue
        where = f"{_where(straggler.signal)}: " if straggler.signal is not None else ""
        how = f" ({layout} ranks per node: node {straggler.rank // layout} of the allocation)"
        out.append(Blame(node, f"{where}{straggler.reason}{how}", "log"))
    return out


def _from_stack_dumps(signals: list[Signal], allocation: Sequence[str], layout: int | None) -> list[Blame]:
    """The nodes of the ranks that did not answer the hang probe's stack dump
    (core/decide/stack_dump_blame.py); like the stragglers, only while no root cause is in the log."""
    if layout is None or not allocation or any(_is_root(s) for s in signals):
        return []
    out = []
    for silent in unanswered(signals, world_size=layout * len(allocation)):
        node = node_of_rank(silent.rank, allocation, layout)
        if node is not None:
            how = f" ({layout} ranks per node: node {silent.rank // layout} of the allocation)"
            out.append(Blame(node, f"{silent.reason}{how}", "log"))
    return out


def _is_root(signal: Signal) -> bool:
    """A cause of its own, a catch-all exception line too: a rank that raised and died is silent.
    A hang's own lines (the heartbeat monitor's, a timeout) are no other cause: they leave the hole."""
    return signal.role == "root" and signal.is_cause_candidate and signal.error_type not in HANG_CAUSES


def _from_slurm(unhealthy: Iterable[NodeHealth]) -> list[Blame]:
    return [Blame(h.node, h.evidence, "slurm_state") for h in unhealthy]


def _from_requeues(runs: Iterable[RunNodes], states: frozenset[JobState]) -> list[Blame]:
    failed = [r for r in runs if r.state in states]
    if not failed:
        return []
    common = set(failed[0].nodes).intersection(*(r.nodes for r in failed[1:]))
    starts = ", ".join(r.start for r in failed)
    return [
        Blame(
            node,
            f"sacct --duplicates: {node} in all {len(failed)} failed run(s) of job {failed[0].job_id} "
            f"(started {starts})",
            "sacct_duplicates",
        )
        for node in sorted(common)
    ]


def _named_node(signal: Signal) -> str | None:
    """The node the line itself names, as its pattern's `blames_node` says: a group, or NCCL's prefix."""
    if signal.blames_node == "nccl_host":
        return signal.nccl_host
    return None if signal.blames_node == "rank" else _node_of(signal.groups)


def _node_of(groups: Mapping[str, str]) -> str | None:
    for key in NODE_GROUPS:
        if groups.get(key):
            return groups[key]
    return None


def _where(signal: Signal) -> str:
    return f"{signal.source or 'log'} line {signal.line_no}"


def short_name(node: str) -> str:
    """`node12.cluster.example` and `node12` are the same node."""
    return node.split(".", 1)[0]
