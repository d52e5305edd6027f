"""A node NCCL's network errors name in two failed attempts is blamed (core/decide/recurring_blame.py),
through judge() as the monitor calls it: one attempt's completion errors blame no one (both ends print
them), the same node named again by a later failure is excluded, a crash's NCCL cascade never is."""

from __future__ import annotations

import pytest
import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import root_cause
from oellm_autoexp.core.decide.judge import PastDecision, history_from, judge
from oellm_autoexp.core.decide.policy import DecisionAction, RestartRecord, load_policy
from oellm_autoexp.core.decide.recurring_blame import (
    FIRST_SIGHT_NODES,
    WINDOW_S,
    blame_again,
    named_before,
    network_named,
    recurring_blame,
)
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import OutcomeKind
from oellm_autoexp.core.watch.verdict import Trigger, Verdict
from tests.paths import REPO

ALLOCATION = tuple(f"node{i}" for i in range(1, 9))
# NVIDIA/nccl#1405's line (ib_plugin.c; NCCL's `host:pid:tid [dev]` prefix from src/debug.cc).
COMPLETION = (
    "{host}:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> "
    "with status=12 opcode=0 len=0 vendor err 129 (Recv)"
)
PEERS_ERROR = (
    "[rank17]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3763, "
    "remote process exited or there was a network error, NCCL version 2.28.8"
)


@pytest.fixture(scope="module")
def patterns():
    return load_patterns(["megatron_production"])


@pytest.fixture(scope="module")
def policy():
    return load_policy(yaml.safe_load((REPO / "config" / "restart" / "default.yaml").read_text()))


def test_an_attempt_s_nccl_network_errors_name_their_hosts_only_for_a_network_cause(patterns) -> None:
    lines = [COMPLETION.format(host="node7.cluster"), COMPLETION.format(host="node2"), PEERS_ERROR,
             COMPLETION.format(host="other-job-node")]  # fmt: skip
    signals = classify_lines(lines, patterns)
    assert network_named(signals, ALLOCATION, "nccl") == ("node2", "node7")
    assert network_named(signals, ALLOCATION, "exception") == ()  # a crash's peers print NCCL lines too


def test_a_node_named_again_is_blamed_and_a_job_wide_recurrence_is_not() -> None:
    assert recurring_blame(("node2", "node7"), ("node3", "node7"), 8).nodes == ("node7",)
    assert recurring_blame(("node2",), ("node3", "node7"), 8).nodes == ()
    wide = recurring_blame(("node1", "node2", "node3"), ("node1", "node2", "node3"), 8)
    assert wide.nodes == () and wide.withheld is not None and "3 nodes" in wide.withheld


def test_on_a_large_allocation_one_failure_s_named_ends_are_blamed_at_once() -> None:
    """From FIRST_SIGHT_NODES up, the one or two ends a failure's NCCL lines name are blamed without
    waiting for a second failure; more at once may be a switch, and a small job still waits."""
    big = FIRST_SIGHT_NODES
    assert blame_again(("node7",), (), 0.0, big).nodes == ("node7",)
    assert blame_again(("node2", "node7"), (), 0.0, big).nodes == ("node2", "node7")
    assert blame_again(("node1", "node2", "node7"), (), 0.0, big).nodes == ()
    assert blame_again(("node7",), (), 0.0, big - 1).nodes == ()
    assert "one failure is enough" in blame_again(("node7",), (), 0.0, big).blamed[0].evidence


def test_only_failures_within_the_window_count() -> None:
    old = RestartRecord(time_s=0.0, rule="transient", kind=OutcomeKind.CRASH, named_nodes=("node3",))
    new = RestartRecord(time_s=WINDOW_S, rule="transient", kind=OutcomeKind.CRASH, named_nodes=("node7",))
    assert named_before((old, new), now_s=WINDOW_S + 60) == ("node7",)
    assert named_before((old, new), now_s=WINDOW_S) == ("node3", "node7")


def _judge_attempt(patterns, policy, lines: list[str], decisions: list[PastDecision], now_s: float):
    record = JobRecord(job_id=str(len(decisions) + 1), state=JobState.FAILED, source="sacct", exit_code=1,
                       nodes=ALLOCATION)  # fmt: skip
    signals = classify_lines(lines, patterns)
    cause = root_cause(signals)
    verdict = Verdict(trigger=Trigger.END, now_s=now_s, record=record, cause=cause)
    history = history_from(decisions, attempt_no=len(decisions) + 1, iteration=None)
    return judge(policy, verdict, history, signals, allocation=ALLOCATION)


def test_the_node_of_two_failures_is_excluded_on_the_second_restart(patterns, policy) -> None:
    first = _judge_attempt(
        patterns,
        policy,
        [COMPLETION.format(host="node7"), COMPLETION.format(host="node2"), PEERS_ERROR],
        [],
        1000.0,
    )
    assert first.outcome.error_type == "nccl" and first.decision.action is DecisionAction.RESTART
    assert first.decision.exclude_nodes == () and first.evidence.named_nodes == ("node2", "node7")
    past = [PastDecision(DecisionAction.RESTART.value, 1000.0, first.evidence)]
    second = _judge_attempt(
        patterns,
        policy,
        [COMPLETION.format(host="node5"), COMPLETION.format(host="node7"), PEERS_ERROR],
        past,
        5000.0,
    )
    assert second.decision.action is DecisionAction.RESTART
    assert second.decision.exclude_nodes == ("node7",)
    assert second.evidence.blamed[0].startswith("node7: NCCL's network errors came from this node")


def test_a_crash_s_nccl_cascade_blames_no_one_however_often_it_repeats(patterns, policy) -> None:
    crash = [
        "[rank3]: RuntimeError: shape mismatch in the loss",
        COMPLETION.format(host="node7"),
        PEERS_ERROR,
    ]
    first = _judge_attempt(patterns, policy, crash, [], 1000.0)
    past = [PastDecision(first.decision.action.value, 1000.0, first.evidence)]
    second = _judge_attempt(patterns, policy, crash, past, 5000.0)
    assert first.evidence.named_nodes == second.evidence.named_nodes == ()
    assert second.decision.exclude_nodes == ()
