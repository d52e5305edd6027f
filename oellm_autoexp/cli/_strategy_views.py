"""What `autoexp plan --strategies` shows about allocation strategies.

The plan table is each strategy variant with Slurm's own estimate (`sbatch --test-only`), in
rank order; "unknown" where Slurm gave none. What `status` shows about them is in
_attempt_views.py (it reads the store only).
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.daemon.fanout import estimate_all
from oellm_autoexp.plan.plan import JobPlan
from oellm_autoexp.plan.strategy_plan import has_strategies

PLAN_COLUMNS = ("rank", "strategy", "partition", "gpu", "shape", "time", "cost_su", "start")


def plan_strategy_rows(plan: JobPlan, executor: SlurmExecutor) -> list[dict[str, object]]:
    """The plan's strategy variants in rank order, each with `sbatch --test-only`'s start."""
    if not has_strategies(plan.config.slurm):
        return []
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "job.sbatch"
        script.write_text(plan.script, encoding="utf-8")
        ranked = estimate_all(executor, plan, (), script)
    return [
        {"rank": index + 1, "strategy": c.strategy.label, "partition": c.strategy.partition or "-",
         "gpu": c.strategy.gpu_type or "-", "shape": f"{c.strategy.nodes}x{c.strategy.gpus_per_node}",
         "time": f"{c.strategy.walltime_min}m", "cost_su": f"{c.strategy.cost():.1f}",
         "start": c.estimate.describe(now)}
        for index, c in enumerate(ranked)
    ]  # fmt: skip
