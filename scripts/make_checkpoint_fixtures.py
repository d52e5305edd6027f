"""Write the small, real checkpoint trees under tests/fixtures/checkpoints/ (run once, commit them).

Each fixture is a run's checkpoint directory (tracker + two checkpoints), every one complete:
- torch_dist_run: torch.distributed.checkpoint's FileSystemWriter (one process, no process
  group), laid out as megatron-core's torch_dist (metadata.json first, common.pt, .metadata,
  __0_N.distcp);
- torch_run: megatron's legacy torch format, tp=2 pp=2 (mp_rank_TT_PPP/model_optim_rng.pt);
- workload_run: written by `python -m oellm_autoexp.workloads.train` itself.
Megatron-written trees from a GPU run go beside them as megatron_* (same shape: a run dir).

Usage: python scripts/make_checkpoint_fixtures.py [OUT_DIR]
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

ROOT = Path(__file__).resolve().parent.parent
TRACKER = "latest_checkpointed_iteration.txt"
ITERATIONS = (10, 20)


def _state(iteration: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(iteration)
    return {
        "embedding.weight": torch.randn(16, 8, generator=gen),
        "layers.0.weight": torch.randn(8, 8, generator=gen),
        "layers.1.weight": torch.randn(8, 8, generator=gen),
    }


def write_torch_dist(run: Path) -> None:
    for iteration in ITERATIONS:
        target = run / f"iter_{iteration:07d}"
        target.mkdir(parents=True)
        # megatron-core writes its backend config before the shards, common.pt beside them.
        config = {
            "sharded_backend": "torch_dist",
            "sharded_backend_version": 1,
            "common_backend": "torch",
            "common_backend_version": 1,
        }
        (target / "metadata.json").write_text(json.dumps(config))
        torch.save({"iteration": iteration, "checkpoint_version": 3.0}, target / "common.pt")
        # .metadata records the path it was written to: a relative one keeps this machine's out.
        with contextlib.chdir(run):
            writer = dcp.FileSystemWriter(target.name, single_file_per_rank=True, thread_count=2)
            dcp.save(_state(iteration), storage_writer=writer, no_dist=True)
    (run / TRACKER).write_text(str(ITERATIONS[-1]))


def write_torch(run: Path, tp: int = 2, pp: int = 2) -> None:
    for iteration in ITERATIONS:
        for t in range(tp):
            for p in range(pp):
                rank_dir = run / f"iter_{iteration:07d}" / f"mp_rank_{t:02d}_{p:03d}"
                rank_dir.mkdir(parents=True)
                state = {
                    "iteration": iteration,
                    "checkpoint_version": 3.0,
                    "model": _state(iteration + t + p),
                }
                torch.save(state, rank_dir / "model_optim_rng.pt")
    (run / TRACKER).write_text(str(ITERATIONS[-1]))


def write_workload(run: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "oellm_autoexp.workloads.train",
        "--steps",
        str(ITERATIONS[-1]),
        "--save-interval",
        str(ITERATIONS[0]),
        "--ckpt-dir",
        str(run),
        "--device",
        "cpu",
        "--hidden",
        "8",
        "--vocab",
        "16",
        "--seq-len",
        "4",
        "--micro-batch-size",
        "2",
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fixtures" / "checkpoints"
    for name, write in (
        ("torch_dist_run", write_torch_dist),
        ("torch_run", write_torch),
        ("workload_run", write_workload),
    ):
        shutil.rmtree(out / name, ignore_errors=True)
        write(out / name)
        print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
