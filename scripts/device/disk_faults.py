#!/usr/bin/env python3
"""Checkpoint faults made from outside a run, for the device scenarios.

    python3 scripts/device/disk_faults.py damage PATH        # same length, wrong bytes
    python3 scripts/device/disk_faults.py fill DIR LEAVE     # leave LEAVE bytes free on DIR's filesystem

`damage` writes 1 KiB of garbage at offset 64 of PATH, or of every file under the folder PATH
except torch.distributed.checkpoint's `.metadata` and Megatron's `metadata.json` (so the check
before a resubmission, which reads those, still passes it): the load fails, the size is unchanged.
`fill` writes one filler file (`.filler`) into DIR so that LEAVE bytes stay free (a full quota or
a neighbour's data): the next save that needs more fails with ENOSPC.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

GARBAGE = bytes(range(256)) * 4
KEPT = {".metadata", "metadata.json"}


def damage(path: Path) -> list[Path]:
    files = (
        [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and p.name not in KEPT)
    )
    for file in files:
        size = file.stat().st_size
        with file.open("r+b") as handle:
            handle.seek(min(64, size // 2))
            handle.write(GARBAGE[: max(size - handle.tell(), 0)])
        assert file.stat().st_size == size, file
    return files


def fill(folder: Path, leave: int) -> int:
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    size = max(free - leave, 0)
    with (folder / ".filler").open("wb") as handle:
        chunk = b"\0" * (1 << 20)
        for _ in range(size >> 20):
            handle.write(chunk)
        handle.write(b"\0" * (size & ((1 << 20) - 1)))
    return size


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "damage":
        print(" ".join(str(p) for p in damage(Path(argv[2]))))
        return 0
    if len(argv) == 4 and argv[1] == "fill":
        print(fill(Path(argv[2]), int(argv[3])))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
