"""What `autoexp plan --strategies` and `autoexp status` show about allocation strategies.

The plan table is each strategy variant with Slurm's own estimate (`sbatch --test-only`), in
rank order; "unknown" where Slurm gave none. Status shows, per attempt, the strategy that won,
how long it queued, the GPU type Slurm allocated (with a warning when it is not the one asked
for), and per job the time run over all attempts (backfill segments add up).
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.adapters.store.candidates import candidates_for_attempt
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.plan.plan import JobPlan
from oellm_autoexp.core.plan.segments import elapsed_s
from oellm_autoexp.core.plan.strategies import format_wait, gpu_type_warning
from oellm_autoexp.core.plan.strategy_plan import has_strategies
from oellm_autoexp.daemon.fanout import estimate_all, strategy_of

PLAN_COLUMNS = ("rank", "strategy", "partition", "gpu", "shape", "time", "cost_su", "start")
ATTEMPT_COLUMNS = ("job", "attempt", "strategy", "slurm_id", "queue_wait", "gpu_allocated", "note")


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


def attempt_strategy_rows(store: SQLiteStore, session_id: int) -> list[dict[str, object]]:
    """One row per attempt that went through the strategies: winner, queue wait, GPU type."""
    rows: list[dict[str, object]] = []
    names = {job.id: job.name for job in store.jobs_for_session(session_id)}
    for attempt in store.attempts_for_session(session_id):
        won = [c for c in candidates_for_attempt(store, attempt.id) if c.outcome == "won"]
        if not won:
            continue
        winner = won[0]
        waited = (
            (winner.closed_at - (winner.submitted_at or winner.intended_at)).total_seconds()
            if winner.closed_at
            else None
        )
        allocated = tuple(t for t in (winner.gpu_types or "").split(",") if t)
        rows.append({
            "job": names.get(attempt.job_id, attempt.job_id), "attempt": attempt.attempt_no,
            "strategy": winner.strategy, "slurm_id": winner.executor_job_id,
            "queue_wait": format_wait(waited) if waited is not None else "-",
            "gpu_allocated": ",".join(allocated) or "unknown",
            "note": gpu_type_warning(strategy_of(winner), allocated) or "",
        })  # fmt: skip
    return rows


def elapsed_lines(store: SQLiteStore, session_id: int) -> list[str]:
    """Per job with more than one attempt: the time run over all of them (segments add up)."""
    now = datetime.now(UTC)
    lines = []
    for job in store.jobs_for_session(session_id):
        attempts = store.attempts_for_job(job.id)
        if len(attempts) > 1:
            total = elapsed_s([(a.started_at, a.ended_at) for a in attempts], now)
            lines.append(f"{job.name}: {format_wait(total)} elapsed over {len(attempts)} attempts")
    return lines
