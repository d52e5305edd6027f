"""A NODE_FAIL with no log line naming the node: Slurm's own node state blames it (judge's `unhealthy`)."""

from __future__ import annotations

import yaml

from oellm_autoexp.core.decide.judge import judge
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, load_policy
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_nodes import parse_scontrol_nodes
from oellm_autoexp.core.watch.verdict import Trigger, Verdict
from tests.paths import REPO

TRANSIENT = load_policy(yaml.safe_load((REPO / "config" / "restart" / "megatron_transient.yaml").read_text()))
# `scontrol show node node2` after `scontrol update nodename=node2 state=down reason=test` (trimmed)
SHOW_NODE = """NodeName=node2 Arch=x86_64 CoresPerSocket=1
   State=DOWN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=test [root@2026-11-25T15:05:33]
"""


def ended_node_fail() -> Verdict:
    record = JobRecord("7", JobState.NODE_FAIL, "sacct", nodes=("node2",))
    return Verdict(Trigger.END, 10.0, record=record, observed="job ended NODE_FAIL")


def test_a_down_node_is_blamed_and_excluded_from_its_state() -> None:
    """Restarted (node_fail), the DOWN node excluded, its state and reason as the evidence."""
    unhealthy = parse_scontrol_nodes(SHOW_NODE)
    j = judge(TRANSIENT, ended_node_fail(), RestartHistory(), (), allocation=("node2",), unhealthy=unhealthy)
    assert j.decision.action is DecisionAction.RESTART
    assert j.effects.exclude_nodes == ("node2",)
    assert j.evidence.blamed == ("node2: Slurm reports node2 DOWN: test",)


def test_without_the_node_state_no_one_is_blamed() -> None:
    """The same end with no node state read: restarted, nothing excluded (no evidence names a node)."""
    j = judge(TRANSIENT, ended_node_fail(), RestartHistory(), (), allocation=("node2",))
    assert j.decision.action is DecisionAction.RESTART and j.effects.exclude_nodes == ()
