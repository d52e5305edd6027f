"""Which filesystem holds a path, and whether inotify can be trusted on it. No I/O.

inotify reports only the writes that go through this machine's kernel. On a
shared filesystem (NFS, Lustre, GPFS, BeeGFS, CIFS, most FUSE mounts) the job
writes its log from a compute node, so a login-node monitor using inotify sees
nothing at all. Only filesystems known to be local get inotify; everything else,
including types we have never heard of, is polled: a wrong "poll" costs a few
stat calls, a wrong "inotify" costs a blind monitor.

`parse_mountinfo` reads the text of /proc/self/mountinfo (see proc(5)):

    36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
    id parent dev root mountpoint options [optional fields...] - fstype source superoptions
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import NamedTuple


class WatchMode(StrEnum):
    AUTO = "auto"  # decide per directory from the filesystem type
    INOTIFY = "inotify"  # the kernel notifies us (watchdog's native observer)
    POLL = "poll"  # stat the files every poll interval (watchdog's PollingObserver)


# Filesystems whose every write passes through this machine's kernel.
LOCAL_FS_TYPES = frozenset(
    {
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "zfs",
        "f2fs",
        "jfs",
        "reiserfs",
        "bcachefs",
        "nilfs2",
        "tmpfs",
        "ramfs",
        "devtmpfs",
        "overlay",  # container root filesystems: upper layer is local
        "vfat",
        "exfat",
        "ntfs3",
        "hfsplus",
        "apfs",
        "squashfs",
        "iso9660",
    }
)

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


class Mount(NamedTuple):  # not a dataclass: every store open (`autoexp status` too) imports this
    """One line of /proc/self/mountinfo, reduced to what we need."""

    mount_point: str  # where it is mounted, with the kernel's octal escapes decoded
    fs_type: str  # e.g. "ext4", "nfs4", "lustre", "fuse.sshfs"
    source: str  # the device or remote export, e.g. "/dev/sda1", "mds@tcp:/scratch"


def _unescape(field: str) -> str:
    """Decode the kernel's escapes in a path field (space is written as \\040)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo_line(line: str) -> Mount | None:
    """Parse one mountinfo line; None for a blank or malformed line."""
    fields = line.split()
    if "-" not in fields:
        return None
    sep = fields.index("-")
    # Five fixed fields come before the optional ones; fstype and source follow the separator.
    if sep < 5 or len(fields) < sep + 3:
        return None
    return Mount(mount_point=_unescape(fields[4]), fs_type=fields[sep + 1], source=_unescape(fields[sep + 2]))


def parse_mountinfo(text: str) -> list[Mount]:
    """Parse the whole of /proc/self/mountinfo, in file order, skipping bad lines."""
    mounts = (parse_mountinfo_line(line) for line in text.splitlines())
    return [m for m in mounts if m is not None]


def _is_under(path: str, mount_point: str) -> bool:
    if mount_point == "/":
        return path.startswith("/")
    return path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def mount_for(path: str, mounts: Iterable[Mount]) -> Mount | None:
    """The mount that holds an absolute, symlink-free `path`.

    The longest matching mount point wins; among equal ones the last line wins,
    because a later mount on the same point hides the earlier one.
    """
    best: Mount | None = None
    for mount in mounts:
        if _is_under(path, mount.mount_point) and (
            best is None or len(mount.mount_point) >= len(best.mount_point)
        ):
            best = mount
    return best


def is_inotify_reliable(fs_type: str) -> bool:
    """True only for filesystems known to be local to this machine."""
    return fs_type in LOCAL_FS_TYPES


def choose_watch_mode(setting: WatchMode | str, fs_type: str | None) -> WatchMode:
    """Resolve a `mode: auto|inotify|poll` setting into INOTIFY or POLL.

    An explicit setting always wins. With AUTO, `fs_type` None means the mount
    table could not be read (not Linux): the platform's native observer is used.
    """
    mode = WatchMode(setting)
    if mode is not WatchMode.AUTO:
        return mode
    if fs_type is None or is_inotify_reliable(fs_type):
        return WatchMode.INOTIFY
    return WatchMode.POLL


def sqlite_journal_mode(fs_type: str | None) -> str:
    """SQLite's journal mode for a database on `fs_type`: WAL only where it is known to be safe.

    WAL keeps its index in shared memory (`-shm`), which only works among processes of one
    host; on NFS, Lustre, GPFS, BeeGFS (or any filesystem we do not know to be local) two
    login nodes on one WAL file can corrupt it or read stale data. There the classic
    rollback journal (DELETE) is used. None (no mount table: not Linux) keeps WAL.
    """
    return "WAL" if fs_type is None or is_inotify_reliable(fs_type) else "DELETE"
