"""Node exclusions: a blamed node kept off a job's next attempts until it expires. Pure.

An exclusion carries the evidence that put it there and an expiry (default 24 h: a node
is usually repaired or drained by then, and a permanent list would slowly starve a job).
`to_record`/`from_record` give the flat shape a store row or `autoexp status` uses. The
same active list goes into the next attempt's `sbatch --exclude` and, for a successor
already queued, into `scontrol update JobId=<id> ExcNodeList=<nodes>` (Slurm 22.05 rejects
`ExcludeNodeList=`: "Update of this parameter is not supported"; it replaces the job's whole
list, so the command carries every node, the configured ones too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # an annotation only: `autoexp status` reads exclusions without the classifier
    from oellm_autoexp.core.decide.node_blame import Blame

DEFAULT_EXCLUSION_TTL = timedelta(hours=24)


@dataclass(frozen=True)
class Exclusion:
    """One node excluded from one job's attempts, with why and until when."""

    job: str  # the job's name (its key in the store), not a Slurm id: it spans attempts
    node: str
    evidence: str
    source: str  # log, slurm_state, sacct_duplicates
    created_at: datetime
    expires_at: datetime

    def is_active(self, now: datetime) -> bool:
        return now < self.expires_at

    def to_record(self) -> dict[str, Any]:
        """The store-facing shape: flat, ISO-8601 times."""
        return {
            "job": self.job,
            "node": self.node,
            "evidence": self.evidence,
            "source": self.source,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Exclusion:
        return cls(
            job=str(record["job"]),
            node=str(record["node"]),
            evidence=str(record["evidence"]),
            source=str(record["source"]),
            created_at=datetime.fromisoformat(str(record["created_at"])),
            expires_at=datetime.fromisoformat(str(record["expires_at"])),
        )


def exclusions_from_blame(
    job: str, blamed: Iterable[Blame], now: datetime, ttl: timedelta = DEFAULT_EXCLUSION_TTL
) -> list[Exclusion]:
    return [Exclusion(job, b.node, b.evidence, b.source, now, now + ttl) for b in blamed]


def merge_exclusions(
    existing: Iterable[Exclusion], new: Iterable[Exclusion], now: datetime
) -> list[Exclusion]:
    """Expired ones dropped; a node blamed again keeps its newest evidence and the later expiry."""
    merged: dict[tuple[str, str], Exclusion] = {}
    for item in (e for e in [*existing, *new] if e.is_active(now)):
        kept = merged.get((item.job, item.node))
        if kept is None:
            merged[(item.job, item.node)] = item
            continue
        newer, older = (item, kept) if item.created_at >= kept.created_at else (kept, item)
        merged[(item.job, item.node)] = replace(newer, expires_at=max(newer.expires_at, older.expires_at))
    return sorted(merged.values(), key=lambda e: (e.job, e.node))


def active_nodes(exclusions: Iterable[Exclusion], job: str, now: datetime) -> tuple[str, ...]:
    """The nodes excluded for `job` now, sorted."""
    return tuple(sorted({e.node for e in exclusions if e.job == job and e.is_active(now)}))


def exclude_list(configured: str | None, excluded: Iterable[str]) -> str | None:
    """The `--exclude` value: the experiment's own list plus the active exclusions, no duplicates."""
    items = [n for n in (configured or "").split(",") if n.strip()]
    items += [n for n in excluded if n not in items]
    return ",".join(items) or None


def scontrol_exclude_command(job_id: str, nodes: str) -> list[str]:
    """argv to set a PENDING job's excluded nodes (the whole list: it replaces, not adds)."""
    if not job_id or not nodes:
        raise ValueError("scontrol_exclude_command needs a job id and at least one node")
    return ["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={nodes}"]


def describe(exclusion: Exclusion, now: datetime) -> str:
    """One line for `autoexp status`: node, time left, evidence."""
    left = max(exclusion.expires_at - now, timedelta(0))
    hours, minutes = divmod(int(left.total_seconds()) // 60, 60)
    return f"{exclusion.node} excluded for {hours} h {minutes:02d} min more: {exclusion.evidence}"
