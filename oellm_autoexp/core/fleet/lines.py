"""One fault as the monitor would read it: timed log lines and what Slurm says. No I/O.

An attempt's log before the fault: the script's rank layout line (several nodes), the
checkpoint load and a run of Megatron iteration
lines every `step_s` (so the progress tracker knows the step interval), or, for a fault at
start-up (a recurring error, a node still broken), only the load. Then the variant's lines,
each on the ranks that print it (`repeat`: the peers' cascade), and Slurm's end state at
its time, or a job that stays RUNNING and silent (a hang) until its wall-clock limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from oellm_autoexp.core.fleet.mix import Variant
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.replay.log_end import LogEnd, parse_end_state
from oellm_autoexp.core.replay.replay import SlurmView

PRELUDE_STEPS = 30  # iteration lines before the fault: the tracker learns the step interval from them
STARTUP_FAULT_S = 120.0  # a fault at start-up strikes this long after the job started running
WALLTIME_S = 48 * 3600.0  # a hung job is ended by its time limit (TIMEOUT) this long after the fault
JOB_ID = "7000001"
FAULTY_LOCAL_RANK = 5  # the faulty rank's place on its node (the allocation's first node)
PEER_RANK = 17  # the first peer rank; repeats count up from here
# What the rendered script prints before the launch (core/templates/sbatch.sh.j2, several nodes).
LAYOUT = "autoexp: rank layout: {n} ranks per node (node rank = SLURM_NODEID)"

LOADED = "successfully loaded checkpoint from /checkpoints [ t 1/8, p 1/16 ] at iteration 12000"
ITERATION = (
    "[2026-11-23 08:32:38.004485] iteration {i:>8}/ 2000000 | consumed samples: {s:>12} | "
    "elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.500000E-04 | global batch size:  4096 | "
    "lm loss: 2.103456E+00 | loss scale: 1.0 | grad norm: 0.412 | number of skipped iterations:   0 | "
    "number of nan iterations:   0 |"
)


@dataclass(frozen=True)
class Names:
    """The attempt's names the lines use: the faulty node, a peer, the allocation."""

    node: str
    peer: str
    allocation: tuple[str, ...]


def names_for(nodes: int) -> Names:
    """Canonical node names for an allocation of `nodes` nodes (nid000000, ...)."""
    allocation = tuple(f"nid{i:06d}" for i in range(max(nodes, 1)))
    return Names(allocation[0], allocation[-1], allocation)


@dataclass(frozen=True)
class SeenFault:
    """The lines of one fault with their times, Slurm's view, and when the fault struck."""

    lines: tuple[str, ...]
    times_s: tuple[float, ...]
    slurm: SlurmView
    fault_at_s: float


def render(
    variant: Variant,
    names: Names,
    *,
    step_s: float,
    at_startup: bool,
    phase_s: float,
    ranks_per_node: int = 8,
    layout_line: bool = False,
    nccl_debug: bool = False,
) -> SeenFault:
    """The log the monitor reads for one fault of this variant (see the module docstring).

    `layout_line`: the log starts with our script's rank layout line (upstream's script has none).
    `nccl_debug`: the job runs with NCCL_DEBUG=WARN (our multi-node script), so NCCL's own lines
    (`nccl_debug: true` in the variant) are in the log.
    """
    timed: list[tuple[float, str]] = [(0.0, LOADED)]
    if layout_line and len(names.allocation) > 1:
        timed.insert(0, (0.0, LAYOUT.format(n=ranks_per_node)))
    faulty_rank = FAULTY_LOCAL_RANK % ranks_per_node  # on node 0 of the allocation: `names.node`
    if at_startup:
        fault_at = STARTUP_FAULT_S + phase_s
    else:
        for k in range(PRELUDE_STEPS):
            timed.append(
                ((k + 1) * step_s, ITERATION.format(i=12001 + k, s=(12001 + k) * 4096, ms=step_s * 1000))
            )
        fault_at = PRELUDE_STEPS * step_s + phase_s
    for spec in variant.lines:
        if (spec.nccl_debug and not nccl_debug) or (at_startup and not spec.at_startup) or spec.after_probe:
            continue
        peers = _all_peers(len(names.allocation), ranks_per_node, faulty_rank) if spec.all_peers else None
        for prank in peers if peers is not None else range(PEER_RANK, PEER_RANK + spec.repeat):
            text = _fill(spec.text, {"node": names.node, "peer": names.peer, "job": JOB_ID,
                                     "rank": str(faulty_rank), "prank": str(prank),
                                     "task": "0", "ptask": str(len(names.allocation) - 1)})  # fmt: skip
            timed.append((fault_at + spec.after_s, text))
    timed.sort(key=lambda item: item[0])  # stable: lines of one time keep their order
    if variant.hangs:
        end_at = fault_at + WALLTIME_S
        end: LogEnd = LogEnd(JobState.TIMEOUT, None, "the wall-clock limit of a hung job")
    else:
        end_at = fault_at + variant.end_after_s
        end = parse_end_state(variant.end)
    end_at = max(end_at, timed[-1][0])
    return SeenFault(
        lines=tuple(t for _, t in timed),
        times_s=tuple(at for at, _ in timed),
        slurm=SlurmView(running_at_s=0.0, end_at_s=end_at, end=end),
        fault_at_s=fault_at,
    )


def probe_answers(
    variant: Variant, names: Names, *, at_startup: bool, within_s: float, ranks_per_node: int = 8
) -> tuple[str, ...]:
    """The lines the ranks print within `within_s` of the monitor's stack-dump probe (`after_probe`)."""
    faulty_rank = FAULTY_LOCAL_RANK % ranks_per_node
    timed: list[tuple[float, str]] = []
    for spec in variant.lines:
        if not spec.after_probe or (at_startup and not spec.at_startup) or spec.after_s > within_s:
            continue
        peers = _all_peers(len(names.allocation), ranks_per_node, faulty_rank) if spec.all_peers else None
        for prank in peers if peers is not None else range(PEER_RANK, PEER_RANK + spec.repeat):
            timed.append((spec.after_s, _fill(spec.text, {"node": names.node, "rank": str(faulty_rank),
                                                          "prank": str(prank)})))  # fmt: skip
    timed.sort(key=lambda item: item[0])
    return tuple(t for _, t in timed)


def _all_peers(nodes: int, ranks_per_node: int, faulty_rank: int) -> range | list[int]:
    """Every rank but the faulty node's (node 0: ranks 0..N-1); on one node, every rank but the faulty one."""
    if nodes > 1:
        return range(ranks_per_node, nodes * ranks_per_node)
    return [r for r in range(ranks_per_node) if r != faulty_rank]


def _fill(text: str, values: dict[str, str]) -> str:
    """`{name}` placeholders filled; other braces (a quoted Rust error's `{ code: 28 }`) left alone."""
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text
