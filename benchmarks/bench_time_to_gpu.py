"""Time to first GPU: submit -> RUNNING for one strategy vs a fan-out over three, same run, same load.

Needs the strategies cluster (tests/conftest.py STRATEGY_CLUSTER; `SLURM_CONF` pointing at it):
partitions a100, h100 and a100_spill, one node of 2 GPUs each. A scripted load keeps every
partition busy with 1-GPU jobs of random length (a100 the busiest, as a user's first choice
usually is); its generator tops each partition's queue up every second, seeded, so both arms
see the same kind of cluster. Trials alternate:

- one strategy (the baseline: what `autoexp` did before, one shape to the first-choice partition
  a100): submit, poll squeue, time until RUNNING;
- fan-out over three (a100, h100, a100_spill): the same poll through the same code the monitor
  uses (one squeue for all candidates, plan/fanout_pick.py `pick`, ONE scancel for the losers);
  time until the first RUNNING. The losers' cancels are counted: never two left running.

    python benchmarks/bench_time_to_gpu.py [--quick] [--trials N]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from _common import Report, parse_args, require_slurm, save_result, scancel, summary, verdict, workdir

from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.plan.fanout_pick import pick

PARTITIONS = ("a100", "h100", "a100_spill")
# Load per partition: (queued jobs kept waiting, job length range in s). The first choice is the busiest.
LOAD = {"a100": (4, (8, 20)), "h100": (2, (4, 12)), "a100_spill": (1, (2, 8))}
POLL_S = 0.5  # the trials' poll interval (a monitor polls every poll_interval_s; 0.5 s here for both arms)
TRIAL_CAP_S = 120.0  # a trial that waits longer is recorded at the cap
SEED = 18


class Load:
    """Keeps each partition's queue topped up with 1-GPU sleep jobs (a thread; ids kept for cleanup)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.stop = tmp, threading.Event()
        self.ids: list[str] = []
        self.rng = random.Random(SEED)
        self.thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for partition, (depth, (low, high)) in LOAD.items():
                if self._pending(partition) < depth:
                    self._submit(partition, self.rng.uniform(low, high))
            self.stop.wait(1.0)

    def _pending(self, partition: str) -> int:
        out = subprocess.run(["squeue", "-h", "-p", partition, "-t", "PD", "-n", "load", "-o", "%i"],
                             capture_output=True, text=True, check=False).stdout  # fmt: skip
        return len(out.split())

    def _submit(self, partition: str, seconds: float) -> None:
        argv = ["sbatch", "--parsable", "-J", "load", "-p", partition, "--gres=gpu:1", "--time=5",
                f"--output={self.tmp}/load-%j.out", "--wrap", f"sleep {seconds:.1f}"]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            self.ids.append(done.stdout.strip().split(";")[0])


def trial(executor: SlurmExecutor, script: Path, partitions: tuple[str, ...]) -> dict[str, Any]:
    """Submit one candidate per partition; poll until one runs; cancel the rest at once."""
    started = time.monotonic()
    ids = [
        executor.submit(script, extra_args=[f"--partition={p}", "--gres=gpu:1", "--time=2"])
        for p in partitions
    ]
    while time.monotonic() - started < TRIAL_CAP_S:
        records = executor.query(ids)
        result = pick(ids, {i: r.state for i, r in records.items()})
        if result.winner is not None:
            waited = time.monotonic() - started
            executor.cancel_many(result.cancel)
            executor.cancel(result.winner)
            after = executor.query(ids)
            still = [i for i in result.cancel if after[i].state is JobState.RUNNING]
            return {
                "waited_s": waited,
                "winner": partitions[ids.index(result.winner)],
                "losers_running": len(still),
            }
        time.sleep(POLL_S)
    executor.cancel_many(ids)
    return {"waited_s": TRIAL_CAP_S, "winner": None, "losers_running": 0}


def _add_trials(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=12, help="trials per arm")


def main() -> None:
    args = parse_args(__doc__, _add_trials)
    require_slurm()
    trials = 3 if args.quick else args.trials
    report = Report()
    executor = SlurmExecutor()
    with workdir("ttfg") as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "trial.sh"
        script.write_text(f"#!/bin/bash\n#SBATCH --output={tmp}/trial-%j.out\nsleep 60\n", encoding="utf-8")
        load = Load(tmp)
        load.thread.start()
        time.sleep(5)  # the load fills the partitions first
        one: list[float] = []
        fan: list[dict[str, Any]] = []
        try:
            for index in range(trials):
                one.append(trial(executor, script, PARTITIONS[:1])["waited_s"])
                fan.append(trial(executor, script, PARTITIONS))
                report(f"trial {index + 1}: one strategy {one[-1]:6.2f} s | fan-out {fan[-1]['waited_s']:6.2f} s"
                       f" (won: {fan[-1]['winner']})")  # fmt: skip
        finally:
            load.stop.set()
            load.thread.join()
            scancel(load.ids)
    fan_s = [f["waited_s"] for f in fan]
    one_sum, fan_sum = summary(one), summary(fan_s)
    two_running = sum(f["losers_running"] for f in fan)
    met = fan_sum["p50"] < one_sum["p50"] and two_running == 0
    report(f"submit -> RUNNING, one strategy (a100):  p50 {one_sum['p50']:.2f} s  p90 {one_sum['p90']:.2f} s")
    report(f"submit -> RUNNING, fan-out over three:   p50 {fan_sum['p50']:.2f} s  p90 {fan_sum['p90']:.2f} s")
    report(f"losers still running after the cancel: {two_running}")
    report(verdict("fan-out p50 below one strategy's, never two running", met))
    winners = {p: sum(1 for f in fan if f["winner"] == p) for p in PARTITIONS}
    data = {"trials": trials, "poll_s": POLL_S, "load": {p: {"queued": d, "seconds": list(r)} for p, (d, r) in LOAD.items()},
            "one_strategy": one_sum, "fan_out": fan_sum, "fan_out_winners": winners,
            "losers_running_after_cancel": two_running, "goal": "fan-out p50 below one strategy's, never two running",
            "goal_met": met}  # fmt: skip
    save_result("time_to_gpu", args, data, report.text)


if __name__ == "__main__":
    main()
