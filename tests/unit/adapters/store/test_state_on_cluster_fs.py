"""R6: the state store on cluster filesystems. WAL only where it is safe (from mountinfo
fixtures: no NFS mount can be made on this machine), and no writing from a second host while a
monitor on another host holds a session."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store import open_checks as store_open
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.host.fs_kind import sqlite_journal_mode
from oellm_autoexp.daemon.session_lock import refuse_if_monitored_elsewhere
from oellm_autoexp.errors import UserError

CLUSTER_FS = ["nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "fuse.sshfs", "someunknownfs"]


@pytest.mark.parametrize("fs_type", CLUSTER_FS)
def test_shared_or_unknown_filesystems_get_the_rollback_journal(fs_type: str) -> None:
    """NFS, Lustre, GPFS, BeeGFS, CIFS, FUSE and any type not known to be local: DELETE, never WAL."""
    assert sqlite_journal_mode(fs_type) == "DELETE"


@pytest.mark.parametrize("fs_type", ["ext4", "xfs", "btrfs", "tmpfs", "overlay", None])
def test_local_filesystems_keep_wal(fs_type: str | None) -> None:
    """Local disks keep WAL (readers never block the monitor); no mount table (not Linux) too."""
    assert sqlite_journal_mode(fs_type) == "WAL"


def mountinfo_placing(tmp_path: Path, fs_type: str) -> Path:
    """A mount table in which tmp_path is a mount of type `fs_type` (and / is ext4)."""
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
        f"60 22 0:50 / {os.path.realpath(tmp_path)} rw,relatime shared:40 - {fs_type} srv:/export rw\n",
        encoding="utf-8",
    )
    return table


@pytest.mark.parametrize(("fs_type", "mode"), [("nfs4", "delete"), ("lustre", "delete"), ("ext4", "wal")])
def test_store_opens_with_the_journal_mode_of_its_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fs_type: str, mode: str
) -> None:
    """A store whose state dir the mount table places on NFS/Lustre is written with a rollback
    journal (the file's journal_mode is delete, no -wal/-shm left); on ext4 it is WAL."""
    monkeypatch.setattr(store_open, "MOUNTINFO", mountinfo_placing(tmp_path, fs_type))
    state = tmp_path / "state"
    with SQLiteStore(state) as store:
        store.create_session("s", config_path="e.yaml", config={}, now=datetime.now(UTC))
        assert store.journal_mode == mode.upper()
    with sqlite3.connect(state / "autoexp.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == mode


def held(tmp_path: Path, host: str, heartbeat_age_s: float) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "state")
    now = datetime.now(UTC)
    store.create_session("s", config_path="e.yaml", config={}, now=now)
    then = now - timedelta(seconds=heartbeat_age_s)
    assert store.acquire_monitor_lock(1, pid=4242, host=host, now=then, stale_after_s=600)
    return store


def test_writer_on_a_second_host_is_refused_naming_the_monitor_host(tmp_path: Path) -> None:
    """A live monitor (fresh heartbeat) on login2 holds session 1: a writer on login1 is refused
    with a message naming login2 and what to do."""
    with held(tmp_path, "login2", 5) as store, pytest.raises(UserError) as caught:
        refuse_if_monitored_elsewhere(store, datetime.now(UTC), host="login1")
    message = str(caught.value)
    assert "monitored on host login2" in message and "from login1" in message
    assert "Run this command on login2" in message


def test_writer_on_the_same_host_or_beside_a_stale_monitor_may_write(tmp_path: Path) -> None:
    """The monitor's own host may write; so may anyone once the other host's heartbeat is stale."""
    with held(tmp_path, "login2", 5) as store:
        refuse_if_monitored_elsewhere(store, datetime.now(UTC), host="login2")
    with held(tmp_path / "b", "login2", 3600) as store:
        refuse_if_monitored_elsewhere(store, datetime.now(UTC), host="login1")
