"""A checkpoint save that failed for want of disk: name the disk and stop. No I/O.

megatron-core's writer does not always say "No space left on device": with torch's zip writer
a full filesystem shows as `unexpected pos N vs M` or `PytorchStreamWriter failed writing
file`. Judged on its cause alone that is an exception, and a restart writes into the same full
disk again. So a storage cause (subsystem `storage`: patterns `storage_full`,
`checkpoint_write_failed`) stops the run with the checkpoint directory's free space in the
reason, read by statvfs (adapters/fs/disk_space.py) when the attempt is judged, and says what
to free. Before a resubmission a warning says when the free space is below the last
checkpoint's size: the next save would not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from oellm_autoexp.core.classify.signals import Signal

STORAGE_SUBSYSTEM = "storage"
RULE = "checkpoint_disk_full"  # the Decision's rule for a save that failed for want of disk
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


@dataclass(frozen=True)
class DiskSpace:
    """The filesystem a checkpoint directory lives on, as statvfs tells it."""

    directory: str  # the checkpoint directory
    free_bytes: int  # available to an unprivileged user (f_bavail)
    total_bytes: int  # the filesystem's size
    last_checkpoint_bytes: int | None = None  # the newest checkpoint's size on disk (None: none yet)

    def describe(self) -> str:
        return (
            f"{self.directory} has {format_bytes(self.free_bytes)} free of {format_bytes(self.total_bytes)}"
        )


def format_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; whole numbers without decimals ('0 B', '2 MiB')."""
    value, unit = float(n), _UNITS[0]
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"


def is_save_failure(cause: Signal | None) -> bool:
    """Did the attempt end because its filesystem refused a write (full, over quota, short write)?"""
    return cause is not None and cause.subsystem == STORAGE_SUBSYSTEM


def save_failed_reason(disk: DiskSpace | None, cause: Signal) -> str:
    """The stop's reason: the disk, its free space, the line, and what to free."""
    line = cause.line.strip()
    if disk is None:
        return (
            f"checkpoint save failed ({line}); the checkpoint directory's free space could not be "
            "read: free space there (or over quota: see your quota) before resuming"
        )
    need = (
        f"at least {format_bytes(disk.last_checkpoint_bytes)} (the last checkpoint's size)"
        if disk.last_checkpoint_bytes
        else "space"
    )
    quota = (
        " (statvfs shows the filesystem, not a quota: check your quota too)" if disk.free_bytes > 0 else ""
    )
    return (
        f"checkpoint save failed: {disk.describe()}{quota} ({line}); not restarting into the same "
        f"disk: free {need} in {disk.directory} (old checkpoints, failed_iter_* copies) or point the "
        "checkpoint directory elsewhere, then resume"
    )


def space_warning(disk: DiskSpace) -> str | None:
    """Before a resubmission: the next save will not fit (free space below the last checkpoint)."""
    last = disk.last_checkpoint_bytes
    if last is None or disk.free_bytes >= last:
        return None
    return (
        f"warning: {disk.describe()}, less than the last checkpoint ({format_bytes(last)}): "
        "the next save will fail unless space is freed"
    )
