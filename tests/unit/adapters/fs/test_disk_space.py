"""The checkpoint directory's free space (adapters/fs/disk_space.py), statvfs faked at its boundary,
and the warning before a resubmission (daemon/presubmit.py `with_space_warning`)."""

from __future__ import annotations

import os
from pathlib import Path

from oellm_autoexp.adapters.fs.disk_space import disk_space
from oellm_autoexp.daemon.presubmit import CheckpointGate, with_space_warning

MIB = 2**20


def fake_statvfs(free_blocks: int, blocks: int, frsize: int = 4096, seen: list[str] | None = None):  # type: ignore[no-untyped-def]
    def statvfs(path: str) -> os.statvfs_result:
        if seen is not None:
            seen.append(path)
        # (bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax)
        return os.statvfs_result((frsize, frsize, blocks, free_blocks, free_blocks, 0, 0, 0, 0, 255))

    return statvfs


def test_free_and_total_and_the_last_checkpoint(tmp_path: Path) -> None:
    """f_bavail and f_blocks times f_frsize; the newest iter_* file's size."""
    (tmp_path / "iter_0000010.pt").write_bytes(b"x" * 100)
    (tmp_path / "iter_0000020.pt").write_bytes(b"x" * 300)
    (tmp_path / "failed_iter_0000030.pt").write_bytes(b"x" * 900)
    disk = disk_space(tmp_path, fake_statvfs(0, 512))
    assert disk is not None
    assert (disk.free_bytes, disk.total_bytes, disk.last_checkpoint_bytes) == (0, 2 * MIB, 300)
    assert disk.describe() == f"{tmp_path} has 0 B free of 2 MiB"


def test_a_megatron_checkpoint_directory_is_summed(tmp_path: Path) -> None:
    """An iter_* directory: the sum of its files."""
    ck = tmp_path / "iter_0000020" / "mp_rank_00"
    ck.mkdir(parents=True)
    (ck / "model_optim_rng.pt").write_bytes(b"x" * 70)
    (tmp_path / "iter_0000020" / "common.pt").write_bytes(b"x" * 30)
    disk = disk_space(tmp_path, fake_statvfs(10, 10))
    assert disk is not None and disk.last_checkpoint_bytes == 100


def test_a_directory_not_made_yet_is_read_on_its_parent(tmp_path: Path) -> None:
    """Nothing saved yet: the filesystem it will be on."""
    seen: list[str] = []
    disk = disk_space(tmp_path / "a" / "b", fake_statvfs(1, 2, seen=seen))
    assert seen == [str(tmp_path)] and disk is not None and disk.last_checkpoint_bytes is None


def test_statvfs_failing_gives_none(tmp_path: Path) -> None:
    def broken(path: str) -> os.statvfs_result:
        raise OSError(5, "Input/output error")

    assert disk_space(tmp_path, broken) is None


def test_the_gate_warns_when_the_next_save_would_not_fit(tmp_path: Path) -> None:
    """Resuming with less free space than the last checkpoint: the gate's reason warns (recorded as an
    event); with room, or when the gate stops anyway, nothing is added."""
    (tmp_path / "iter_0000020.pt").write_bytes(b"x" * 8192)
    gate = CheckpointGate(str(tmp_path), resume=True)
    warned = with_space_warning(gate, fake_statvfs(1, 512))
    assert warned.resume and warned.reason is not None
    assert warned.reason.startswith(
        f"warning: {tmp_path} has 4 KiB free of 2 MiB, less than the last checkpoint (8 KiB)"
    )
    assert with_space_warning(gate, fake_statvfs(100, 512)).reason is None
    stopped = CheckpointGate(str(tmp_path), resume=False, reason="not resubmitting: x")
    assert with_space_warning(stopped, fake_statvfs(1, 512)) == stopped
