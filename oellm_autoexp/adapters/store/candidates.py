"""The candidates of fanned-out attempts (table `candidates`, schema v5; daemon/fanout.py).

Kept beside the store: a candidate's intent is recorded before its sbatch (with its own tag,
as attempts are), so a monitor that died mid fan-out finds every queued candidate again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from oellm_autoexp.adapters.store.records import CandidateInfo
from oellm_autoexp.adapters.store.schema import CandidateRow, Intent
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore


def record_candidate(
    store: SQLiteStore, attempt_id: int, rank: int, label: str, shape: dict[str, Any], tag: str,
    estimate: str, *, now: datetime,
) -> int:  # fmt: skip
    """Record a candidate's intent; call BEFORE its sbatch."""
    row = CandidateRow(
        attempt_id=attempt_id, rank=rank, strategy=label, strategy_json=shape, submit_tag=tag,
        intent=Intent.INTENDED.value, estimate=estimate, intended_at=now, outcome="queued",
    )  # fmt: skip
    with store.writing() as db:
        db.add(row)
    return row.id


def confirm_candidate(store: SQLiteStore, candidate_id: int, executor_job_id: str, *, now: datetime) -> None:
    _update(
        store, candidate_id, executor_job_id=executor_job_id, intent=Intent.SUBMITTED.value, submitted_at=now
    )


def close_candidate(
    store: SQLiteStore, candidate_id: int, outcome: str, *, now: datetime, gpu_types: str | None = None
) -> None:
    """A candidate's race is over: won, cancelled (lost), out (ended unstarted) or abandoned."""
    values: dict[str, Any] = {"outcome": outcome, "closed_at": now}
    if outcome == "abandoned":
        values["intent"] = Intent.ABANDONED.value
    if gpu_types is not None:
        values["gpu_types"] = gpu_types
    _update(store, candidate_id, **values)


def set_gpu_types(store: SQLiteStore, candidate_id: int, gpu_types: str) -> None:
    _update(store, candidate_id, gpu_types=gpu_types)


def candidates_for_attempt(store: SQLiteStore, attempt_id: int) -> list[CandidateInfo]:
    stmt = select(CandidateRow).where(CandidateRow.attempt_id == attempt_id).order_by(CandidateRow.rank)
    with store.reading() as db:
        return [_info(row) for row in db.scalars(stmt)]


def _update(store: SQLiteStore, candidate_id: int, **values: Any) -> None:
    with store.writing() as db:
        db.execute(update(CandidateRow).where(CandidateRow.id == candidate_id).values(**values))


def _info(row: CandidateRow) -> CandidateInfo:
    return CandidateInfo(
        row.id, row.attempt_id, row.rank, row.strategy, dict(row.strategy_json), row.submit_tag, row.intent,
        row.executor_job_id, row.estimate, row.intended_at, row.submitted_at, row.closed_at, row.outcome,
        row.gpu_types,
    )  # fmt: skip
