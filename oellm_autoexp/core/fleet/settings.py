"""Every tunable of the fleet simulation, in one place, with where each default comes from. No I/O.

Published figures carry their source; the rest are judgements (marked J) that
docs/simulate.md lists and the CLI can change. Times are seconds unless the name says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oellm_autoexp.errors import UserError

DAY_S = 86400.0
HOUR_S = 3600.0


class Human(BaseModel):
    """The person who answers a page, and the one who looks in twice a day when nobody pages."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    day_response_min: float = Field(default=30.0, ge=0)  # J: working hours, paged
    night_response_min: float = Field(default=240.0, ge=0)  # J: a page at night waits for the morning
    weekend_response_min: float = Field(default=480.0, ge=0)  # J
    day_start_h: float = Field(default=8.0, ge=0, le=24)
    day_end_h: float = Field(default=20.0, ge=0, le=24)
    fix_min: float = Field(default=120.0, ge=0)  # J: a bug or config error fixed and resubmitted
    checks_h: tuple[float, ...] = (8.0, 20.0)  # the issue: with no supervisor, a human checks twice a day


class SimSettings(BaseModel):
    """One simulated job and its cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: int = Field(default=16384, ge=1)
    gpus_per_node: int = Field(default=8, ge=1)
    days: float = Field(default=30.0, gt=0)
    seed: int = 1
    # Checkpointing: every `checkpoint_min` of training, a blocking save of `save_s`.
    checkpoint_min: float = Field(default=30.0, gt=0)
    save_s: float = Field(default=51.06, ge=0)  # ByteCheckpoint 405B save (llama3.yaml)
    load_s: float = Field(default=129.49, ge=0)  # ByteCheckpoint 405B load
    startup_s: float = Field(default=768.0, ge=0)  # ByteRobust Table 7: requeue on 16,384 GPUs
    # Queue wait after a resubmission: lognormal (J: no published distribution for large jobs on a
    # shared Slurm cluster; Lablup's median retry interval is 11 min).
    queue_median_s: float = Field(default=600.0, ge=0)
    queue_sigma: float = Field(default=1.0, ge=0)
    queue_max_s: float = Field(default=6 * HOUR_S, ge=0)
    # The cluster: the job gets gpus / gpus_per_node of pool_factor times as many nodes, so a node
    # left in the pool is in the next allocation with probability 1 / pool_factor. Llama 3: up to
    # 16K of a 24K-GPU cluster (1.5).
    pool_factor: float = Field(default=1.5, ge=1)
    # Node heterogeneity (InfiniteHBD trace: the worst 10 % of servers carry 41 % of faults;
    # 31 % of faults start within 7 days of the same node's previous one): a broken node is a
    # lemon with this chance and stays bad for `lemon_days`; others are repaired after a
    # lognormal time (InfiniteHBD node-down: median 20.4 h, p90 309 h -> sigma 2.12).
    lemon_share: float = Field(default=0.3, ge=0, le=1)
    lemon_days: float = Field(default=14.0, ge=0)
    # A lemon fails intermittently: an attempt that gets it fails at start-up with this chance
    # (a node broken for good, before its repair, fails every attempt) (J).
    lemon_strike_p: float = Field(default=0.3, ge=0, le=1)
    repair_median_h: float = Field(default=20.4, ge=0)
    repair_sigma: float = Field(default=2.12, ge=0)
    # The site's own health checks (NHC in the epilog, Meta's 5-minute checks) drain a broken node
    # before the next attempt with this chance; the rest stay in the pool until repaired (J).
    site_drains_p: float = Field(default=0.5, ge=0, le=1)
    # Correlated bursts (InfiniteHBD: 105 of 583 inter-arrivals under 15 min): the next fault
    # follows within minutes with this chance.
    burst_p: float = Field(default=0.18, ge=0, lt=1)
    burst_gap_s: float = Field(default=300.0, gt=0)
    # The monitor's node exclusions (core/decide/exclusions.py): they end when the node is seen
    # repaired (a repair ends at the fault's `bad_for_s`; a lemon the site never drained is never
    # seen repaired), at the latest after `exclusion_ttl_h` (DEFAULT_EXCLUSION_TTL), and take at
    # most `exclusion_spare_share` of the pool's spare nodes (DEFAULT_SPARE_SHARE). False: the
    # rule before #29, a fixed expiry and no cap.
    exclusion_ttl_h: float = Field(default=168.0, gt=0)
    exclusion_until_repaired: bool = True
    exclusion_spare_share: float = Field(default=0.5, ge=0, le=1)
    step_s: float = Field(default=10.0, gt=0)  # one training iteration (the log's cadence)
    upstream_poll_s: float = Field(default=60.0, gt=0)  # upstream's monitor loop (monitor/loop.py)
    # The pre-flight check (core/fleet/preflight.py): seconds it adds to every attempt of ours
    # (0: off; its budget is 60 s on 1,000 nodes, docs/preflight.md) and the families it catches
    # on a broken node before training starts.
    preflight_s: float = Field(default=0.0, ge=0)
    preflight_catches: tuple[str, ...] = ("gpu_hw",)
    # ... only on the attempts after a failure that may be a node's and named none (config
    # `preflight.on_suspicion`, core/decide/suspicion.py), and within `suspicion_h` of it.
    preflight_on_suspicion: bool = False
    suspicion_h: float = Field(default=24.0, ge=0)
    human: Human = Field(default_factory=Human)

    @property
    def nodes(self) -> int:
        return max(1, self.gpus // self.gpus_per_node)

    @property
    def horizon_s(self) -> float:
        return self.days * DAY_S

    @property
    def checkpoint_s(self) -> float:
        return self.checkpoint_min * 60.0

    @property
    def restart_s(self) -> float:
        """Start-up after the queue: launch, init and checkpoint load."""
        return self.startup_s + self.load_s

    @property
    def pool_nodes(self) -> int:
        """The partition the job's nodes come from: pool_factor times as many."""
        return max(self.nodes, round(self.nodes * self.pool_factor))

    @property
    def same_node_p(self) -> float:
        """The chance a node left in the pool is in the next allocation."""
        return 1.0 / self.pool_factor


def settings_from(defaults: Mapping[str, Any], overrides: Mapping[str, Any], source: str) -> SimSettings:
    """The mix's published setting, then the caller's overrides; UserError names the bad key."""
    data = {**defaults, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return SimSettings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{source}: settings.{where}: {first['msg']}") from None
