"""Generated job logs for the replay's differential tests: every case the fast path must get right.

`synthetic_log(seed)` writes a Megatron-like log from random stretches: steady iteration
lines (stamps with 0, 3, 6 or 9 fraction digits, `[rankN]:` prefixes now and then), glog and
NCCL lines, ranks whose clocks run behind (stamps that go back), unstamped stretches, long
silences, stalls where lines keep coming but the counter stands still, checkpoint saves,
counters that go back after a reload, lines that name an iteration but are no progress, and
an end (a fatal line, or a clean exit). Some logs use CRLF, hold bad UTF-8 or lack the last
newline. The same seed gives the same bytes.
"""

from __future__ import annotations

import random
import time

T0 = 1_795_300_000.0  # 2026-11-22 ...: any fixed start
OOM = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 279.60 GiB."
TORCHRUN = (
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED "
    "rank 1 (local_rank: 1) exitcode: 1"
)


def _megatron_stamp(t: float, digits: int) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(t)))
    if digits:
        stamp += "." + f"{t - int(t):.9f}"[2 : 2 + digits]
    return stamp


def _glog_stamp(t: float) -> str:
    g = time.gmtime(int(t))
    return time.strftime("%m%d %H:%M:%S", g) + f".{int((t - int(t)) * 1e6):06d}"


class _Writer:
    def __init__(self, rng: random.Random) -> None:
        self.rng, self.t, self.it = rng, T0 + rng.random() * 3, 1
        self.lines: list[str] = []
        self.digits = rng.choice((0, 3, 6, 9))

    def iteration(self, skew_s: float = 0.0, prefix: str = "") -> None:
        stamp = _megatron_stamp(self.t - skew_s, self.digits)
        self.lines.append(
            f"{prefix} [{stamp}] iteration {self.it:>8}/    50000 | consumed samples: {self.it * 8:>10} | "
            f"elapsed time per iteration (ms): 1480.2 | lm loss: {5 - self.it * 1e-4:.6E} | loss scale: 1.0 |"
        )

    def glog(self, skew_s: float = 0.0) -> None:
        level = self.rng.choice("IWE")
        self.lines.append(f"{level}{_glog_stamp(self.t - skew_s)} 4242 torch/distributed/run.py:851] note")

    def steady(self) -> None:
        step = self.rng.choice((0.5, 1.0, 2.0, 7.5))
        skewed = self.rng.random() < 0.3
        for _ in range(self.rng.randint(5, 120)):
            self.t += step * self.rng.uniform(0.8, 1.2)
            self.it += 1
            self.iteration(prefix=self.rng.choice(("", "", "", "[rank0]:")))
            if skewed and self.rng.random() < 0.5:
                self.iteration(skew_s=self.rng.uniform(0.5, 30), prefix="[rank1]:")  # a slow clock
            roll = self.rng.random()
            if roll < 0.05:
                self.glog(skew_s=self.rng.choice((0.0, 0.0, 40.0)))
            elif roll < 0.08:
                self.lines.append('  File "train.py", line 3, in <module>')  # unstamped
            elif roll < 0.09:
                self.lines.append(f"validation loss at iteration {self.it} | lm loss value: 4.9 |")

    def stretch(self) -> None:
        kind = self.rng.choice(
            ("steady", "steady", "steady", "gap", "stall", "save", "rewind", "plain", "iso")
        )
        if kind == "steady":
            self.steady()
        elif kind == "gap":  # silence: may pass every hang limit
            self.t += self.rng.choice((5.0, 25.0, 95.0, 700.0, 2500.0)) * self.rng.uniform(0.9, 1.1)
        elif kind == "stall":  # lines keep coming, the counter stands still
            for _ in range(self.rng.randint(3, 40)):
                self.t += self.rng.uniform(1, 30)
                self.glog()
        elif kind == "save":
            self.lines.append(f"saving checkpoint at iteration {self.it:>8} to /ckpt in torch_dist format")
            self.t += self.rng.uniform(1, 120)
            self.lines.append(
                f"  successfully saved checkpoint from iteration {self.it:>8} to /ckpt [ t 1/8 ]"
            )
        elif kind == "rewind":  # a reload: the counter goes back
            self.it = max(1, self.it - self.rng.randint(1, 60))
            self.lines.append(f"  successfully loaded checkpoint from /ckpt [ t 1/8 ] at iteration {self.it}")
        elif kind == "plain":
            self.lines += [f"unstamped output {i}" for i in range(self.rng.randint(1, 40))]
        else:
            self.t += 1
            self.lines.append(
                time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(self.t))) + ".5Z INFO iso line"
            )

    def end(self) -> None:
        roll = self.rng.random()
        if roll < 0.4:
            self.lines.append(OOM)
            self.t += self.rng.uniform(0.5, 20)
            self.glog()
            self.lines.append(TORCHRUN)
        elif roll < 0.6:
            self.t += 3
            stamp = _glog_stamp(self.t)
            self.lines.append(
                f"[rank0]:[E{stamp} ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=16, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=30000) ran "
                "for 30012 milliseconds before timing out."
            )
        elif roll < 0.8:
            self.lines.append("autoexp: job step exited with status 0")


def synthetic_log(seed: int) -> bytes:
    """One generated log (see the module docstring)."""
    rng = random.Random(seed)
    writer = _Writer(rng)
    for _ in range(rng.randint(3, 25)):
        writer.stretch()
    writer.end()
    newline = "\r\n" if rng.random() < 0.15 else "\n"
    data = (newline.join(writer.lines) + newline).encode()
    if rng.random() < 0.15:
        cut = rng.randrange(len(data))
        data = data[:cut] + b"\xff\xfe" + data[cut:]  # bad UTF-8 somewhere
    if rng.random() < 0.15:
        data = data.rstrip(b"\r\n")  # no newline after the last line
    return data
