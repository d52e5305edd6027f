"""What `autoexp status` shows about allocation strategies, from the store alone.

Per attempt, the strategy that won, how long it queued, the GPU type Slurm allocated (with a
warning when it is not the one asked for), and per job the time run over all attempts
(backfill segments add up).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from oellm_autoexp.plan.segments import format_wait

if TYPE_CHECKING:
    from oellm_autoexp.adapters.store.reader import StoreReader

ATTEMPT_COLUMNS = ("job", "attempt", "strategy", "slurm_id", "queue_wait", "gpu_allocated", "note")


def attempt_strategy_rows(store: StoreReader, session_id: int) -> list[dict[str, object]]:
    """One row per attempt that went through the strategies: winner, queue wait, GPU type."""
    rows: list[dict[str, object]] = []
    won = store.won_candidates(session_id)
    if not won:
        return rows
    from oellm_autoexp.plan.strategies import gpu_type_warning, stored_strategy  # only with strategies

    names = store.job_names(session_id)
    for attempt in store.attempts_for_session(session_id):
        winner = won.get(attempt.id)
        if winner is None:
            continue
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
            "note": gpu_type_warning(stored_strategy(winner.strategy_json), allocated) or "",
        })  # fmt: skip
    return rows


def elapsed_lines(store: StoreReader, session_id: int, now: datetime) -> list[str]:
    """Per job with more than one attempt: the time run over all of them (segments add up)."""
    elapsed = store.elapsed_by_job(session_id, now)
    lines = []
    for job_id, name in store.job_names(session_id).items():
        attempts, total = elapsed.get(job_id, (0, 0.0))
        if attempts > 1:
            lines.append(f"{name}: {format_wait(total)} elapsed over {attempts} attempts")
    return lines
