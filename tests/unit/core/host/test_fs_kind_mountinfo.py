"""Parsing /proc/self/mountinfo and deciding inotify vs polling: literal mount lines, no I/O."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.host.fs_kind import (
    Mount,
    WatchMode,
    choose_watch_mode,
    mount_for,
    parse_mountinfo,
    parse_mountinfo_line,
)

# Real-world lines, one per filesystem kind a cluster login node shows.
MOUNTINFO = """\
22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro
25 22 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=65895500k,mode=755
26 22 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
30 26 0:26 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw
41 22 253:2 / /scratch/local rw,noatime shared:30 - xfs /dev/mapper/vg-scratch rw,attr2,inode64,noquota
60 22 0:50 / /home rw,relatime shared:40 - nfs4 nas01:/export/home rw,vers=4.2,rsize=1048576,hard,proto=tcp
61 22 0:51 / /lustre/scratch rw,relatime shared:41 - lustre 10.0.0.1@o2ib:/scratch rw,flock,lazystatfs
62 22 0:52 / /gpfs/projects rw,relatime shared:42 - gpfs projects rw
63 22 0:53 / /mnt/beegfs rw,relatime shared:43 - beegfs beegfs_nodev rw,cfgFile=/etc/beegfs/beegfs-client.conf
64 22 0:54 / /mnt/win rw,relatime shared:44 - cifs //fs/share rw,vers=3.1.1
65 22 0:55 / /mnt/sshfs rw,nosuid,nodev,relatime shared:45 - fuse.sshfs user@host:/data rw,user_id=1000
66 22 0:56 / /var/lib/docker/overlay2/abc/merged rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
67 22 0:57 / /mnt/with\\040space rw,relatime shared:46 - ext4 /dev/vdb1 rw
68 60 0:58 / /home/alice/logs rw,relatime shared:47 - tmpfs tmpfs rw
"""

MOUNTS = parse_mountinfo(MOUNTINFO)


@pytest.mark.parametrize(
    ("path", "fs_type", "mode"),
    [
        ("/home/alice/run/slurm-1.out", "nfs4", WatchMode.POLL),
        ("/lustre/scratch/u/logs/train.log", "lustre", WatchMode.POLL),
        ("/gpfs/projects/p1/log.txt", "gpfs", WatchMode.POLL),
        ("/mnt/beegfs/x.log", "beegfs", WatchMode.POLL),
        ("/mnt/win/x.log", "cifs", WatchMode.POLL),
        ("/mnt/sshfs/x.log", "fuse.sshfs", WatchMode.POLL),
        ("/tmp/pytest/x.log", "ext4", WatchMode.INOTIFY),
        ("/scratch/local/job/x.log", "xfs", WatchMode.INOTIFY),
        ("/dev/shm/x.log", "tmpfs", WatchMode.INOTIFY),
        ("/var/lib/docker/overlay2/abc/merged/app/x.log", "overlay", WatchMode.INOTIFY),
        ("/mnt/with space/x.log", "ext4", WatchMode.INOTIFY),
        ("/home/alice/logs/x.log", "tmpfs", WatchMode.INOTIFY),
    ],
)
def test_path_to_fs_type_to_mode(path: str, fs_type: str, mode: WatchMode) -> None:
    """The longest mount point holding the path decides; only local filesystems get inotify."""
    mount = mount_for(path, MOUNTS)
    assert mount is not None
    assert mount.fs_type == fs_type
    assert choose_watch_mode(WatchMode.AUTO, mount.fs_type) is mode


def test_mount_point_prefix_is_matched_by_path_component() -> None:
    """/homework is not under /home: the prefix must end at a path separator."""
    mount = mount_for("/homework/x.log", MOUNTS)
    assert mount is not None and mount.fs_type == "ext4"


def test_a_later_mount_on_the_same_point_hides_the_earlier_one() -> None:
    """Mounting over a mount point: the last line in the table is what the path sees."""
    mounts = parse_mountinfo(
        "22 1 252:1 / / rw - ext4 /dev/vda1 rw\n"
        "70 22 0:60 / /data rw - ext4 /dev/vdc1 rw\n"
        "71 70 0:61 / /data rw - nfs srv:/data rw\n"
    )
    mount = mount_for("/data/x", mounts)
    assert mount is not None and mount.fs_type == "nfs"


def test_optional_fields_and_escapes_are_parsed() -> None:
    """Any number of optional fields precede the '-' separator; \\040 is a space."""
    line = "67 22 0:57 / /mnt/a\\040b rw,relatime shared:46 master:3 propagate_from:2 - nfs4 srv:/x\\040y rw"
    assert parse_mountinfo_line(line) == Mount(mount_point="/mnt/a b", fs_type="nfs4", source="srv:/x y")


@pytest.mark.parametrize("line", ["", "garbage", "1 2 3 - ext4", "1 2 3:4 / /x rw - ext4"])
def test_malformed_lines_are_skipped(line: str) -> None:
    """A line without the separator or without fstype and source is not a mount."""
    assert parse_mountinfo_line(line) is None


@pytest.mark.parametrize(
    ("setting", "fs_type", "mode"),
    [
        ("poll", "ext4", WatchMode.POLL),
        ("inotify", "nfs4", WatchMode.INOTIFY),
        ("auto", None, WatchMode.INOTIFY),
        ("auto", "some_new_cluster_fs", WatchMode.POLL),
        ("auto", "9p", WatchMode.POLL),
        ("auto", "virtiofs", WatchMode.POLL),
    ],
)
def test_explicit_setting_wins_and_unknown_filesystems_are_polled(
    setting: str, fs_type: str | None, mode: WatchMode
) -> None:
    """An explicit mode always wins; auto polls any filesystem not known to be local."""
    assert choose_watch_mode(setting, fs_type) is mode


def test_unknown_setting_is_rejected() -> None:
    """A typo in `mode:` is an error, not a silent default."""
    with pytest.raises(ValueError):
        choose_watch_mode("inotfy", "ext4")
