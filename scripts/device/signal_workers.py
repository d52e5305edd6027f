"""Send a signal to the worker processes of a launcher: the leaf descendants of PID.

    python3 scripts/device/signal_workers.py PID USR1

torchrun dies of SIGUSR1 itself (no handler), so a test of the workers' SIGUSR1 handling
signals the workers directly, as Slurm does for the processes of a job step.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            continue
    return kids


def leaves(pid: int) -> list[int]:
    kids = children(pid)
    if not kids:
        return [pid]
    return [leaf for kid in kids for leaf in leaves(kid)]


def main(argv: list[str]) -> int:
    root, name = int(argv[1]), argv[2]
    sig = getattr(signal, name if name.startswith("SIG") else f"SIG{name}")
    targets = [p for p in leaves(root) if p != root]
    for pid in targets:
        os.kill(pid, sig)
    print(f"sent {sig.name} to {targets}", flush=True)
    return 0 if targets else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
