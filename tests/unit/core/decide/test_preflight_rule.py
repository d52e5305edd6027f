"""The shipped restart policies on a node that failed its pre-flight check: restart at once, off
that node, charging no retry budget; the window still ends a job whose every allocation fails."""

from __future__ import annotations

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import Classifier
from oellm_autoexp.core.decide.judge import blame_for
from oellm_autoexp.core.decide.node_blame import blame_nodes
from oellm_autoexp.core.decide.policy import (
    DecisionAction,
    RestartHistory,
    RestartPolicy,
    after_restart,
    decide,
    load_policy,
)
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import Outcome, OutcomeKind
from tests.paths import REPO

FAIL_LINE = "preflight FAIL node2: gemm 412.0 TFLOP/s < 0.9 x median 790.1"
POLICIES = ("default", "megatron_transient", "fleet")


def shipped(name: str) -> RestartPolicy:
    return load_policy(yaml.safe_load((REPO / "config" / "restart" / f"{name}.yaml").read_text()))


def preflight_outcome() -> Outcome:
    return Outcome(JobState.FAILED, "preflight_failed", exit_code=1, signal="preflight_fail")


def test_the_fail_line_is_classified_and_blames_exactly_its_node() -> None:
    """Among the lines a failed 2-node pre-flight prints, the FAIL line is the root and names node2."""
    lines = [
        "preflight node1: gemm 790.1 TFLOP/s, hbm ok, allreduce 310.0 GB/s, 4 gpu, 6.2 s",
        "preflight node2: gemm 412.0 TFLOP/s, hbm ok, allreduce 305.2 GB/s, 4 gpu, 6.3 s",
        FAIL_LINE,
        "srun: error: node2: task 1: Exited with exit code 1",
        "autoexp: preflight step took 9.4 s (status 1)",
        "autoexp: pre-flight failed: training not started",
    ]
    signals = Classifier(load_patterns()).feed(lines)
    roots = [s for s in signals if s.role == "root"]
    assert [(s.pattern, s.error_type, s.groups["node"]) for s in roots] == [
        ("preflight_fail", "preflight_failed", "node2")
    ]
    blame = blame_nodes(signals, ["node1", "node2"])
    assert blame.nodes == ("node2",) and FAIL_LINE in blame.blamed[0].evidence


def test_a_result_line_is_not_a_failure() -> None:
    """A passing node's line is no signal of failure (no error type)."""
    signals = Classifier(load_patterns()).feed(["preflight node1: gemm 3.8 GFLOP/s, cpu, 0.8 s"])
    assert [s for s in signals if s.error_type] == []


@pytest.mark.parametrize("policy", POLICIES)
def test_restart_at_once_off_the_node_without_charging(policy: str) -> None:
    """The `preflight` rule restarts with no delay, excludes the blamed node, and leaves the budget."""
    outcome = preflight_outcome()
    assert outcome.kind is OutcomeKind.NODE_FAIL
    decision = decide(shipped(policy), outcome, RestartHistory(), now=0.0, blamed=("node2",))
    assert decision.action is DecisionAction.RESTART and decision.rule == "preflight"
    assert decision.delay_s == 0.0 and decision.exclude_nodes == ("node2",)
    assert decision.budget_before == decision.budget_after
    assert decision.reason.endswith("not charged to a retry budget (rule preflight)")


@pytest.mark.parametrize("policy", POLICIES)
def test_preflight_restarts_leave_the_transient_budget_whole(policy: str) -> None:
    """Five failed pre-flights in a row, then a crash: the crash still gets the full transient budget."""
    rules = shipped(policy)
    history = RestartHistory()
    for n in range(5):
        decision = decide(rules, preflight_outcome(), history, now=n * 60.0, blamed=(f"node{n}",))
        assert decision.action is DecisionAction.RESTART, decision.reason
        history = after_restart(history, preflight_outcome(), decision, now=n * 60.0)
    crash = Outcome(JobState.CANCELLED)
    first_crash = decide(rules, crash, history, now=600.0)
    fresh = decide(rules, crash, RestartHistory(), now=600.0)
    assert first_crash.rule == "transient" and first_crash.budget_before == fresh.budget_before


def test_the_window_ends_a_job_whose_every_allocation_fails() -> None:
    """The eleventh failed pre-flight within the hour stops the job with the window's reason."""
    rules = shipped("megatron_transient")
    history = RestartHistory()
    decisions = []
    for n in range(11):
        decision = decide(rules, preflight_outcome(), history, now=n * 10.0)
        decisions.append(decision)
        if decision.action is not DecisionAction.RESTART:
            break
        history = after_restart(history, preflight_outcome(), decision, now=n * 10.0)
    assert [d.action for d in decisions] == [DecisionAction.RESTART] * 10 + [DecisionAction.STOP]
    assert decisions[-1].reason == "restart rate limit: 10 restarts in the last 1h (max 10)"


def test_a_charged_rule_still_spends_its_budget() -> None:
    """charge_budget defaults to true: the same rule without it stops after max_retries."""
    rules = load_policy({"rules": [{"name": "r", "max_retries": 1}]})
    history = RestartHistory()
    first = decide(rules, preflight_outcome(), history, now=0.0)
    history = after_restart(history, preflight_outcome(), first, now=0.0)
    second = decide(rules, preflight_outcome(), history, now=1.0)
    assert first.action is DecisionAction.RESTART and first.budget_after == 0
    assert second.action is DecisionAction.STOP and "retry budget exhausted" in second.reason


@pytest.mark.parametrize(("failing", "blamed"), [(2, ("n1", "n2")), (4, ("n1", "n2", "n3", "n4")), (5, ())])
def test_up_to_half_of_the_allocation_is_blamed(failing: int, blamed: tuple[str, ...]) -> None:
    """The rule trusts per-node measurements for up to half of 8 nodes (the median check cannot fail
    more); 5 of 8 below a floor is the job's doing: nobody is blamed."""
    allocation = [f"n{i}" for i in range(1, 9)]
    lines = [f"preflight FAIL n{i}: gemm 100.0 TFLOP/s < min 500 (H100)" for i in range(1, failing + 1)]
    signals = Classifier(load_patterns()).feed(lines)
    result = blame_for(shipped("megatron_transient"), preflight_outcome(), signals, allocation)
    assert result.nodes == blamed
