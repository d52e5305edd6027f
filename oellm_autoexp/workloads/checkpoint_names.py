"""Checkpoint file names and which checkpoint to resume from. Pure: names in, names out.

Only a file named exactly `iter_NNNNNNN.pt` is a complete checkpoint: it is written as
`iter_NNNNNNN.pt.tmp` and renamed, so a save cut short leaves a `.tmp` that is never read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from oellm_autoexp.workloads.defaults import (
    CHECKPOINT_DIGITS,
    CHECKPOINT_PREFIX,
    CHECKPOINT_SUFFIX,
    TMP_SUFFIX,
)

_COMPLETE = re.compile(rf"^{re.escape(CHECKPOINT_PREFIX)}(\d+){re.escape(CHECKPOINT_SUFFIX)}$")


def checkpoint_name(iteration: int) -> str:
    """The file name of the checkpoint taken after `iteration` steps (`iter_0000020.pt`)."""
    if iteration < 0:
        raise ValueError(f"iteration must be >= 0, got {iteration}")
    return f"{CHECKPOINT_PREFIX}{iteration:0{CHECKPOINT_DIGITS}d}{CHECKPOINT_SUFFIX}"


def temporary_name(iteration: int) -> str:
    """The name a checkpoint is written under before the rename that completes it."""
    return checkpoint_name(iteration) + TMP_SUFFIX


def parse_iteration(name: str) -> int | None:
    """The iteration of a complete checkpoint file name, or None for anything else."""
    match = _COMPLETE.match(name)
    return int(match.group(1)) if match else None


def complete_checkpoints(names: Iterable[str]) -> list[tuple[int, str]]:
    """(iteration, name) of every complete checkpoint among `names`, oldest first."""
    found = ((parse_iteration(name), name) for name in names)
    return sorted((it, name) for it, name in found if it is not None)


def latest_checkpoint(names: Iterable[str]) -> tuple[int, str] | None:
    """The newest complete checkpoint among `names` as (iteration, name), or None."""
    complete = complete_checkpoints(names)
    return complete[-1] if complete else None


def checkpoints_to_delete(names: Iterable[str], keep_last: int) -> list[str]:
    """Complete checkpoints older than the newest `keep_last` (0 keeps everything)."""
    complete = complete_checkpoints(names)
    if keep_last <= 0 or len(complete) <= keep_last:
        return []
    return [name for _, name in complete[:-keep_last]]


def stale_temporaries(names: Iterable[str]) -> list[str]:
    """Leftover `.tmp` files of saves that never completed (safe to delete on start)."""
    return sorted(n for n in names if n.endswith(TMP_SUFFIX) and n.startswith(CHECKPOINT_PREFIX))
