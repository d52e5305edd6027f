"""Play a recorded log back as a live job would print it: each line after its recorded gap.

    python play_log.py LOG [--speed X] [--until N] [--then block|exit:N] [--after FILE PLAYED]

Gaps come from the lines' own stamps (glog/NCCL `W1122 04:21:03.468000`, Megatron
`[2026-11-22 04:21:02]`); a line without one follows the previous line at once. `--speed`
divides every gap. After line `--until` (default: the last) the job either blocks, as a
survivor of a dead rank does inside NCCL (`block`), or exits with a code. `--after FILE
PLAYED`: when FILE exists (a later attempt) play PLAYED instead and exit 0. A test helper:
it stands in for a real multi-GPU job whose timing the log recorded.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from pathlib import Path

_GLOG = re.compile(r"[IWEF](\d{4}) (\d\d:\d\d:\d\d\.\d+)")
_MEGATRON = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]")


def stamp(line: str) -> float | None:
    """Seconds of the line's own time stamp (year-less glog stamps get a fixed year), or None."""
    m = _GLOG.search(line)
    if m:
        return datetime.strptime(f"2026{m.group(1)} {m.group(2)[:15]}", "%Y%m%d %H:%M:%S.%f").timestamp()
    m = _MEGATRON.search(line)
    if m:
        return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
    return None


def play(lines: list[str], speed: float) -> None:
    last: float | None = None
    for line in lines:
        at = stamp(line)
        if at is not None and last is not None and at > last:
            time.sleep((at - last) / speed)
        last = at if at is not None else last
        print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("log", type=Path)
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--until", type=int, default=0)
    parser.add_argument("--then", default="exit:1")
    parser.add_argument("--after", nargs=2, type=Path)
    args = parser.parse_args()
    if args.after and args.after[0].exists():
        play(args.after[1].read_text().splitlines(), args.speed)
        return 0
    if args.after:
        args.after[0].touch()
    lines = args.log.read_text(errors="replace").splitlines()
    play(lines[: args.until or len(lines)], args.speed)
    if args.then == "block":
        time.sleep(3600)
    return int(args.then.partition(":")[2] or 0)


if __name__ == "__main__":
    sys.exit(main())
