"""The monitor's own knobs, read from the `monitoring:` section next to its patterns.

A monitoring group (config/monitoring/*.yaml) holds signal patterns (`include`,
`patterns`) and, optionally, these settings; `split_monitoring` separates the
two so each is validated by its own model. `MonitoringSection` is the two together:
the type of `monitoring:` in the JSON Schema (config/schema.py).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator
from pydantic.fields import FieldInfo

from oellm_autoexp.config.notifications import NotificationSettings
from oellm_autoexp.core.classify.signals import PatternSet
from oellm_autoexp.core.watch.progress import HangConfig
from oellm_autoexp.errors import UserError

DEFAULT_PATTERNS = "megatron_production"


class SupervisorSlurmSettings(BaseModel):
    """The monitor's own Slurm job (`supervisor: slurm`; plan/monitor_job.py, docs/supervision.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.,-]+$")
    qos: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")  # e.g. a site's "workflow" QOS
    account: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    time_min: int = Field(default=24 * 60, ge=2)  # each monitor job's time limit; its successor goes on
    # USR1 this long before the time limit: the monitor stops cleanly and the queued successor starts.
    # Slurm checks limits every 30 s, so less than a minute may come late.
    handover_margin_s: int = Field(default=120, ge=30)
    mem: str | None = Field(default="1G", pattern=r"^[0-9]+[KMGT]?$")
    # `autoexp scrontab`: how often the entry checks that a monitor job is queued or running.
    scrontab_every_min: int = Field(default=10, ge=1, le=59)

    @model_validator(mode="after")
    def _margin_inside_the_limit(self) -> SupervisorSlurmSettings:
        if self.handover_margin_s >= self.time_min * 60:
            raise ValueError(
                f"handover_margin_s ({self.handover_margin_s}) must be shorter than time_min ({self.time_min} min)"
            )
        return self


class MonitorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # One squeue (and at most one sacct) per poll for all live jobs of all sessions.
    # Default: 10 s on Slurm, 1 s for the local executor (a few file reads).
    poll_interval_s: float | None = Field(default=None, gt=0)
    # A job neither squeue nor sacct knows stays UNKNOWN this long before it counts
    # as lost (sacct lags ~5 s here, minutes on busy clusters).
    unknown_deadline_s: float = Field(default=600.0, gt=0)
    # auto: inotify, but polling on NFS/Lustre/GPFS/BeeGFS where inotify sees nothing.
    log_watch: Literal["auto", "inotify", "poll"] = "auto"
    log_poll_interval_s: float = Field(default=2.0, gt=0)  # how often a polled log is read (log_watch poll)
    # Safety net: re-read every watched log this often, whatever inotify said.
    rescan_interval_s: float = Field(default=30.0, gt=0)
    # The session lock's heartbeat; a lock older than lock_stale_after_s is free.
    heartbeat_interval_s: float = Field(default=10.0, gt=0)
    lock_stale_after_s: float = Field(default=120.0, gt=0)  # a lock whose heartbeat is older is free
    # A failed sbatch (controller down) is retried after this long; it never spends budget.
    submit_retry_s: float = Field(default=30.0, gt=0)
    # Alerts (webhooks) on restarts, stops, completion...: config/notifications.py.
    notifications: NotificationSettings = Field(default_factory=NotificationSettings)
    # Hang detection (no output / no progress); null turns it off.
    hang: HangConfig | None = Field(default_factory=HangConfig)
    # A fatal line ends the attempt even while Slurm says RUNNING (NCCL peers of a dead rank
    # block for the whole collective timeout). Judge this long after the first one, so the
    # burst of sibling lines (the dead rank's traceback, the launcher's summary) is read.
    fatal_settle_s: float = Field(default=5.0, ge=0)
    # The job's launcher restarts workers in place (torchrun --max-restarts > 0, ft_launcher):
    # a fatal line then opens a recovery window instead; null: ask the backend.
    in_job_restarts: bool | None = None
    # An exit 0 before the last iteration (Megatron's signal handler, --exit-interval) is a save
    # mid-run and is resumed; true when stopping early is this experiment's intended end.
    early_exit_is_end: bool = False
    # With in-job restarts: how long the iteration counter has to pass its old best.
    recovery_window_s: float = Field(default=900.0, gt=0)
    # The same while no iteration was seen yet (startup: at 1,000 nodes it can be silent for
    # 10 minutes); null: recovery_window_s.
    recovery_window_startup_s: float | None = Field(default=None, gt=0)
    # A node blamed for a failure (core/decide/node_blame.py) stays off the job's attempts until
    # Slurm shows it repaired (a down/drain period that ended after the blame), this long at most
    # (7 days: core/decide/exclusions.py DEFAULT_EXCLUSION_TTL, docs/simulate_defaults.md).
    exclusion_ttl_s: float = Field(default=7 * 86400.0, gt=0)
    # The share of the nodes the job's partition can spare it (its nodes minus the job's) that its
    # exclusions may take; past it the oldest are lifted (DEFAULT_SPARE_SHARE).
    exclusion_spare_share: float = Field(default=0.5, ge=0, le=1)
    # Where the monitor runs: "login" (the default: a process where autoexp was started, or
    # detached there) or "slurm" (a one-CPU Slurm job that hands over to its successor;
    # docs/supervision.md says which to choose where).
    supervisor: Literal["login", "slurm"] = "login"
    # The monitor's own Slurm job when `supervisor: slurm`: partition, QOS, account, time limit, hand-over.
    supervisor_slurm: SupervisorSlurmSettings = Field(default_factory=SupervisorSlurmSettings)


_SETTING_KEYS = frozenset(MonitorSettings.model_fields)

_PATTERN_KEYS = {
    "include": "pattern files (monitoring/<name>.yaml, or a path) whose patterns come first",
    "disable": "pattern names dropped after merging",
    "patterns": "signal patterns; one with an included pattern's name replaces it",
    "catalogs": "message catalogs (monitoring/catalogs/<name>.yaml) whose patterns follow the file's own",
    "vocabulary": (
        "the word model (monitoring/<name>.json) a FAILED attempt no pattern explains is guessed from; "
        "false: no guess"
    ),
}


def _described(field: FieldInfo, name: str) -> FieldInfo:
    described = copy.copy(field)
    described.description = field.description or _PATTERN_KEYS.get(name)
    return described


# `monitoring:` as a whole: the settings above and a pattern file's keys (core/classify/signals.py
# PatternSet: include, disable, patterns), each validated by its own model at run time.
MonitoringSection = create_model(
    "MonitoringSection",
    __base__=MonitorSettings,
    __doc__="The monitor's settings and its signal patterns (a pattern file's keys: include, disable, patterns).",
    **{name: (field.annotation, _described(field, name)) for name, field in PatternSet.model_fields.items()},  # type: ignore[call-overload]
)


def split_monitoring(section: Mapping[str, Any], source: str) -> tuple[MonitorSettings, dict[str, Any]]:
    """(settings, the pattern part) of a composed `monitoring:` section.

    A pattern part that names no `include` and no `patterns` of its own (empty, or only
    `disable:`, `catalogs:`, `vocabulary:`) modifies the default pattern set: `vocabulary: false`
    alone turns the guess off, it does not drop every pattern.
    """
    settings_part = {k: v for k, v in section.items() if k in _SETTING_KEYS}
    patterns_part = {k: v for k, v in section.items() if k not in _SETTING_KEYS}
    try:
        settings = MonitorSettings.model_validate(settings_part)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{source}: monitoring.{where}: {first['msg']}") from exc
    if "include" not in patterns_part and "patterns" not in patterns_part:
        patterns_part = {"include": [DEFAULT_PATTERNS], **patterns_part}
    return settings, patterns_part


DEFAULT_POLL_S = {"slurm": 10.0, "local": 1.0}


def poll_interval_s(settings: MonitorSettings, executor: str) -> float:
    return settings.poll_interval_s or DEFAULT_POLL_S.get(executor, 10.0)
