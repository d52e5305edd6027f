"""The job the latency benchmarks run: healthy Megatron lines, then a fatal line or silence.

    python _fake_job.py MODE BASE_S STAGGER_S

Trial index i comes from $BENCH_TRIAL (`a07` -> 7); the job waits i * STAGGER_S, prints
three healthy iteration lines, waits BASE_S (hang: waits BASE_S before them), then:

  nccl-timeout  prints an NCCL watchdog timeout line, then sleeps (the monitor cancels it)
  nccl-exit     prints an NCCL "remote process exited" error, then exits 1
  nccl-exit-N   the same, exiting N seconds after the error (torch jobs: 30-80 s)
  nccl-stay     the same error, then the process never exits (survivors blocked in a collective)
  hang          prints nothing more and sleeps (a silent hang)
  by-trial      a -> nccl-timeout, b -> nccl-exit, c -> nccl-exit-30, d -> nccl-exit-90,
                s -> nccl-stay, h -> hang (first letter of $BENCH_TRIAL)

The line that matters carries `[bench t=<time.time()>]` taken just before it was written
(hang: the last healthy line carries it). A second attempt (the replacement the monitor
submits; a marker file in $AUTOEXP_OUTPUT_DIR tells) exits 0 at once.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

BY_LETTER = {"a": "nccl-timeout", "b": "nccl-exit", "c": "nccl-exit-30", "d": "nccl-exit-90",
             "s": "nccl-stay", "h": "hang"}  # fmt: skip
SLEEP_AFTER_S = 300.0
ITERATION = (
    " [{stamp}] iteration {it:>8}/  500000 | consumed samples: {samples:>12} | elapsed time per "
    "iteration (ms): 1482.3 | learning rate: 2.999812E-04 | global batch size:  1024 | lm loss: "
    "1.873001E+00 | loss scale: 1.0 | grad norm: 0.412 | number of skipped iterations:   0 | "
    "number of nan iterations:   0 |"
)
NCCL_TIMEOUT = (
    "[rank0]:[E1122 00:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1190233, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600017 milliseconds before timing out."
)
NCCL_EXIT = (
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: "
    "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a "
    "network error, NCCL version 2.21.5"
)


def say(line: str, stamped: bool = False) -> None:
    suffix = f" [bench t={time.time():.6f}]" if stamped else ""
    print(line + suffix, flush=True)


def iteration(it: int, stamped: bool = False) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    say(ITERATION.format(stamp=stamp, it=it, samples=it * 1024), stamped)


def main() -> int:
    mode, base_s, stagger_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    trial = os.environ.get("BENCH_TRIAL", "x0")
    if mode == "by-trial":
        mode = BY_LETTER[trial[0]]
    marker = Path(os.environ["AUTOEXP_OUTPUT_DIR"]) / ".fired"
    if marker.exists():
        say("replacement attempt: nothing to do, exiting 0")
        return 0
    marker.touch()
    index = int(re.sub(r"\D", "", trial) or 0)
    time.sleep(index * stagger_s + (base_s if mode == "hang" else 0.0))
    for it in range(1, 4):
        iteration(it, stamped=(mode == "hang" and it == 3))
        time.sleep(0.2)
    if mode == "hang":
        time.sleep(SLEEP_AFTER_S)
        return 0
    time.sleep(base_s)
    if mode == "nccl-timeout":
        say(NCCL_TIMEOUT, stamped=True)
        time.sleep(SLEEP_AFTER_S)
        return 0
    say(NCCL_EXIT, stamped=True)
    if mode == "nccl-stay":
        time.sleep(SLEEP_AFTER_S)
        return 0
    time.sleep(float(mode.rsplit("-", 1)[1]) if mode[-1].isdigit() else 0.0)
    return 1


if __name__ == "__main__":
    sys.exit(main())
