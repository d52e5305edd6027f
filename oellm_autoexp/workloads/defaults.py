"""Every tunable constant of the workloads in one place."""

from __future__ import annotations

# Exit codes of `python -m oellm_autoexp.workloads.train`.
EXIT_COMPLETED = 0  # all --steps done, final checkpoint written
EXIT_USAGE = 2  # argparse: bad command line
# A stop asked for by SIGUSR1/SIGTERM: a checkpoint at the stop step is complete on disk,
# the run is NOT finished and should be resubmitted (sysexits' EX_TEMPFAIL, "try again").
# An uncaught exception (crash, OOM, NaN abort, collective timeout) exits 1 (Python's
# default); SIGKILL and SIGSEGV end the process with the signal itself (-9 / -11).
EXIT_STOPPED_BY_SIGNAL = 75

# torch.distributed's default process-group timeout is 10 minutes; NCCL's watchdog
# then waits about 60 s more for its debug dump before the process dies.
DEFAULT_PG_TIMEOUT_S = 600.0

# Checkpoint files: iter_0000020.pt, written as iter_0000020.pt.tmp then renamed.
CHECKPOINT_PREFIX = "iter_"
CHECKPOINT_SUFFIX = ".pt"
CHECKPOINT_DIGITS = 7  # Megatron's iter_%07d
TMP_SUFFIX = ".tmp"
# Megatron's tracker file; informational here: resume scans for the newest complete file.
TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
DEFAULT_KEEP_LAST = 3  # checkpoints kept on disk; 0 keeps all

# Fault injection: a CPU "OOM" caps the address space at the current size plus this margin
# (room for the traceback), then asks for FAULT_OOM_CPU_BYTES.
FAULT_OOM_CPU_MARGIN_BYTES = 256 * 2**20
FAULT_OOM_CPU_BYTES = 64 * 2**30
# A GPU OOM asks for this many times the card's total memory in one allocation.
FAULT_OOM_GPU_FACTOR = 2

# Acceptance suite thresholds (a healthy A100 gives ~280 dense bf16 TFLOP/s, an H200 ~750).
DEFAULT_MIN_GEMM_TFLOPS = 50.0
DEFAULT_GEMM_SIZE = 8192
DEFAULT_ALLREDUCE_MB_GPU = 256
DEFAULT_ALLREDUCE_MB_CPU = 8
TRAIN_SMOKE_MIN_DROP = 0.5  # final loss must be below this fraction of the first

# gpu_stress: seconds a worker may take to start (spawn imports torch) and to end.
STRESS_START_GRACE_S = 120.0
STRESS_JOIN_TIMEOUT_S = 10.0
