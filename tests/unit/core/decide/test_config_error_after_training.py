"""A configuration error in an attempt that trained gets one restart: the arguments worked, so the
environment changed (a hub or a mount that stopped answering, a module the site updated). An attempt
trained when it logged an iteration past its first one (a loaded checkpoint's, or its first interval)."""

from __future__ import annotations

from typing import Any

import yaml

from oellm_autoexp.core.decide.policy import (
    DecisionAction,
    RestartHistory,
    RestartPolicy,
    RestartRecord,
    after_restart,
    decide,
    load_policy,
)
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import Outcome, OutcomeKind
from tests.paths import REPO

A = DecisionAction
CONFIG = Outcome(JobState.FAILED, "config_error", signal="hub_unreachable")
CRASH = Outcome(JobState.FAILED, "nccl", signal="nccl_error")
HOUR = 3600.0
Marks = tuple[int | None, int | None]  # (first, last) iteration an attempt logged


def policy_file(name: str, **transient: Any) -> RestartPolicy:
    data = yaml.safe_load((REPO / "config" / "restart" / f"{name}.yaml").read_text())
    for rule in data["rules"]:
        if rule["name"] == "transient":
            rule.update(transient)
    return load_policy(data)


def default_policy(**transient: Any) -> RestartPolicy:
    return policy_file("default", **transient)


def run(policy: RestartPolicy, attempts: list[tuple[Outcome, Marks]]) -> list[tuple[A, str]]:
    """Each (outcome, (first, last) iteration) ends one attempt; (action, reason) per decision until a non-restart."""
    history, out = RestartHistory(), []
    for n, (outcome, (first, last)) in enumerate(attempts):
        history = RestartHistory(
            history.attempt, history.restarts, last, history.excluded_nodes, first_iteration=first
        )
        decision = decide(policy, outcome, history, now=n * HOUR)
        out.append((decision.action, decision.reason))
        if decision.action is not A.RESTART:
            break
        history = after_restart(history, outcome, decision, now=n * HOUR)
    return out


def test_a_config_error_before_any_training_stops() -> None:
    """The first attempt never logged an iteration: the arguments themselves are wrong."""
    [(action, reason)] = run(default_policy(), [(CONFIG, (None, None))])
    assert action is A.STOP
    assert reason.startswith("Permanent failure detected (excluded error_type: config_error)")


def test_a_resume_that_only_loaded_its_checkpoint_has_not_trained() -> None:
    """An edited configuration resumes from iteration 5000 and fails at once: the loaded checkpoint's
    iteration is the attempt's only mark, so it stops as before."""
    [(action, reason)] = run(default_policy(), [(CONFIG, (5000, 5000))])
    assert action is A.STOP
    assert "Permanent failure detected (excluded error_type: config_error)" in reason


def test_a_config_error_after_training_restarts_once_and_says_why() -> None:
    """Attempt 1 trained 10 -> 500; attempt 2 resumed from 400, trained to 500 and met it again."""
    decisions = run(default_policy(), [(CONFIG, (10, 500)), (CONFIG, (400, 500))])
    assert [a for a, _ in decisions] == [A.RESTART, A.STOP]
    assert decisions[0][1].startswith("Transient failure detected (error_type=config_error)")
    assert "this configuration trained before (iteration 500), so the environment changed" in decisions[0][1]
    assert decisions[1][1].startswith("Permanent failure detected (excluded error_type: config_error)")


def test_a_start_up_failure_after_earlier_training_stops() -> None:
    """Attempt 1 trained to 800 and crashed; attempt 2 dies loading a module the site removed, before
    its first iteration. Only the attempt's own training counts: it stops (a site change that breaks
    the start-up tends to stay)."""
    decisions = run(default_policy(), [(CRASH, (10, 800)), (CONFIG, (None, None))])
    assert [a for a, _ in decisions] == [A.RESTART, A.STOP]


def test_progress_between_two_config_errors_gives_the_second_its_restart() -> None:
    """Weeks apart, two hub outages: the attempt in between got past the best iteration (a refill)."""
    decisions = run(default_policy(), [(CONFIG, (10, 500)), (CONFIG, (400, 2000)), (CONFIG, (1900, 2000))])
    assert [a for a, _ in decisions] == [A.RESTART, A.RESTART, A.STOP]


def test_zero_turns_it_off() -> None:
    [(action, reason)] = run(default_policy(config_error_after_training=0), [(CONFIG, (10, 500))])
    assert action is A.STOP
    assert "Permanent failure detected" in reason


def test_the_retry_budget_still_bounds_it() -> None:
    """A rule with no restarts left stops, naming the budget, not the configuration (every attempt
    failed at the iteration it resumed from: no progress refilled it)."""
    spent = tuple(RestartRecord(0.0, "transient", OutcomeKind.CRASH, "nccl", 100) for _ in range(2))
    history = RestartHistory(attempt=3, restarts=spent, iteration=100, first_iteration=50)
    decision = decide(default_policy(), CONFIG, history, now=HOUR)
    assert decision.action is A.STOP
    assert "retry budget exhausted" in decision.reason


def test_a_running_job_is_cancelled_first() -> None:
    """A configuration error settled in a running attempt is acted on at once, as any fatal line."""
    running = Outcome(JobState.RUNNING, "config_error", signal="hub_unreachable", still_running=True)
    decision = decide(default_policy(), running, RestartHistory(iteration=500, first_iteration=10), now=0.0)
    assert (decision.action, decision.cancel_first) == (A.RESTART, True)


def test_refill_on_training_does_not_refill_it() -> None:
    """megatron_transient refills its budgets when an attempt dies at an iteration no attempt died at
    before; the configuration error's restart refills only on progress past the best iteration, as the
    docs say: a second one short of iteration 1000 stops."""
    decisions = run(policy_file("megatron_transient"), [(CONFIG, (10, 1000)), (CONFIG, (900, 990))])
    assert [a for a, _ in decisions] == [A.RESTART, A.STOP]


def test_the_reason_says_how_many_restarts_the_setting_allows() -> None:
    """One is "one restart"; a larger setting is counted as it is, and allows that many."""
    [(action, reason)] = run(default_policy(), [(CONFIG, (10, 500))])
    assert action is A.RESTART
    assert "so the environment changed: one restart for it (config_error_after_training: 1)" in reason
    decisions = run(
        default_policy(config_error_after_training=2),
        [(CONFIG, (10, 500)), (CONFIG, (400, 500)), (CONFIG, (400, 500))],
    )
    assert [a for a, _ in decisions] == [A.RESTART, A.RESTART, A.STOP]
    assert (
        "so the environment changed: up to 2 restarts for it (config_error_after_training: 2)"
        in decisions[0][1]
    )
