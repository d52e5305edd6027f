"""Checks on `slurm.strategies`, `slurm.gpu_types` and `slurm.allocation` (docs/strategies.md).

Every strategy asks for the same number of GPUs as the job (nodes x GPUs per node), never more
GPUs per node than its type has, and has a walltime; backfill segments need the walltime signal
(a segment must save before its end). Each problem is one sentence naming the key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oellm_autoexp.config.models import SlurmConfig, StrategyConfig


def strategy_problem(slurm: SlurmConfig) -> str | None:
    """The first thing wrong with the strategies of this slurm section, or None."""
    if not slurm.strategies and not slurm.allocation.derive:
        return None
    if run_minutes(slurm) is None:
        return (
            "slurm.allocation.time_min: strategies need the run's walltime (or slurm.sbatch.time in minutes)"
        )
    if slurm.allocation.derive and not slurm.gpu_types:
        return "slurm.allocation.derive: true needs slurm.gpu_types (GPU types, GPUs per node, partitions)"
    if slurm.allocation.segment_minutes and not slurm.signal.enabled:
        return "slurm.allocation.segment_minutes: segments save on the walltime signal; set slurm.signal.enabled: true"
    total = slurm.nodes * slurm.gpus_per_node
    for index, strategy in enumerate(slurm.strategies):
        problem = _one_problem(slurm, strategy, total)
        if problem:
            return f"slurm.strategies[{index}]: {problem}"
    return None


def _one_problem(slurm: SlurmConfig, strategy: StrategyConfig, total: int) -> str | None:
    nodes = strategy.nodes or slurm.nodes
    per_node = strategy.gpus_per_node or slurm.gpus_per_node
    if nodes * per_node != total:
        return (
            f"{nodes} nodes x {per_node} GPUs = {nodes * per_node} GPUs; every strategy asks for the job's"
            f" {total} (slurm.nodes x slurm.gpus_per_node)"
        )
    gpu = slurm.gpu_types.get(strategy.gpu_type or "")
    if gpu is not None and per_node > gpu.gpus_per_node:
        return f"{per_node} GPUs per node, but a {strategy.gpu_type} node has {gpu.gpus_per_node}"
    if strategy.gpu_type and slurm.gpu_types and gpu is None:
        return (
            f"gpu_type {strategy.gpu_type!r} is not in slurm.gpu_types ({', '.join(sorted(slurm.gpu_types))})"
        )
    return None


def run_minutes(slurm: SlurmConfig) -> int | None:
    """The run's whole walltime in minutes: allocation.time_min, else sbatch.time; None if neither."""
    return slurm.allocation.time_min or walltime_minutes(slurm.sbatch.get("time"))


def walltime_minutes(value: object) -> int | None:
    """A Slurm --time value in whole minutes (rounded up); None if it is not one.

    Forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    text = str(value).strip()
    days, _, rest = text.rpartition("-") if "-" in text else ("0", "", text)
    try:
        parts = [int(p) for p in rest.split(":")]
        day_count = int(days)
    except ValueError:
        return None
    if "-" in text:
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        hours, (minutes, seconds) = 0, [*parts, 0][:2]
    total_s = ((day_count * 24 + hours) * 60 + minutes) * 60 + seconds
    return -(-total_s // 60) if total_s > 0 and len(parts) <= 3 else None
