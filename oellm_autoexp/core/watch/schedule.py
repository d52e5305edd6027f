"""When a training loop stands still on purpose: its evaluation passes and checkpoint saves. Pure.

The monitor launched the job, so it knows the arguments that say when the loop pauses. A long
silence right after an iteration at which the loop evaluates or saves is expected (an
evaluation pass prints nothing until it ends: Megatron's default of 100 evaluation iterations
takes minutes); a long silence anywhere else, once the job's step interval is known, is not. The
hang tracker (core/watch/progress.py `progress_floor`) keeps its plain floor (15 min) for the
first kind and a shorter one (`HangConfig.scheduled_floor_s`) for the second.

Megatron's loop, after training iteration j (megatron/training/training.py `train`): the log line
when j % log_interval == 0, then an evaluation pass when j % eval_interval == 0 (and eval_iters >
0), then a save when j % save_interval == 0. A counter standing at the logged iteration i therefore
covers the pauses after iterations i .. i + stride - 1, where stride is the iterations between two
logged lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Megatron-LM's defaults (megatron/training/arguments.py) for the keys a launch may leave out:
# an evaluation pass of 100 iterations every 1000, no periodic save.
MEGATRON_DEFAULTS: dict[str, int | None] = {"eval_interval": 1000, "eval_iters": 100, "save_interval": None}
# Periodic saves: the persistent one and Megatron's local (non-persistent) one.
SAVE_KEYS = ("save_interval", "non_persistent_save_interval")


@dataclass(frozen=True)
class PauseSchedule:
    """The iterations after which the loop pauses on purpose: every multiple of one of `every`."""

    every: tuple[tuple[str, int], ...]  # (what pauses, its interval in iterations), e.g. ("evaluation", 1000)
    basis: (
        str  # where the schedule comes from, for a verdict: "megatron eval_interval=1000, save_interval=500"
    )

    def pauses_between(self, first: int, last: int) -> tuple[str, ...]:
        """What pauses after an iteration in [first, last] (empty: nothing is due there)."""
        return tuple(what for what, n in self.every if first <= last and last // n * n >= first)


def megatron_schedule(args: Mapping[str, Any]) -> PauseSchedule | None:
    """The pauses of a Megatron run launched with `args` (its `--key value` arguments, as a mapping).

    None when a value that decides a pause is not a whole number (the schedule is then unknown,
    and the hang tracker keeps its plain floor).
    """
    values = {str(k).replace("-", "_"): v for k, v in args.items()}
    every: list[tuple[str, int]] = []
    parts: list[str] = []
    eval_iters = _whole(values.get("eval_iters", MEGATRON_DEFAULTS["eval_iters"]))
    eval_interval = _whole(values.get("eval_interval", MEGATRON_DEFAULTS["eval_interval"]))
    if eval_iters is None or (eval_iters > 0 and not eval_interval):
        return None
    if eval_iters > 0 and eval_interval:
        every.append(("evaluation", eval_interval))
        parts.append(f"eval_interval={eval_interval}")
    else:
        parts.append("eval_iters=0")
    for key in SAVE_KEYS:
        raw = values.get(key, MEGATRON_DEFAULTS.get(key))
        if raw is None:
            continue
        interval = _whole(raw)
        if not interval:
            return None
        every.append(("checkpoint save", interval))
        parts.append(f"{key}={interval}")
    return PauseSchedule(tuple(every), "megatron " + ", ".join(parts))


def _whole(value: object) -> int | None:
    """A non-negative whole number from a config value (an int, or a string of digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None
