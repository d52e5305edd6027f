"""Real torch jobs run inside Slurm jobs under torchrun/srun (CPU with gloo, GPU with NCCL).

- `train`: a tiny language model trained with DDP on synthetic data; checkpoints, resume,
  SIGUSR1/SIGTERM handling and fault injection that produces the real failure.
- `acceptance`: GPU cluster acceptance suite (GEMM, training smoke, all-reduce, DDP).
- `throughput`: synthetic-data ResNet / transformer throughput benchmark.
- `gpu_stress`: parallel allocate-and-compute workers over the visible GPUs.

Pure helpers (no torch, no I/O) live in `checkpoint_names`, `log_lines` and `metrics` so
that the unit tests run without torch. docs/workloads.md describes the command lines.
"""
