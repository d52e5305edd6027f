"""Which filesystem a directory lives on, read from /proc/self/mountinfo.

The parsing and the inotify-or-poll decision are pure (core/host/fs_kind.py); this
module only reads the mount table and resolves the path.
"""

from __future__ import annotations

import os
from pathlib import Path

from oellm_autoexp.core.host.fs_kind import Mount, WatchMode, choose_watch_mode, mount_for, parse_mountinfo

MOUNTINFO_PATH = Path("/proc/self/mountinfo")


def _nearest_existing(path: Path) -> Path:
    """The path itself or its closest existing ancestor: a log dir may not exist yet."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_of(path: Path, mountinfo_path: Path = MOUNTINFO_PATH) -> Mount | None:
    """The mount holding `path` (symlinks resolved); None if the table cannot be read."""
    try:
        text = mountinfo_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    real = os.path.realpath(_nearest_existing(path))
    return mount_for(real, parse_mountinfo(text))


def fs_type_of(path: Path, mountinfo_path: Path = MOUNTINFO_PATH) -> str | None:
    """The filesystem type of `path` ("ext4", "lustre"...), or None if unknown."""
    mount = mount_of(path, mountinfo_path)
    return mount.fs_type if mount else None


def watch_mode_for(path: Path, setting: WatchMode | str, mountinfo_path: Path = MOUNTINFO_PATH) -> WatchMode:
    """INOTIFY or POLL for a directory, honouring an explicit setting."""
    if WatchMode(setting) is not WatchMode.AUTO:
        return WatchMode(setting)
    return choose_watch_mode(WatchMode.AUTO, fs_type_of(path, mountinfo_path))
