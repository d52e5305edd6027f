"""Node exclusions: a blamed node kept off a job's next attempts until it is repaired. Pure.

An exclusion carries the evidence that put it there and an upper bound (`expires_at`, default
7 days, docs/simulate_defaults.md "Exclusion until repaired").
Before that it ends when Slurm shows the node was repaired: a down/drain period
(`sacctmgr show event`, core/jobs/slurm_nodes.py NodeEvent) that ended after the exclusion was
made. And it is capped: a job's exclusions never take more than `spare_share` of the nodes its
partition can spare it (partition nodes minus the job's), so a small cluster never runs out of
nodes for its job; past the cap the oldest evidence is lifted first (`in_force`).
`to_record`/`from_record` give the flat shape a store row or `autoexp status` uses. The
same active list goes into the next attempt's `sbatch --exclude` and, for a successor
already queued, into `scontrol update JobId=<id> ExcNodeList=<nodes>` (Slurm 22.05 rejects
`ExcludeNodeList=`: "Update of this parameter is not supported"; it replaces the job's whole
list, so the command carries every node, the configured ones too).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `autoexp status` reads exclusions without the classifier
    from oellm_autoexp.core.decide.node_blame import Blame
    from oellm_autoexp.core.jobs.slurm_nodes import NodeEvent

# The upper bound when no repair is seen: a node blamed wrongly, or a lemon never drained, comes
# back after it at the latest. 7 days: the fleet simulation's ETTR stops rising there (Llama 3:
# 24 h 0.720, 72 h 0.725, 7 d 0.732, 14 d 0.732; docs/simulate_defaults.md "Exclusion until repaired").
DEFAULT_EXCLUSION_TTL = timedelta(days=7)
# The share of the spare nodes (partition minus the job's own) a job's exclusions may take: half
# leaves the other half for everyone else's drains and reservations; the simulation's job never
# needed more than 3 % of its spare nodes at once (31 of 1,024 at 16,384 GPUs, 3 of 16 at 512).
DEFAULT_SPARE_SHARE = 0.5
# Which evidence is weaker, at equal age: a node list of a failed run (sacct --duplicates) says
# least, a log line naming the node more, Slurm's own down/drain state most.
SOURCE_STRENGTH = {"sacct_duplicates": 0, "log": 1, "slurm_state": 2}


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
    """One line for `autoexp status`: node, time left at most, evidence."""
    left = max(exclusion.expires_at - now, timedelta(0))
    hours, minutes = divmod(int(left.total_seconds()) // 60, 60)
    return f"{exclusion.node} excluded until repaired, {hours} h {minutes:02d} min more at most: {exclusion.evidence}"


@dataclass(frozen=True)
class Lifted:
    """An exclusion ended before its upper bound, and why (a line for `explain`)."""

    exclusion: Exclusion
    why: str


@dataclass(frozen=True)
class InForce:
    """A job's exclusions sorted into the ones still in force and the ones lifted now."""

    kept: tuple[Exclusion, ...]
    lifted: tuple[Lifted, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(e.node for e in self.kept))


def repair_of(exclusion: Exclusion, events: Iterable[NodeEvent], now: datetime) -> NodeEvent | None:
    """The down/drain period of the node that began after the exclusion was made and ended by `now`.

    One still open (no end, or an end Slurm cannot have reported yet) is not a repair: the node is
    still out. One that ended before the exclusion was made repaired an older fault. One that began
    before it is the failure the exclusion is about (a node Slurm set DOWN under the job, blamed from
    that state): its end is the node returned to service, not a repair seen after the blame (found
    by CI: a NODE_FAIL's node resumed at once was lifted and the restart landed on it again).
    sacctmgr prints whole seconds: a start in the second the exclusion was made is the failure's own (the
    monitor judges within a second of a NODE_FAIL), an end in that second counts as after it.
    """
    made = exclusion.created_at.replace(microsecond=0)
    ended = [
        e for e in events
        if e.node == exclusion.node and e.end is not None and made < e.start and made <= e.end <= now
    ]  # fmt: skip
    return max(ended, key=lambda e: e.end or e.start) if ended else None


def spare_cap(partition_nodes: int, job_nodes: int, share: float = DEFAULT_SPARE_SHARE) -> int:
    """How many nodes a job's exclusions may take: `share` of those its partition can spare it,
    and at least one while any is spare (a 1-node job on 2 nodes must still avoid the one that
    just failed it), never more than there are: the job can always be scheduled."""
    spare = max(partition_nodes - job_nodes, 0)
    return min(spare, max(1, math.floor(share * spare + 1e-9))) if spare else 0


def in_force(
    exclusions: Iterable[Exclusion],
    events: Iterable[NodeEvent],
    now: datetime,
    *,
    job: str,
    partition_nodes: int | None,
    job_nodes: int,
    share: float = DEFAULT_SPARE_SHARE,
) -> InForce:
    """Which of `job`'s exclusions still hold at `now`, and which end now and why.

    Past its upper bound an exclusion is simply over (not "lifted"). Before it, one whose node
    Slurm shows repaired since (`repair_of`) is lifted; then, if more remain than the cap
    (`spare_cap`; `partition_nodes` None: unknown, no cap), the oldest are lifted first, the
    weaker evidence first at equal age, so that the job can always be scheduled.
    """
    active = merge_exclusions((e for e in exclusions if e.job == job), (), now)
    event_list = list(events)
    kept: list[Exclusion] = []
    lifted: list[Lifted] = []
    for item in active:
        repair = repair_of(item, event_list, now)
        if repair is None:
            kept.append(item)
        else:
            lifted.append(Lifted(item, f"{item.node} repaired: Slurm shows it {repair.describe()}"))
    if partition_nodes is None:
        return InForce(tuple(kept), tuple(lifted))
    cap = spare_cap(partition_nodes, job_nodes, share)
    order = sorted(kept, key=lambda e: (e.created_at, SOURCE_STRENGTH.get(e.source, 1), e.node))
    over = order[: max(len(order) - cap, 0)]
    spare = max(partition_nodes - job_nodes, 0)
    why = (f"the job's exclusions may take {cap} of the {spare} nodes its partition can spare it "
           f"(({partition_nodes} - {job_nodes}) x {share:g}); the oldest evidence goes first")  # fmt: skip
    lifted += [Lifted(e, f"{e.node} lifted (blamed {e.created_at:%Y-%m-%d %H:%M}): {why}") for e in over]
    return InForce(tuple(e for e in kept if e not in over), tuple(lifted))


def lift(exclusions: Iterable[Exclusion], lifted: Iterable[Lifted], now: datetime) -> list[Exclusion]:
    """The exclusions with the lifted ones ended at `now` (the store does the same to its rows)."""
    ended = {(item.exclusion.job, item.exclusion.node) for item in lifted}
    return [
        replace(e, expires_at=min(e.expires_at, now)) if (e.job, e.node) in ended else e for e in exclusions
    ]
