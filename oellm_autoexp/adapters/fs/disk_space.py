"""The free space of a checkpoint directory's filesystem (statvfs) and its newest checkpoint's size."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from oellm_autoexp.core.checkpoint.disk import DiskSpace
from oellm_autoexp.core.checkpoint.rollback import RunListing

Statvfs = Callable[[str], os.statvfs_result]


def disk_space(directory: Path, statvfs: Statvfs = os.statvfs) -> DiskSpace | None:
    """statvfs of `directory` (or its nearest existing parent); None when even that fails.

    `statvfs` is the boundary tests fake (a full disk without filling one).
    """
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = statvfs(str(probe))
    except OSError:
        return None
    return DiskSpace(str(directory), st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize,
                     last_checkpoint_size(directory))  # fmt: skip


def last_checkpoint_size(directory: Path) -> int | None:
    """Bytes of the newest `iter_*` checkpoint (a file, or a directory's files); None: none."""
    try:
        names = tuple(os.listdir(directory))
    except OSError:
        return None
    checkpoints = RunListing(names, None).checkpoints
    if not checkpoints:
        return None
    newest = directory / checkpoints[0][1]
    try:
        if newest.is_file():
            return newest.stat().st_size
        return sum(p.stat().st_size for p in newest.rglob("*") if p.is_file())
    except OSError:
        return None
