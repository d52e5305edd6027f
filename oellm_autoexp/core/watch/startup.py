"""How long an attempt may take to reach its first iteration, learned from the job's own past. No I/O.

A fixed start-up limit (`HangConfig.startup_timeout_s`, 1 h) must cover the slowest start any
job may have: launch, NCCL init on thousands of ranks, a checkpoint load from a busy parallel
filesystem. A restart of a job whose start-up takes 15 minutes, landed on a node that hangs
silently, is then found only after the hour. The job itself says what its start-up costs: each
earlier attempt that reached its first iteration measured it (attempt start -> first iteration
line). `startup_limit` turns those measurements into this attempt's limit:

    min(startup_timeout_s, max(startup_floor_s, startup_factor x the slowest of the job's last
        STARTUP_SAMPLES start-ups))

- The slowest of the last few, not a median: a limit that is too short kills a healthy start,
  one that is too long only delays finding a hang; the recent ones because a start-up drifts
  (a growing checkpoint, another node count).
- `startup_timeout_s` stays the ceiling (a user's limit is never raised) and is the limit of a
  job's first attempt, which has nothing to learn from.
- A learned limit is not trusted twice in a row: when the job's latest attempt started and never
  reached its first iteration (a start-up hang, or a crash before it), this one gets
  `startup_timeout_s`. A job's first attempt starts cold (no checkpoint to load), so a restart that
  loads a large checkpoint slowly may need more than the factor allows; without this rule every
  restart of such a job would be judged hung at the same short limit until its budget ran out.
  With it, a wrong limit costs one attempt, and the next one's start-up is learned from.

The monitor (daemon/startup.py, from the attempts table), `autoexp replay --session` and the
fleet simulation (core/fleet/autoexp_policy.py) all call this one function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oellm_autoexp.core.watch.progress import HangConfig, StartupLimit

STARTUP_SAMPLES = 5  # how many of the job's latest start-ups the limit looks at


@dataclass(frozen=True)
class Startup:
    """One earlier attempt's start-up: from its start to its first iteration line."""

    duration_s: float | None  # None: it started and never reached its first iteration


def startup_limit(earlier: Sequence[Startup], config: HangConfig) -> StartupLimit:
    """This attempt's start-up limit from the job's earlier attempts' start-ups (oldest first)."""
    ceiling = config.startup_timeout_s
    if earlier and earlier[-1].duration_s is None:
        return StartupLimit(
            ceiling, "startup_timeout_s; the job's last attempt never reached its first iteration"
        )
    measured = [s.duration_s for s in earlier if s.duration_s is not None and s.duration_s >= 0]
    if not measured:
        return StartupLimit(
            ceiling, "startup_timeout_s; no earlier attempt of this job reached its first iteration"
        )
    slowest = max(measured[-STARTUP_SAMPLES:])
    scaled = config.startup_factor * slowest
    learned = f"{config.startup_factor:g} x this job's slowest start-up of {slowest:.0f}s"
    if max(scaled, config.startup_floor_s) >= ceiling:  # a floor at or above the ceiling: learning is off
        return StartupLimit(ceiling, f"startup_timeout_s; {learned} is {scaled:.0f}s")
    if scaled < config.startup_floor_s:
        return StartupLimit(config.startup_floor_s, f"floor; {learned} is {scaled:.0f}s", learned=True)
    return StartupLimit(scaled, learned, learned=True)


def configured(config: HangConfig) -> StartupLimit:
    """The configured limit alone (a first attempt, or a caller that knows no history)."""
    return startup_limit((), config)
