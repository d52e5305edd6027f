"""The pre-flight's verdict on one node (floors per GPU type, the allocation's median, one slow
GPU within a node), its lines read back, and the step's command line from the config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.config.models import PreflightConfig
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.preflight_step import preflight_argv
from oellm_autoexp.workloads.preflight_judge import (
    CPU,
    FAIL_RE,
    RESULT_RE,
    NodeResult,
    Thresholds,
    fail_line,
    floor_for,
    judge,
    result_line,
)

H100 = "NVIDIA H100 80GB HBM3"
LIMITS = Thresholds(0.9, {"H100": 500.0, "A100": 200.0}, {"H100": 100.0}, 1.0)


def gpu(node: str, gemm: float, bw: float | None = 300.0, per_gpu: tuple[float, ...] = ()) -> NodeResult:
    return NodeResult(node, H100, 4, gemm, per_gpu or (gemm,) * 4, True, "", bw, 6.0)


@pytest.mark.parametrize(
    ("own", "others", "problem"),
    [
        (gpu("n2", 790.0), [gpu("n1", 800.0), gpu("n3", 780.0)], None),
        (gpu("n2", 412.0), [gpu("n1", 790.1), gpu("n3", 795.0)], "gemm 412.0 TFLOP/s < min 500 (H100)"),
        (gpu("n2", 690.0), [gpu("n1", 790.1), gpu("n3", 795.0)], "gemm 690.0 TFLOP/s < 0.9 x median 790.1"),
        (gpu("n2", 790.0, bw=150.0), [gpu("n1", 790.0), gpu("n3", 790.0)],
         "allreduce 150.0 GB/s < 0.9 x median 300.0"),
        (gpu("n2", 790.0, bw=50.0), [gpu("n1", 790.0)], "allreduce 50.0 GB/s < min 100 (H100)"),
        (gpu("n1", 700.0, per_gpu=(790.0, 795.0, 700.0, 792.0)), [],
         "gemm GPU 2 700.0 TFLOP/s < 0.9 x median 791.0 of this node's 4 GPUs"),
        (NodeResult("n2", H100, 4, 790.0, (), False, "cuda:1: pattern mismatch in elements 0..9"), [],
         "hbm verify failed (cuda:1: pattern mismatch in elements 0..9)"),
        (NodeResult("n2", CPU, 0, 0.5), [], "gemm 0.5 GFLOP/s < min 1 (cpu)"),
        (NodeResult("n2", CPU, 0, 2.0), [NodeResult("n1", CPU, 0, 8.0), NodeResult("n3", CPU, 0, 8.0)],
         "gemm 2.0 GFLOP/s < 0.9 x median 8.0"),
        (NodeResult("n2", "cuda", 0, None, error="check raised RuntimeError('x')"), [],
         "check raised RuntimeError('x')"),
        (NodeResult("n3", CPU, 0, None, pair_gbps=0.01),
         [NodeResult("n1", CPU, 0, None, pair_gbps=0.2), NodeResult("n2", CPU, 0, None, pair_gbps=0.19)],
         "pairwise 0.01 GB/s < 0.9 x median 0.19"),
    ],
)  # fmt: skip
def test_judge(own: NodeResult, others: list[NodeResult], problem: str | None) -> None:
    """Each rule fails exactly the node it should, with a line that says why in figures."""
    assert judge(own, [own, *others], LIMITS) == problem


def test_one_node_is_its_own_median() -> None:
    """A one-node allocation is judged by the floors only: the median of one is itself."""
    own = gpu("n1", 510.0)
    assert judge(own, [own], LIMITS) is None


def test_floor_for_takes_the_most_specific_type() -> None:
    """ "GH200" wins over "H200" for a GH200 (the longer name found in the device name)."""
    floors = {"H200": 500.0, "GH200": 600.0}
    assert floor_for("NVIDIA GH200 480GB", floors) == ("GH200", 600.0)
    assert floor_for("NVIDIA H200", floors) == ("H200", 500.0)
    assert floor_for("NVIDIA L40S", floors) is None


@pytest.mark.parametrize(
    ("result", "gemm", "unit", "hbm", "bw"),
    [
        (gpu("node1", 790.1), "790.1", "TFLOP/s", "ok", "300.0"),
        (NodeResult("node2", CPU, 0, 3.8, seconds=0.8), "3.8", "GFLOP/s", None, None),
        (
            NodeResult("n4", H100, 8, 790.0, (790.0,) * 8, True, "", 300.0, 6.0, pair_gbps=41.25),
            "790.0",
            "TFLOP/s",
            "ok",
            "300.0",
        ),
        (NodeResult("h", H100, 1, 700.0, (700.0,), True, "", None, 4.0), "700.0", "TFLOP/s", "ok", None),
    ],
)
def test_result_lines_read_back(
    result: NodeResult, gemm: str, unit: str, hbm: str | None, bw: str | None
) -> None:
    """The report reads each figure back from the line the node printed."""
    match = RESULT_RE.match(result_line(result))
    assert match is not None, result_line(result)
    assert (match["node"], match["gemm"], match["unit"], match["hbm"], match["bw"]) == (
        result.node, gemm, unit, hbm, bw,
    )  # fmt: skip
    assert float(match["seconds"]) == pytest.approx(result.seconds, abs=0.05)
    assert RESULT_RE.match(fail_line("node1", "gemm 1 TFLOP/s < min 2 (H100)")) is None
    assert FAIL_RE.match(fail_line("node1", "x"))["node"] == "node1"  # type: ignore[index]


def test_a_figure_below_a_small_floor_keeps_its_digits() -> None:
    """A CPU figure cut by the test hook to ~0.06 GFLOP/s passes a floor of 0.05 and one of 0.03
    fails it: the result and FAIL lines show both to two significant digits (not "0.0" for both),
    and the report reads them back as numbers."""
    passing, failing = NodeResult("n1", CPU, 0, 0.0644), NodeResult("n2", CPU, 0, 0.0321)
    limits = Thresholds(min_cpu_gemm_gflops=0.05)
    assert judge(passing, [passing], limits) is None
    assert judge(failing, [failing], limits) == "gemm 0.032 GFLOP/s < min 0.05 (cpu)"
    match = RESULT_RE.match(result_line(passing))
    assert match is not None and match["gemm"] == "0.064"
    tiny = NodeResult("n3", CPU, 0, 3.2e-5, pair_gbps=0.004)
    assert "gemm 0.000032 GFLOP/s, pairwise 0.0040 GB/s" in result_line(tiny)
    assert judge(tiny, [tiny], limits) == "gemm 0.000032 GFLOP/s < min 0.05 (cpu)"
    assert "gemm 0.0 GFLOP/s" in result_line(NodeResult("n4", CPU, 0, 0.0))  # zero stays zero


def test_json_round_trip() -> None:
    """A node's file holds the same figures it printed."""
    result = gpu("node1", 790.1)
    assert NodeResult.from_json(result.to_json()) == result


def test_argv_off_and_on() -> None:
    """Off: no step at all. On: the floors and budget reach the command line, sorted, never via a shell."""
    assert preflight_argv(PreflightConfig(), "/out") == ()
    cfg = PreflightConfig(enabled=True, min_gemm_tflops={"H100": 500, "A100": 200}, budget_s=30)
    argv = preflight_argv(cfg, "/out")
    assert argv[:3] == ("python3", "-m", "oellm_autoexp.workloads.preflight")
    assert argv[argv.index("--results-root") + 1] == "/out/preflight"
    assert argv[argv.index("--budget-s") + 1] == "30"
    floors = [argv[i + 1] for i, word in enumerate(argv) if word == "--min-gemm-tflops"]
    assert floors == ["A100=200", "H100=500"]


def test_shipped_group_turns_it_on_and_a_bad_value_is_one_clear_message(
    config_dir: Path, write_yaml: Callable[[Path, object], Path]
) -> None:
    """`preflight: default` enables the check with the shipped floors; a ratio above 1 is refused
    naming the key and the bound, as a UserError (no traceback)."""
    exp = write_yaml(
        config_dir / "experiments" / "pf.yaml",
        {
            "defaults": [{"slurm": "local"}, {"backend": "command"}, {"preflight": "default"}],
            "experiment": {"name": "pf", "output_dir": "out"},
            "backend": {"command": ["true"]},
        },
    )
    [job] = load_jobs(exp)
    assert job.config.preflight.enabled and job.config.preflight.min_gemm_tflops["H100"] == 500
    [off] = load_jobs(exp, ["preflight.enabled=false"])
    assert not off.config.preflight.enabled
    with pytest.raises(UserError, match=r"preflight\.relative_min: Input should be less than or equal to 1"):
        load_jobs(exp, ["preflight.relative_min=2"])
