"""The queued successor's pure parts: when one is queued, its sbatch arguments, its hold."""

from __future__ import annotations

import pytest

from oellm_autoexp.core.decide.policy import RestartPolicy
from oellm_autoexp.core.decide.successor import (
    may_queue_successor,
    renew_every_s,
    start_time_command,
    successor_args,
    unsupervised_line,
)

RULES = {
    "rules": [
        {"name": "oom", "match": {"error_types": ["oom"]}, "action": "stop"},
        {"name": "transient", "action": "restart", "max_retries": 3},
        {"name": "scheduler", "action": "restart", "max_retries": 1},
    ]
}


@pytest.mark.parametrize(
    ("queued", "restarts", "expected"),
    [(False, 0, False), (True, 0, True), (True, 2, True), (True, 3, False), (True, 9, False)],
)
def test_successor_only_when_asked_and_within_some_rules_budget(
    queued: bool, restarts: int, expected: bool
) -> None:
    """Off unless the policy asks; then only while some restart rule has budget left (3 here)."""
    policy = RestartPolicy.model_validate({**RULES, "queued_successor": queued})
    assert may_queue_successor(policy, restarts) is expected


def test_a_policy_without_restart_rules_queues_none() -> None:
    """Stop and notify rules grant no restart, so no successor is ever queued for them."""
    policy = RestartPolicy.model_validate({"rules": [RULES["rules"][0]], "queued_successor": True})
    assert not may_queue_successor(policy, 0)


def test_successor_args_depend_on_failure_and_hold_it() -> None:
    """afternotok on the predecessor, removed when it can never start, held `hold_s` unless 0."""
    assert successor_args("123", 300) == (
        "--dependency=afternotok:123",
        "--kill-on-invalid-dep=yes",
        "--begin=now+300",
    )
    assert successor_args("123", 0) == ("--dependency=afternotok:123", "--kill-on-invalid-dep=yes")


def test_start_time_command_holds_several_jobs_in_one_call_and_releases() -> None:
    assert start_time_command(["7", "9"], 300) == ["scontrol", "update", "JobId=7,9", "StartTime=now+300"]
    assert start_time_command(["7"], 0) == ["scontrol", "update", "JobId=7", "StartTime=now"]


def test_renewal_is_three_times_per_hold() -> None:
    """One missed renewal never lets the hold lapse under a live monitor."""
    assert renew_every_s(300) == 100


def test_unsupervised_line_names_both_attempts() -> None:
    line = unsupervised_line(2, "88", "2026-01-01T00:00:00+00:00", 1)
    assert "attempt 1 failed while no monitor ran" in line
    assert "restarted by the queued successor while unsupervised: attempt 2 (job 88)" in line
