"""Recording a cancelled stray job (core/jobs/strays.py) as a decision of the job its tag names.

Kept beside the store, not in it: a stray is recorded with the store's own
decision row (action `cancel_stray`), so no schema change is needed, and
`autoexp explain` shows it in the job's history. The row names no attempt
(attempt_id NULL; the attempt is in the evidence): a resumed monitor carries out
the last decision about an attempt, and a stray's cancel is not one about the
attempt's own job.
"""

from __future__ import annotations

from datetime import datetime

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

STRAY_ACTION = "cancel_stray"


def record_stray_cancel(
    store: SQLiteStore,
    job_id: int,
    *,
    attempt_id: int | None,
    executor_job_id: str,
    tag: str,
    reason: str,
    now: datetime,
) -> int | None:
    """The decision row's id; None if the store has no such job or this stray is already recorded."""
    if store.get_job(job_id) is None or stray_recorded(store, job_id, executor_job_id):
        return None
    evidence = {"kind": "stray", "executor_job_id": executor_job_id, "tag": tag, "attempt_id": attempt_id}
    return store.record_decision(
        job_id, attempt_id=None, action=STRAY_ACTION, reason=reason, now=now, evidence=evidence
    )


def stray_recorded(store: SQLiteStore, job_id: int, executor_job_id: str) -> bool:
    return any(
        d.action == STRAY_ACTION
        and isinstance(d.evidence, dict)
        and d.evidence.get("executor_job_id") == executor_job_id
        for d in store.decisions_for_job(job_id)
    )
