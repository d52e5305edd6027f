"""Print the pid of one training rank of a torchrun job, found by its command line and RANK.

    python3 scripts/device/rank_pid.py MARKER RANK

MARKER is a piece of the job's command line that no other job shares (e.g. `--save
ck/stop `). A rank's DataLoader workers are forks of it, with the same command line and
environment: they are skipped because their parent is the rank itself.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _parent(pid: int) -> int:
    stat = _read(Path(f"/proc/{pid}/stat")).decode(errors="replace")
    # the command name in parentheses may hold spaces: the fields after its last ')' are fixed
    return int(stat.rsplit(")", 1)[1].split()[1]) if ")" in stat else 0


def find_rank(marker: str, rank: int) -> list[int]:
    """Pids whose command line holds MARKER and whose environment says RANK=rank, minus forks."""
    wanted = f"RANK={rank}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        cmdline = _read(proc / "cmdline").replace(b"\0", b" ") + b" "
        if marker.encode() in cmdline and wanted in _read(proc / "environ").split(b"\0"):
            found.append(int(proc.name))
    return [pid for pid in found if _parent(pid) not in found]


def main(argv: list[str]) -> int:
    pids = find_rank(argv[1], int(argv[2]))
    print(" ".join(map(str, pids)))
    return 0 if len(pids) == 1 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
