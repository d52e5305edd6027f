"""A job's allocation strategies from its config, and each strategy's sbatch args. Pure.

`job_strategies` gives the listed strategies (unset fields from the slurm section) and, with
`allocation.derive`, every valid shape of `slurm.gpu_types`. `variants` adds each strategy's
backfill segments (plan/strategies.py ranks them all; plan/segments.py times their warning).
"""

from __future__ import annotations

from dataclasses import replace

from oellm_autoexp.config.models import SlurmConfig, StrategyConfig, run_minutes
from oellm_autoexp.plan.segments import segment_signal
from oellm_autoexp.plan.strategies import GpuType, Strategy, derive_strategies, with_segments


def has_strategies(slurm: SlurmConfig) -> bool:
    return bool(slurm.strategies) or slurm.allocation.derive


def gpu_types(slurm: SlurmConfig) -> list[GpuType]:
    return [
        GpuType(name, t.gpus_per_node, t.cost_per_gpu_hour, tuple(t.partitions))
        for name, t in slurm.gpu_types.items()
    ]


def job_strategies(slurm: SlurmConfig) -> list[Strategy]:
    """The listed strategies, then the derived ones (in the preset's order); names are unique."""
    time_min = run_minutes(slurm) or 0
    listed = [_listed(slurm, s, i, time_min) for i, s in enumerate(slurm.strategies)]
    derived: list[Strategy] = []
    if slurm.allocation.derive:
        total = slurm.nodes * slurm.gpus_per_node
        taken = {s.name for s in listed}
        derived = [s for s in derive_strategies(gpu_types(slurm), total, time_min) if s.name not in taken]
    return [*listed, *(_after(s, len(listed)) for s in derived)]


def variants(slurm: SlurmConfig, strategies: list[Strategy]) -> list[Strategy]:
    """Each strategy and its backfill segments (segments shorter than its walltime)."""
    found: list[Strategy] = []
    for strategy in strategies:
        found += [strategy, *with_segments(strategy, slurm.allocation.segment_minutes)]
    return found


def submission_args(slurm: SlurmConfig, strategy: Strategy) -> tuple[list[str], str | None]:
    """The sbatch args of one submission of `strategy`, and a warning about its save buffer.

    A segment gets the walltime signal `save_buffer_s` (at least 60 s) before its end.
    """
    args = strategy.sbatch_args()
    if strategy.segment_min is None:
        return args, None
    timing = segment_signal(strategy.segment_min, slurm.allocation.save_buffer_s)
    return [*args, f"--signal=B:{slurm.signal.name}@{timing.seconds_before}"], timing.warning


def _listed(slurm: SlurmConfig, config: StrategyConfig, index: int, time_min: int) -> Strategy:
    gpu = slurm.gpu_types.get(config.gpu_type or "")
    return Strategy(
        name=config.name or f"s{index + 1}",
        partition=config.partition,
        gpu_type=config.gpu_type,
        nodes=config.nodes or slurm.nodes,
        gpus_per_node=config.gpus_per_node or slurm.gpus_per_node,
        time_min=config.time_min or time_min,
        account=config.account,
        qos=config.qos,
        type_in_request=config.type_in_request,
        cost_per_gpu_hour=gpu.cost_per_gpu_hour if gpu else 1.0,
        preference=index,
    )


def _after(strategy: Strategy, offset: int) -> Strategy:
    return replace(strategy, preference=strategy.preference + offset)
