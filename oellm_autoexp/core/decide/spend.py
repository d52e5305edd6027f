"""What a job has spent across all its attempts (GPU-hours, wall-hours), and whether a budget
is used up. Pure: sacct text in, figures and a reason out.

The adapter runs, for every Slurm id the job has had (one sacct call):
`sacct --allocations --duplicates --noheader --parsable2 --format SPEND_SACCT_FORMAT -j ID1,ID2,...`
`--duplicates` lists every run of a requeued id (each run spent its allocation); a running
attempt's ElapsedRaw is its time so far, so the check works before a resubmission and during
a run. GPUs come from AllocTRES (`gres/gpu=4`); where the cluster does not account GPUs
(`gres/gpu` missing from AccountingStorageTRES, as on the localhost cluster) the caller passes
the GPUs per node the job asked for, and nodes x that is used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_parse import SEP

SPEND_SACCT_FIELDS = ("JobID", "State", "ElapsedRaw", "NNodes", "AllocTRES", "Start")
SPEND_SACCT_FORMAT = ",".join(SPEND_SACCT_FIELDS)
_TYPED_GPU = re.compile(r"^gres/gpu:[^=]+$")


@dataclass(frozen=True)
class AttemptUsage:
    """One run of one Slurm id: how long it held how much."""

    job_id: str
    state: str
    elapsed_s: int
    nodes: int
    gpus: int | None  # from AllocTRES; None when the cluster does not account GPUs
    start: str


@dataclass(frozen=True)
class SpendLimits:
    """restart.max_gpu_hours / restart.max_wall_hours (None: no limit)."""

    max_gpu_hours: float | None = None
    max_wall_hours: float | None = None


@dataclass(frozen=True)
class Spend:
    gpu_hours: float
    wall_hours: float
    node_hours: float
    attempts: int


def parse_usage(text: str) -> list[AttemptUsage]:
    """Allocation lines of `sacct ... --format SPEND_SACCT_FORMAT` (step lines are skipped)."""
    out = []
    for line in (raw.strip() for raw in text.splitlines()):
        parts = line.split(SEP)
        if len(parts) < len(SPEND_SACCT_FIELDS) or "." in parts[0]:
            continue
        job_id, state, elapsed, nnodes, tres, start = parts[: len(SPEND_SACCT_FIELDS)]
        tres_map = parse_tres(tres)
        nodes = _int(nnodes) or _int(tres_map.get("node", "")) or 0
        out.append(AttemptUsage(job_id, state, _int(elapsed) or 0, nodes, gpus_of(tres_map), start))
    return out


def parse_tres(text: str) -> dict[str, str]:
    """`billing=2,cpu=2,gres/gpu=4,mem=200M,node=2` -> {'billing': '2', ...}."""
    pairs = (item.partition("=") for item in text.strip().split(",") if "=" in item)
    return {key: value for key, _, value in pairs}


def gpus_of(tres: dict[str, str]) -> int | None:
    """The GPU count: untyped `gres/gpu`, else the sum of typed `gres/gpu:<type>` entries."""
    if "gres/gpu" in tres:
        return _int(tres["gres/gpu"])
    typed = [_int(v) or 0 for k, v in tres.items() if _TYPED_GPU.match(k)]
    return sum(typed) if typed else None


def total_spend(attempts: Sequence[AttemptUsage], gpus_per_node: int | None = None) -> Spend:
    """Sums over every attempt: GPUs x elapsed, elapsed, nodes x elapsed (hours)."""
    gpu_s = sum(_gpus(a, gpus_per_node) * a.elapsed_s for a in attempts)
    wall_s = sum(a.elapsed_s for a in attempts)
    node_s = sum(a.nodes * a.elapsed_s for a in attempts)
    return Spend(gpu_s / 3600, wall_s / 3600, node_s / 3600, len(attempts))


def spend_reason(
    limits: SpendLimits, attempts: Iterable[AttemptUsage], gpus_per_node: int | None = None
) -> str | None:
    """Why to stop (a budget is used up, with the figures), or None while within budget."""
    return budget_reason(limits, total_spend(list(attempts), gpus_per_node))


def budget_reason(limits: SpendLimits, spend: Spend) -> str | None:
    """Why to stop, for figures already summed (the restart policy gets them this way)."""
    over = f"over {spend.attempts} attempt{'s' if spend.attempts != 1 else ''}"
    if limits.max_gpu_hours is not None and spend.gpu_hours >= limits.max_gpu_hours:
        return f"GPU-hour budget spent: {_hours(spend.gpu_hours)} of {limits.max_gpu_hours:g} GPU-h {over}"
    if limits.max_wall_hours is not None and spend.wall_hours >= limits.max_wall_hours:
        return f"wall-hour budget spent: {_hours(spend.wall_hours)} of {limits.max_wall_hours:g} h {over}"
    return None


def _gpus(attempt: AttemptUsage, gpus_per_node: int | None) -> int:
    if attempt.gpus is not None:
        return attempt.gpus
    return attempt.nodes * (gpus_per_node or 0)


def _hours(value: float) -> str:
    """812.4, 2.5, 0.0333: one decimal for big figures, three significant digits for small ones."""
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


class AttemptTimes(Protocol):
    """What the spend needs of an attempt the monitor recorded (the store's AttemptInfo has it)."""

    @property
    def executor_job_id(self) -> str | None: ...
    @property
    def state(self) -> JobState: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def ended_at(self) -> datetime | None: ...
    @property
    def nodes(self) -> tuple[str, ...]: ...


def usage_from_attempts(attempts: Iterable[AttemptTimes], now: datetime) -> list[AttemptUsage]:
    """Each started attempt's usage from the monitor's own record (start, end or `now`, nodes)."""
    out = []
    for a in attempts:
        if a.started_at is None:
            continue
        end = a.ended_at or now
        elapsed = max(int((end - a.started_at).total_seconds()), 0)
        start = a.started_at.astimezone(UTC).isoformat(timespec="seconds")
        out.append(
            AttemptUsage(a.executor_job_id or "", a.state.value, elapsed, max(len(a.nodes), 1), None, start)
        )
    return out
