"""Checkpoint I/O for the training workload: atomic save, newest-complete resume.

A save writes `iter_NNNNNNN.pt.tmp`, flushes and fsyncs it, then renames it to
`iter_NNNNNNN.pt` (rename is atomic on one filesystem) and fsyncs the directory; only then
is the tracker file updated the same way. A process killed mid-save leaves a `.tmp`, which
resume ignores and the next start deletes. Naming and selection are pure, in checkpoint_names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from oellm_autoexp.workloads.checkpoint_names import (
    checkpoint_name,
    checkpoints_to_delete,
    latest_checkpoint,
    stale_temporaries,
    temporary_name,
)
from oellm_autoexp.workloads.defaults import TMP_SUFFIX, TRACKER_FILENAME


def save(ckpt_dir: Path, iteration: int, state: dict[str, Any], keep_last: int) -> Path:
    """Write `state` as the checkpoint of `iteration` atomically; prune old ones. Returns its path."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / checkpoint_name(iteration)
    tmp = ckpt_dir / temporary_name(iteration)
    with open(tmp, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, final)
    _write_atomic(ckpt_dir / TRACKER_FILENAME, f"{iteration}\n")
    _fsync_dir(ckpt_dir)
    for name in checkpoints_to_delete(os.listdir(ckpt_dir), keep_last):
        (ckpt_dir / name).unlink(missing_ok=True)
    return final


def find_latest(ckpt_dir: Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint in `ckpt_dir` as (iteration, path), or None."""
    if not ckpt_dir.is_dir():
        return None
    found = latest_checkpoint(os.listdir(ckpt_dir))
    return (found[0], ckpt_dir / found[1]) if found else None


def load(path: Path, device: torch.device) -> dict[str, Any]:
    # weights_only: the state holds tensors, numbers and strings only.
    return torch.load(path, map_location=device, weights_only=True)


def remove_stale_temporaries(ckpt_dir: Path) -> list[str]:
    """Delete `.tmp` files left by saves that were cut short; returns their names."""
    if not ckpt_dir.is_dir():
        return []
    names = stale_temporaries(os.listdir(ckpt_dir))
    for name in names:
        (ckpt_dir / name).unlink(missing_ok=True)
    return names


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
