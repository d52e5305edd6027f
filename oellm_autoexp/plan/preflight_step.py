"""The pre-flight step's command line, from the experiment's `preflight:` section. Pure.

The batch script runs it before training (core/templates/sbatch.sh.j2), one task per node
with all of the node's GPUs; docs/preflight.md says what it checks and what it costs.
"""

from __future__ import annotations

import posixpath

from oellm_autoexp.config.models import PreflightConfig

MODULE = "oellm_autoexp.workloads.preflight"
RESULTS_SUBDIR = "preflight"  # under the job's output dir: shared by the nodes, one sub-dir per run


def preflight_argv(cfg: PreflightConfig, output_dir: str) -> tuple[str, ...]:
    """The step's argv; () when the pre-flight is off."""
    if not cfg.enabled:
        return ()
    argv = [
        *cfg.python,
        "-m",
        MODULE,
        "--results-root",
        posixpath.join(output_dir, RESULTS_SUBDIR),
        "--checks",
        ",".join(cfg.checks),
        "--device",
        cfg.device,
        "--relative-min",
        f"{cfg.relative_min:g}",
        "--budget-s",
        str(cfg.budget_s),
        "--gemm-size",
        str(cfg.gemm_size),
        "--gemm-iters",
        str(cfg.gemm_iters),
        "--hbm-gib",
        f"{cfg.hbm_gib:g}",
        "--allreduce-mb",
        str(cfg.allreduce_mb),
        "--pairwise-mb",
        str(cfg.pairwise_mb),
        "--min-cpu-gemm-gflops",
        f"{cfg.min_cpu_gemm_gflops:g}",
    ]
    for name, floor in sorted(cfg.min_gemm_tflops.items()):
        argv += ["--min-gemm-tflops", f"{name}={floor:g}"]
    for name, floor in sorted(cfg.min_allreduce_gbps.items()):
        argv += ["--min-allreduce-gbps", f"{name}={floor:g}"]
    return tuple(argv)
