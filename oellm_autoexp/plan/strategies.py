"""Allocation strategies: the shapes a job may run in, and which to try first. Pure.

A strategy is one way to ask Slurm for the job's GPUs: a partition, a GPU type, nodes x GPUs per
node (every strategy of a job has the same total), a walltime, an account/QoS. They are listed
in `slurm.strategies` or derived from a cluster preset (`slurm.gpu_types`): every partition of
every type, every node count that divides the total without more GPUs per node than the type
has (a shape the hardware cannot hold is never generated).

Ranking (docs/strategies.md): the start Slurm expects (`sbatch --test-only`), then the cost
(GPU-hours x the type's rate), then the user's order. A strategy Slurm gave no estimate for is
"unknown" and ranks after every estimate; it is never shown as a made-up worst case.

Backfill fit: where a shorter `--time` starts earlier than the full one, the strategy runs in
segments of that length (plan/segments.py says how long each segment saves before its end).
No variant is pruned because another of the same cost "dominates" it: the start decides first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

# format_wait lives in segments.py: `autoexp status` needs it without this module.
from oellm_autoexp.plan.segments import format_wait as format_wait

# `sbatch --test-only` writes this on stderr (Slurm 22.05):
#   sbatch: Job 3 to start at 2026-11-23T11:27:26 using 1 processors on nodes node2 in partition h100
_TEST_ONLY = re.compile(
    r"Job \d+ to start at (?P<start>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)"
    r" using (?P<cpus>\d+) processors on nodes (?P<nodes>\S+) in partition (?P<partition>\S+)"
)


@dataclass(frozen=True)
class GpuType:
    """One GPU type of a cluster preset: its nodes' GPU count, its rate, the partitions holding it."""

    name: str
    gpus_per_node: int
    cost_per_gpu_hour: float = 1.0
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Strategy:
    """One shape to ask Slurm for. `segment_min` set: the run goes in segments of that walltime."""

    name: str
    partition: str | None
    gpu_type: str | None  # the type asked for (or, untyped, the type the partition should hand out)
    nodes: int
    gpus_per_node: int
    time_min: int
    account: str | None = None
    qos: str | None = None
    type_in_request: bool = True  # False: --gres=gpu:N, the partition picks the type
    cost_per_gpu_hour: float = 1.0
    preference: int = 0  # the user's order: lower first
    segment_min: int | None = None

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def walltime_min(self) -> int:
        """The `--time` each submission of this strategy asks for."""
        return self.segment_min or self.time_min

    @property
    def label(self) -> str:
        return f"{self.name}/seg{self.segment_min}m" if self.segment_min else self.name

    def cost(self) -> float:
        """Service units of the whole run: GPU-hours x the type's rate (segments cost the same)."""
        return self.total_gpus * self.time_min / 60.0 * self.cost_per_gpu_hour

    def sbatch_args(self) -> list[str]:
        """The sbatch options that give this shape (on the command line they win over #SBATCH lines)."""
        gres = (
            f"gpu:{self.gpu_type}:{self.gpus_per_node}"
            if self.type_in_request and self.gpu_type
            else (f"gpu:{self.gpus_per_node}")
        )
        args = [f"--nodes={self.nodes}", f"--time={self.walltime_min}"]
        if self.gpus_per_node:
            args.append(f"--gres={gres}")
        args += [f"--{key}={value}" for key, value in
                 (("partition", self.partition), ("account", self.account), ("qos", self.qos)) if value]  # fmt: skip
        return args


def stored_strategy(shape: Mapping[str, object]) -> Strategy:
    """A strategy from its stored shape (a candidate's `strategy_json`); keys it does not know are left out."""
    fields = {k: v for k, v in shape.items() if k in Strategy.__dataclass_fields__}
    return Strategy(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Estimate:
    """What `sbatch --test-only` said: the expected start, or None ("unknown") with why."""

    start: datetime | None
    partition: str | None = None
    nodes: str | None = None
    note: str = ""
    refused: bool = False  # Slurm said this shape can never run here (not submitted)

    def describe(self, now: datetime) -> str:
        if self.refused:
            return f"refused ({self.note})"
        if self.start is None:
            return f"unknown ({self.note})" if self.note else "unknown"
        wait_s = (self.start - now).total_seconds()
        # Slurm gives the start to the second: one later in this second is "now", not "in 0 s".
        return "now" if wait_s < 1 else f"in {format_wait(wait_s)}"


@dataclass(frozen=True)
class Candidate:
    """A strategy with its estimate: what ranking orders."""

    strategy: Strategy
    estimate: Estimate


def parse_test_only(text: str, tz: object = None) -> Estimate:
    """`sbatch --test-only` output -> Estimate; "unknown" when it names no start.

    The start is the controller's local time without a zone: `tz` (a tzinfo) is attached when given.
    """
    found = _TEST_ONLY.search(text)
    if found is None:
        return Estimate(None, note=test_only_note(text))
    start = datetime.fromisoformat(found["start"])
    if tz is not None:
        start = start.replace(tzinfo=tz)  # type: ignore[arg-type]
    return Estimate(start, found["partition"], found["nodes"])


NOTE_CHARS = 200  # an estimate's note is one table cell


def test_only_note(text: str) -> str:
    """What `sbatch --test-only` said, as ONE line for a table cell: its last non-empty line, without
    the `sbatch: error: ` prefixes (warnings and multi-line errors come before the reason)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "no answer"
    last = lines[-1]
    for prefix in ("sbatch: ", "error: ", "Batch job submission failed: "):
        last = last.removeprefix(prefix)
    return " ".join(last.split())[:NOTE_CHARS]


def node_shapes(total_gpus: int, max_per_node: int) -> list[tuple[int, int]]:
    """(nodes, GPUs per node) for `total_gpus`, fewest nodes first; none above `max_per_node` per node."""
    if total_gpus <= 0 or max_per_node <= 0:
        return []
    return [
        (nodes, total_gpus // nodes)
        for nodes in range(1, total_gpus + 1)
        if total_gpus % nodes == 0 and total_gpus // nodes <= max_per_node
    ]


def derive_strategies(
    types: Sequence[GpuType], total_gpus: int, time_min: int, *, account: str | None = None,
    qos: str | None = None,
) -> list[Strategy]:  # fmt: skip
    """Every (type, partition, shape) of a preset, in the preset's order, valid shapes only."""
    found: list[Strategy] = []
    for gpu in types:
        for partition in gpu.partitions or (None,):
            for nodes, per_node in node_shapes(total_gpus, gpu.gpus_per_node):
                name = f"{partition or gpu.name}-{gpu.name}-{nodes}x{per_node}"
                found.append(Strategy(name, partition, gpu.name, nodes, per_node, time_min, account, qos,
                                      cost_per_gpu_hour=gpu.cost_per_gpu_hour, preference=len(found)))  # fmt: skip
    return found


def shape_problem(strategy: Strategy, types: Mapping[str, GpuType]) -> str | None:
    """Why a listed strategy cannot run (more GPUs per node than its type has), or None."""
    gpu = types.get(strategy.gpu_type or "")
    if gpu is not None and strategy.gpus_per_node > gpu.gpus_per_node:
        return (
            f"{strategy.gpus_per_node} GPUs per node, but a {gpu.name} node has {gpu.gpus_per_node}"
            f" (use {strategy.total_gpus // gpu.gpus_per_node or 1}+ nodes)"
        )
    return None


def rank_key(candidate: Candidate) -> tuple[bool, float, float, int, int]:
    """Known starts first, earliest first; then cheaper; then the user's order; direct before segmented."""
    start = candidate.estimate.start
    strategy = candidate.strategy
    return (
        start is None,
        start.timestamp() if start is not None else 0.0,
        strategy.cost(),
        strategy.preference,
        0 if strategy.segment_min is None else 1,
    )


def rank(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Best first (rank_key); refused shapes last. Nothing else is dropped: a same-cost segmented
    variant that starts earlier ranks ahead of its direct strategy."""
    return sorted(candidates, key=lambda c: (c.estimate.refused, *rank_key(c)))


def with_segments(strategy: Strategy, segment_minutes: Iterable[int]) -> list[Strategy]:
    """The segmented variants of a strategy: each listed walltime shorter than its own."""
    return [replace(strategy, segment_min=m) for m in sorted(set(segment_minutes)) if m < strategy.time_min]


def best_per_strategy(ranked: Sequence[Candidate]) -> list[Candidate]:
    """Each strategy's best variant (direct or one segment length), in rank order.

    `ranked` is in rank order, so the first variant of each name is its best: a segmented one
    only where it starts strictly earlier (at the same start the direct run sorts first).
    """
    kept: dict[str, Candidate] = {}
    for candidate in ranked:
        kept.setdefault(candidate.strategy.name, candidate)
    return list(kept.values())


def gpu_type_warning(strategy: Strategy, allocated: Sequence[str]) -> str | None:
    """A warning when Slurm handed out another GPU type than the strategy expects, else None."""
    if not strategy.gpu_type or not allocated or strategy.gpu_type in allocated:
        return None
    where = f"partition {strategy.partition}" if strategy.partition else "the default partition"
    return (
        f"strategy {strategy.name}: asked for {strategy.gpu_type} GPUs on {where},"
        f" Slurm allocated {', '.join(allocated)}"
    )
