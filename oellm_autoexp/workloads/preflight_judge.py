"""The pre-flight's verdict on one node, and its result lines. Pure: figures in, text out.

One node's figures (`NodeResult`) are judged against absolute floors for its GPU type and
against the allocation's median (`judge`). The lines are what the monitor's patterns and
the report read (config/monitoring/base.yaml `preflight_fail`, daemon/report_data.py):

    preflight node1: gemm 790.1 TFLOP/s, hbm ok, allreduce 310.0 GB/s, 4 gpu, 6.2 s
    preflight FAIL node2: gemm 412.0 TFLOP/s < 0.9 x median 790.1
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# The report reads these lines back with the same expressions (re-exported for the tests).
from oellm_autoexp.core.report.preflight_table import FAIL_RE as FAIL_RE
from oellm_autoexp.core.report.preflight_table import RESULT_RE as RESULT_RE
from oellm_autoexp.core.report.preflight_table import STEP_RE as STEP_RE

CPU = "cpu"  # NodeResult.gpu_name of the CPU fallback (figures in GFLOP/s)


@dataclass(frozen=True)
class NodeResult:
    """What one node measured. `gemm` is the slowest device's figure: a slow GPU drags every step."""

    node: str
    gpu_name: str  # torch's device name ("NVIDIA H100 80GB HBM3"), or CPU
    gpus: int  # devices measured (0 on the CPU fallback)
    gemm: float | None  # TFLOP/s (GFLOP/s on CPU) of the slowest device; None: not checked
    gemm_per_gpu: tuple[float, ...] = ()
    hbm_ok: bool | None = None  # None: not checked
    hbm_problem: str = ""
    allreduce_gbps: float | None = None  # intra-node bus bandwidth; None: not checked (or 1 device)
    seconds: float = 0.0
    error: str = ""  # a check that raised: the node fails with this
    pair_gbps: float | None = None  # best of its cross-node pairs (workloads/preflight_pairs.py)

    @property
    def gemm_unit(self) -> str:
        return "GFLOP/s" if self.gpu_name == CPU else "TFLOP/s"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeResult:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["gemm_per_gpu"] = tuple(known.get("gemm_per_gpu", ()))
        return cls(**known)


@dataclass(frozen=True)
class Thresholds:
    relative_min: float = 0.9
    min_gemm_tflops: Mapping[str, float] = field(default_factory=dict)  # GPU name substring -> floor
    min_allreduce_gbps: Mapping[str, float] = field(default_factory=dict)
    min_cpu_gemm_gflops: float = 0.0


def figure(value: float, decimals: int = 1) -> str:
    """`value` with `decimals` decimals; below 10^-decimals, with two significant digits.

    A figure cut below a small floor (the CPU fallback's 0.05 GFLOP/s) printed "0.0" both when it
    passed and when it failed it: the log could not say how close it was.
    """
    if value == 0 or not math.isfinite(value) or abs(value) >= 10**-decimals:
        return f"{value:.{decimals}f}"
    return f"{value:.{1 - math.floor(math.log10(abs(value)))}f}"


def result_line(result: NodeResult) -> str:
    """The node's one result line (module docstring)."""
    parts = []
    if result.gemm is not None:
        parts.append(f"gemm {figure(result.gemm)} {result.gemm_unit}")
    if result.hbm_ok is not None:
        parts.append("hbm ok" if result.hbm_ok else "hbm BAD")
    if result.allreduce_gbps is not None:
        parts.append(f"allreduce {figure(result.allreduce_gbps)} GB/s")
    if result.pair_gbps is not None:
        parts.append(f"pairwise {figure(result.pair_gbps, 2)} GB/s")
    parts.append(f"{result.gpus} gpu" if result.gpu_name != CPU else CPU)
    parts.append(f"{result.seconds:.1f} s")
    return f"preflight {result.node}: {', '.join(parts)}"


def fail_line(node: str, problem: str) -> str:
    return f"preflight FAIL {node}: {problem}"


def floor_for(gpu_name: str, floors: Mapping[str, float]) -> tuple[str, float] | None:
    """(type, floor) of the longest type name found in `gpu_name` ("H100" in "NVIDIA H100 80GB")."""
    found = [(k, v) for k, v in floors.items() if k.lower() in gpu_name.lower()]
    return max(found, key=lambda kv: len(kv[0])) if found else None


def judge(own: NodeResult, everyone: Sequence[NodeResult], limits: Thresholds) -> str | None:
    """Why `own` fails, or None. `everyone` holds every node's result (own included)."""
    if own.error:
        return own.error
    if own.hbm_ok is False:
        return f"hbm verify failed ({own.hbm_problem})"
    return (
        _gpu_spread(own, limits.relative_min)
        or _absolute(own, limits)
        or _relative(own, everyone, limits.relative_min, "gemm", own.gemm_unit)
        or _relative(own, everyone, limits.relative_min, "allreduce_gbps", "GB/s")
        or _relative(own, everyone, limits.relative_min, "pair_gbps", "GB/s")
    )


def _gpu_spread(own: NodeResult, relative_min: float) -> str | None:
    # One slow GPU among a node's eight is caught within the node, even in a one-node job.
    if len(own.gemm_per_gpu) < 2:
        return None
    median = statistics.median(own.gemm_per_gpu)
    for index, value in enumerate(own.gemm_per_gpu):
        if value < relative_min * median:
            return (
                f"gemm GPU {index} {figure(value)} {own.gemm_unit} < {relative_min:g} x median "
                f"{figure(median)} of this node's {len(own.gemm_per_gpu)} GPUs"
            )
    return None


def _absolute(own: NodeResult, limits: Thresholds) -> str | None:
    if own.gemm is not None and own.gpu_name == CPU:
        if own.gemm < limits.min_cpu_gemm_gflops:
            return f"gemm {figure(own.gemm)} GFLOP/s < min {limits.min_cpu_gemm_gflops:g} (cpu)"
        return None
    gemm_floor = floor_for(own.gpu_name, limits.min_gemm_tflops)
    if own.gemm is not None and gemm_floor and own.gemm < gemm_floor[1]:
        return f"gemm {figure(own.gemm)} TFLOP/s < min {gemm_floor[1]:g} ({gemm_floor[0]})"
    bw_floor = floor_for(own.gpu_name, limits.min_allreduce_gbps)
    if own.allreduce_gbps is not None and bw_floor and own.allreduce_gbps < bw_floor[1]:
        return f"allreduce {figure(own.allreduce_gbps)} GB/s < min {bw_floor[1]:g} ({bw_floor[0]})"
    return None


def _relative(
    own: NodeResult, everyone: Sequence[NodeResult], relative_min: float, attr: str, unit: str
) -> str | None:
    mine = getattr(own, attr)
    figures = [v for r in everyone if (v := getattr(r, attr)) is not None]
    if mine is None or len(figures) < 2:
        return None  # one node is its own median: only the floors judge it
    median = statistics.median(figures)
    if mine >= relative_min * median:
        return None
    name = {"gemm": "gemm", "allreduce_gbps": "allreduce", "pair_gbps": "pairwise"}[attr]
    digits = 2 if attr == "pair_gbps" else 1
    return f"{name} {figure(mine, digits)} {unit} < {relative_min:g} x median {figure(median, digits)}"
