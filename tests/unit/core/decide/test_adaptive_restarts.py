"""Adaptive restarts: a rule's override sets, tried in order, then its normal budget; each attempt's plan."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.core.decide.judge import PastDecision, attempt_overrides, history_from, previous_cause
from oellm_autoexp.core.decide.policy import (
    DecisionAction,
    RestartHistory,
    RestartPolicy,
    after_restart,
    decide,
    load_policy,
)
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.evidence import Evidence
from oellm_autoexp.core.watch.outcome import Outcome
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.attempt_plan import (
    ATTEMPT_ENV,
    PREVIOUS_CAUSE_ENV,
    attempt_plan,
    check_override_sets,
)
from oellm_autoexp.plan.plan import JobPlan, build_plans
from tests.paths import REPO

A = DecisionAction
SHIPPED = REPO / "config" / "restart" / "megatron_transient.yaml"
SMALLER = [["backend.megatron.micro_batch_size=8"], ["backend.megatron.micro_batch_size=4"]]
OOM = Outcome(JobState.FAILED, "oom", exit_code=1, subsystem="cuda", signal="cuda_oom")
NCCL = Outcome(JobState.FAILED, "nccl", exit_code=1, subsystem="nccl", signal="nccl_system_error")


def shipped_with_overrides(**changes: Any) -> RestartPolicy:
    """megatron_transient with `changes` merged into its `transient` rule (which excludes oom)."""
    data = yaml.safe_load(SHIPPED.read_text())
    for rule in data["rules"]:
        if rule["name"] == "transient":
            rule.update(changes)
    return load_policy(data)


def run(policy: RestartPolicy, outcomes: list[Outcome]) -> list[tuple[str, str, int | None]]:
    """Each outcome ends one attempt; (action, reason, override set) per decision until a non-restart."""
    history, out = RestartHistory(), []
    for n, outcome in enumerate(outcomes):
        decision = decide(policy, outcome, history, now=n * 60.0)
        out.append((decision.action.value, decision.reason, decision.override_set))
        if decision.action is not A.RESTART:
            break
        history = after_restart(history, outcome, decision, now=n * 60.0)
    return out


def test_excluded_oom_restarts_with_each_set_then_stops_as_permanent() -> None:
    """An OOM the shipped rule excludes restarts with set 1, then set 2, then stops: the sets are used up."""
    decisions = run(shipped_with_overrides(overrides=SMALLER), [OOM, OOM, OOM])
    assert [(a, s) for a, _, s in decisions] == [("restart", 1), ("restart", 2), ("stop", None)]
    assert decisions[0][1] == (
        "Restarting with a changed config (error_type=oom): override set 1/2 of rule transient: "
        "backend.megatron.micro_batch_size=8"
    )
    assert (
        decisions[2][1]
        == "Permanent failure detected (excluded error_type: oom); override sets used up (2/2)"
    )


def test_without_overrides_the_shipped_policy_stops_on_the_first_oom() -> None:
    """The shipped policy alone treats an OOM as permanent (the overrides are what change it)."""
    decisions = run(shipped_with_overrides(), [OOM])
    assert decisions[0][:2] == ("stop", "Permanent failure detected (excluded error_type: oom)")


def test_override_restarts_are_not_charged_to_the_normal_budget() -> None:
    """With one set and max_retries 1: the set, then one plain restart, then the budget is spent."""
    policy = load_policy({"rules": [{"name": "r", "max_retries": 1, "overrides": ["slurm.nodes=1"]}]})
    decisions = run(policy, [NCCL, NCCL, NCCL])
    assert [(a, s) for a, _, s in decisions] == [("restart", 1), ("restart", None), ("stop", None)]
    assert decisions[2][1] == "retry budget exhausted (attempt 2/1; rule r, job attempt 3)"


def test_rate_window_still_counts_override_restarts() -> None:
    """The window is a crash-loop guard: an override restart inside a full window stops."""
    policy = load_policy({"rules": [{"name": "r", "overrides": ["slurm.nodes=1", "slurm.nodes=2"],
                                     "window": {"max_restarts": 1, "hours": 1}}]})  # fmt: skip
    decisions = run(policy, [NCCL, NCCL])
    assert [a for a, _, _ in decisions] == ["restart", "stop"]
    assert decisions[1][1].startswith("restart rate limit: 1 restarts in the last 1h")


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"action": "stop", "overrides": ["a.b=1"]}, "overrides need action restart"),
        (
            {"overrides": [["a.b=1", "nonsense"]]},
            "overrides set 1 of rule r: expected key.path=value, got 'nonsense'",
        ),
        ({"overrides": [[]]}, "expected key.path=value, got 'an empty set'"),
    ],
)
def test_malformed_override_sets_are_refused_with_the_rule_and_set(
    rule: dict[str, Any], message: str
) -> None:
    """A set that is not a list of key=value, or overrides on a stop rule, fails when the policy loads."""
    with pytest.raises(UserError, match=message):
        load_policy({"rules": [{"name": "r", **rule}]})


def _past(action: str, ev: Evidence, at: float = 0.0) -> PastDecision:
    return PastDecision(action, at, ev)


def test_the_stored_record_brings_back_the_set_for_budgets_and_the_next_attempt() -> None:
    """history_from reads the applied set back; the last applied set stays in effect after a plain restart."""
    decisions = [
        _past(
            "restart", Evidence(rule="t", kind="crash", error_type="oom", override_set=1, overrides=("x=8",))
        ),
        _past("restart", Evidence(rule="t", kind="crash", error_type="nccl")),
    ]
    history = history_from(decisions, attempt_no=3, iteration=None)
    assert [r.override_set for r in history.restarts] == [1, None]
    assert attempt_overrides(decisions) == ("x=8",)
    assert previous_cause(decisions) == "nccl"
    assert (attempt_overrides([]), previous_cause([])) == ((), "")
    assert Evidence.from_json(decisions[0].evidence.to_json()) == decisions[0].evidence


def demo_plan(tmp_path: Path, restart: dict[str, Any] | None = None) -> JobPlan:
    data: dict[str, Any] = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}],
        "experiment": {"name": "adapt", "output_dir": str(tmp_path / "out")},
        "executor": "local",
        "backend": {"command": ["echo", "hi"]},
        "slurm": {"env": {"MBS": 16}},
    }
    if restart is not None:
        data["restart"] = restart
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_plans(load_jobs(path), os.fspath(tmp_path))[0]


def test_each_attempt_is_rendered_with_its_number_cause_and_overrides(tmp_path: Path) -> None:
    """Attempt 2 after an OOM gets its own script with AUTOEXP_ATTEMPT, the previous cause and the set applied."""
    plan = demo_plan(tmp_path)
    second = attempt_plan(plan, 2, "oom", ["slurm.env.MBS=8"])
    assert second.script_path == str(tmp_path / "out" / "job.attempt-2.sbatch")
    assert f"export {ATTEMPT_ENV}=2\n" in second.script
    assert f"export {PREVIOUS_CAUSE_ENV}=oom\n" in second.script
    assert "export MBS=8\n" in second.script and "export MBS=16\n" in plan.script
    assert (second.output_dir, second.log_path) == (plan.output_dir, plan.log_path)
    first = attempt_plan(plan, 1, "", [])
    assert f"export {PREVIOUS_CAUSE_ENV}=''\n" in first.script


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("slurm.env_typo.MBS=8", "key 'slurm.env_typo' does not exist"),
        ("slurm.nodes=many", "slurm.nodes: Input should be a valid integer"),
    ],
)
def test_a_bad_override_set_is_reported_at_session_start_naming_the_set(
    tmp_path: Path, entry: str, message: str
) -> None:
    """check_override_sets applies every set like `autoexp plan` would and names the rule and set that fail."""
    restart = {"rules": [{"name": "oom", "match": {"error_types": ["oom"]},
                          "overrides": [["slurm.env.MBS=8"], [entry]]}]}  # fmt: skip
    plan = demo_plan(tmp_path, restart)
    policy = load_policy(restart)
    with pytest.raises(UserError) as raised:
        check_override_sets(plan, policy)
    assert f"restart rule oom, overrides set 2 ({entry})" in str(raised.value)
    assert message in str(raised.value)
