"""The pre-flight check on suspicion: which restarted failures make the next attempts run it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.core.decide.judge import PastDecision
from oellm_autoexp.core.decide.suspicion import Failure, restarted_failures, suspicion
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.plan.attempt_plan import PREFLIGHT_SUSPECT_ENV, attempt_plan
from oellm_autoexp.plan.plan import JobPlan, build_plans

DAY_S = 24 * 3600.0


@pytest.mark.parametrize(
    ("failure", "suspected"),
    [
        (Failure(0.0, "hang", ()), True),  # no progress, no line: every rank waits on the same collective
        (Failure(0.0, "nccl_timeout", ()), True),  # only the peers' watchdog
        (Failure(0.0, "nccl", ()), True),  # a peer gone or a completion error: both ends print it
        (Failure(0.0, "hang", ("gpu03: port error",)), False),  # a node named: it is excluded already
        (Failure(0.0, "gpu_hardware", ()), False),  # not a cause this check is run for
        (Failure(0.0, "exception", ()), False),
        (Failure(0.0, None, ()), False),
    ],
)
def test_the_next_attempt_checks_after_a_failure_that_may_be_a_node_s_and_named_none(
    failure: Failure, suspected: bool
) -> None:
    assert (suspicion([failure], 60.0, DAY_S) is not None) is suspected


def test_a_suspicion_lasts_its_window_across_later_restarts() -> None:
    """The suspected node may have been out of the next allocation and back in a later one."""
    hang = Failure(0.0, "hang", ())
    blamed = Failure(3600.0, "preflight_failed", ("gpu02: preflight FAIL gpu02",))
    assert suspicion([hang, blamed], 3600.0, DAY_S) == hang
    assert suspicion([hang, blamed], DAY_S + 1.0, DAY_S) is None  # past the window
    assert suspicion([hang, blamed], 3600.0, 0.0) is None  # window 0: only the attempt right after it
    assert suspicion([blamed, hang], DAY_S * 9, 0.0) == hang  # the newest restart always counts
    assert suspicion([], 0.0, DAY_S) is None


def test_stored_decisions_become_failures_restarts_only() -> None:
    decisions = [
        PastDecision("restart", 10.0, Evidence(kind="hang", error_type="nccl_timeout")),
        PastDecision("stop", 20.0, Evidence(kind="crash", error_type="exception")),
        PastDecision("restart", 30.0, Evidence(kind="node_fail", blamed=("gpu01: Node failure on gpu01",))),
    ]
    assert restarted_failures(decisions) == [
        Failure(10.0, "nccl_timeout", ()),
        Failure(30.0, "node_fail", ("gpu01: Node failure on gpu01",)),
    ]


def plan_with(tmp_path: Path, preflight: dict[str, Any]) -> JobPlan:
    data: dict[str, Any] = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}],
        "experiment": {"name": "suspect", "output_dir": str(tmp_path / "out")},
        "backend": {"command": ["echo", "hi"]},
        "slurm": {"nodes": 2},
        "preflight": preflight,
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_plans(load_jobs(path), os.fspath(tmp_path))[0]


@pytest.mark.parametrize(
    ("preflight", "suspect", "checks"),
    [
        ({"on_suspicion": True, "checks": ["gemm", "pairwise"]}, "nccl_timeout", True),
        ({"on_suspicion": True}, None, False),  # nothing suspected: no check, no cost
        ({"on_suspicion": False}, "nccl_timeout", False),  # not asked for
        ({"enabled": True}, None, True),  # on for every attempt anyway
    ],
)
def test_an_attempt_runs_the_check_only_on_suspicion(
    tmp_path: Path, preflight: dict[str, Any], suspect: str | None, checks: bool
) -> None:
    plan = plan_with(tmp_path, preflight)
    assert "autoexp: preflight step took" not in plan.script or plan.config.preflight.enabled
    second = attempt_plan(plan, 2, "nccl_timeout", [], suspect)
    assert ("autoexp: preflight step took" in second.script) is checks
    assert (f"export {PREFLIGHT_SUSPECT_ENV}=" in second.script) is (checks and suspect is not None)
    if checks and suspect is not None:
        assert "  --checks\n  gemm,pairwise\n" in second.script
