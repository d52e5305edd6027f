"""Record real CPU fault logs for the classifier's fixtures.

Each scenario runs a tiny DDP training loop (gloo, 2 ranks) under
`torchrun --standalone --nproc_per_node=2` and injects one fault into one rank.
The launcher's combined stdout+stderr is what a Slurm job log would hold; it is
scrubbed of this machine's paths and host name, truncated if huge, and written to
tests/fixtures/logs/cpu/<scenario>.log.

    python scripts/gen_cpu_fault_logs.py                # every scenario
    python scripts/gen_cpu_fault_logs.py oom killed     # some of them
    python scripts/gen_cpu_fault_logs.py --out /tmp/x   # somewhere else
    python scripts/gen_cpu_fault_logs.py slurm_time_limit   # needs the localhost Slurm

The slurm_* scenarios (not run by default) submit through sbatch to the localhost
cluster and keep the job's output file, so slurmstepd's and srun's own lines are real.

The same file is the worker (`--worker SCENARIO`), so one script reproduces all.
Run one scenario at a time: each uses two processes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "fixtures" / "logs" / "cpu"
FAULT_RANK = 1
FAULT_ITERATION = 6
TRAIN_ITERS = 12
MAX_LOG_LINES = 400  # keep fixtures small; the interesting part is the tail
RDZV_PORT = 29561

# scenario -> extra torchrun arguments (before the script)
SCENARIOS: dict[str, list[str]] = {
    "healthy": [],
    "oom": [],
    "exception": [],
    "hang": [],
    "killed": [],
    "segfault": [],
    "nan_loss": [],
    "rendezvous_timeout": [],
}

# Scenarios that need the localhost Slurm cluster (scripts/slurm_local.sh): the
# ranks are started by `srun` (one task per rank), as Megatron jobs usually are.
SLURM_SCENARIOS = ("slurm_srun_killed", "slurm_time_limit", "slurm_cancelled")
SLURM_PORT = 29571


# --------------------------------------------------------------------------- worker


def _stamp() -> str:
    return dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def _inject(scenario: str, rank: int, iteration: int) -> None:
    """The fault itself, on FAULT_RANK at FAULT_ITERATION."""
    if rank != FAULT_RANK or iteration != FAULT_ITERATION:
        return
    import torch

    if scenario == "oom":
        import resource

        # A real host allocation failure: cap the address space a little above
        # what the process already maps, then ask for far more.
        with open("/proc/self/statm") as fh:
            mapped = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = mapped + (512 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        torch.empty(64 << 30, dtype=torch.uint8).fill_(1)
    elif scenario == "exception":
        raise ValueError(f"shard index {iteration * 1000} out of range for dataset with 5000 samples")
    elif scenario == "hang":
        while True:  # never reaches the next collective
            time.sleep(1)
    elif scenario in ("killed", "slurm_srun_killed"):
        os.kill(os.getpid(), 9)
    elif scenario == "segfault":
        import ctypes

        ctypes.string_at(0)


def run_worker(scenario: str) -> None:
    """A small Megatron-flavoured DDP loop that prints Megatron's progress lines."""
    import faulthandler

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    faulthandler.enable()
    if "SLURM_PROCID" in os.environ and "RANK" not in os.environ:
        os.environ.update(
            RANK=os.environ["SLURM_PROCID"],
            WORLD_SIZE=os.environ["SLURM_NTASKS"],
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(SLURM_PORT),
        )
    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234 + rank)
    model = DistributedDataParallel(torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    if rank == 0:
        print(f"> initialized gloo process group, world size {world}", flush=True)
    consumed = 0
    # "slow": every rank trains at one iteration per second until Slurm ends the job.
    train_iters = 1_000_000 if scenario == "slow" else TRAIN_ITERS
    for it in range(1, train_iters + 1):
        start = time.perf_counter()
        if scenario == "slow":
            time.sleep(1)
        _inject(scenario, rank, it)
        x = torch.randn(8, 32)
        if scenario == "nan_loss" and it >= FAULT_ITERATION:
            x[0, 0] = float("inf")
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9).item()
        opt.step()
        consumed += 8 * world
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        lm_loss = reduced.item() / world
        if rank == 0:
            ms = (time.perf_counter() - start) * 1000
            nan_iters = int(lm_loss != lm_loss)
            print(
                f" [{_stamp()}] iteration {it:8d}/{train_iters:8d} | consumed samples: {consumed:12d} |"
                f" elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.000000E-02 |"
                f" global batch size: {8 * world:5d} | lm loss: {lm_loss:.6E} | loss scale: 1.0 |"
                f" grad norm: {grad_norm:.3f} | number of skipped iterations:   0 |"
                f" number of nan iterations: {nan_iters:3d} |",
                flush=True,
            )
        if lm_loss != lm_loss or grad_norm != grad_norm:
            # What Megatron's check_for_nan_in_loss_and_grad raises.
            raise RuntimeError(
                f"Rank {rank}: found NaN in local grad norm in backward pass before data-parallel "
                f"communication collective. Device: 0, node: {socket.gethostname()}"
            )
        if it % 4 == 0:
            if rank == 0:
                print(f"saving checkpoint at iteration {it:7d} to checkpoints in torch format", flush=True)
            dist.barrier()
            if rank == 0:
                print(
                    f"  successfully saved checkpoint from iteration {it:7d} to checkpoints",
                    flush=True,
                )
    dist.destroy_process_group()
    if rank == 0:
        print("[after training is done] datetime:", _stamp(), flush=True)


# --------------------------------------------------------------------------- driver


def _torchrun_cmd(scenario: str) -> list[str]:
    script = str(Path(__file__).resolve())
    if scenario == "rendezvous_timeout":
        # Two nodes asked for, one ever arrives: the c10d rendezvous times out.
        return [
            "torchrun",
            "--nnodes=2",
            "--nproc_per_node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{RDZV_PORT}",
            "--rdzv-conf=join_timeout=10",
            script,
            "--worker",
            "healthy",
        ]
    return [
        "torchrun",
        "--standalone",
        "--nproc_per_node=2",
        script,
        "--worker",
        scenario,
    ]


def scrub(text: str) -> str:
    """Replace this machine's paths and names with neutral ones."""
    home = str(Path.home())
    replacements = [
        (str(REPO), "/home/user/oellm-autoexp"),
        (sys.prefix, "/home/user/venv"),
        (sys.base_prefix, "/home/user/venv"),
        (home, "/home/user"),
    ]
    for old, new in sorted(replacements, key=lambda p: -len(p[0])):
        if old and old != "/":
            text = text.replace(old, new)
    host = socket.gethostname()
    if host:
        text = re.sub(rf"\b{re.escape(host)}\b", "node1", text)
    return text


def truncate(text: str, max_lines: int = MAX_LOG_LINES) -> str:
    lines = text.splitlines()
    if len(lines) <= max_lines:
        return text
    head, tail = lines[:40], lines[-(max_lines - 41) :]
    cut = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[... {cut} lines truncated by gen_cpu_fault_logs.py ...]", *tail]) + "\n"


def _sbatch_script(scenario: str) -> str:
    worker = "slurm_srun_killed" if scenario == "slurm_srun_killed" else "slow"
    return (
        "#!/bin/bash\n"
        f"srun --kill-on-bad-exit=1 --ntasks=2 {sys.executable} {Path(__file__).resolve()} --worker {worker}\n"
    )


def record_slurm(scenario: str, out: Path, timeout_s: float) -> Path:
    """Submit through sbatch, wait for the end (or cancel), keep the job's output."""
    tmp = Path(tempfile.mkdtemp(prefix="autoexp-faultlog-"))
    log = tmp / "slurm.out"
    cmd = ["sbatch", "--parsable", "-N1", "-n2", f"--output={log}", f"--chdir={tmp}"]
    if scenario == "slurm_time_limit":
        cmd.append("--time=1")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    job_id = subprocess.run(
        cmd, input=_sbatch_script(scenario), capture_output=True, text=True, check=True, env=env
    ).stdout.strip()
    deadline = time.monotonic() + timeout_s
    cancelled = False
    while time.monotonic() < deadline:
        time.sleep(2)
        state = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if not state:
            break
        if (
            scenario == "slurm_cancelled"
            and not cancelled
            and log.exists()
            and " iteration " in log.read_text()
        ):
            time.sleep(3)
            subprocess.run(["scancel", job_id], check=True)
            cancelled = True
    time.sleep(2)  # slurmstepd's last lines land after squeue forgets the job
    text = log.read_text() if log.exists() else ""
    text = text.replace(str(tmp), "/home/user/run")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{scenario}.log"
    path.write_text(truncate(scrub(text)))
    print(f"{scenario}: job {job_id}, {path}")
    return path


def record(scenario: str, out: Path, timeout_s: float) -> Path:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        _torchrun_cmd(scenario),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
        cwd=REPO,
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{scenario}.log"
    path.write_text(truncate(scrub(proc.stdout)))
    print(f"{scenario}: exit {proc.returncode}, {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("scenarios", nargs="*", help=f"any of: {', '.join(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--timeout-s", type=float, default=180.0)
    parser.add_argument("--worker", metavar="SCENARIO", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(args.worker)
        return 0
    known = [*SCENARIOS, *SLURM_SCENARIOS]
    unknown = sorted(set(args.scenarios) - set(known))
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {known}")
    for scenario in args.scenarios or list(SCENARIOS):
        if scenario in SLURM_SCENARIOS:
            record_slurm(scenario, args.out, args.timeout_s)
        else:
            record(scenario, args.out, args.timeout_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
