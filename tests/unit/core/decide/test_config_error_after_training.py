"""A configuration error on a configuration that already trained gets one restart: the arguments worked,
so the environment changed (a hub or a mount that stopped answering, a module the site updated)."""

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
OOM = Outcome(JobState.FAILED, "oom", signal="cuda_oom")
HOUR = 3600.0


def default_policy(**transient: Any) -> RestartPolicy:
    data = yaml.safe_load((REPO / "config" / "restart" / "default.yaml").read_text())
    for rule in data["rules"]:
        if rule["name"] == "transient":
            rule.update(transient)
    return load_policy(data)


def run(policy: RestartPolicy, attempts: list[tuple[Outcome, int | None]]) -> list[tuple[A, str]]:
    """Each (outcome, iteration reached) ends one attempt; (action, reason) per decision until a non-restart."""
    history, out = RestartHistory(), []
    for n, (outcome, reached) in enumerate(attempts):
        history = RestartHistory(history.attempt, history.restarts, reached, history.excluded_nodes)
        decision = decide(policy, outcome, history, now=n * HOUR)
        out.append((decision.action, decision.reason))
        if decision.action is not A.RESTART:
            break
        history = after_restart(history, outcome, decision, now=n * HOUR)
    return out


def test_a_config_error_before_any_training_stops() -> None:
    """The first attempt never logged an iteration: the arguments themselves are wrong."""
    [(action, reason)] = run(default_policy(), [(CONFIG, None)])
    assert action is A.STOP
    assert reason.startswith("Permanent failure detected (excluded error_type: config_error)")


def test_a_config_error_after_training_restarts_once_and_says_why() -> None:
    decisions = run(default_policy(), [(CONFIG, 500), (CONFIG, 500)])
    assert [a for a, _ in decisions] == [A.RESTART, A.STOP]
    assert decisions[0][1].startswith("Transient failure detected (error_type=config_error)")
    assert "this configuration trained before (iteration 500), so the environment changed" in decisions[0][1]
    assert decisions[1][1].startswith("Permanent failure detected (excluded error_type: config_error)")


def test_an_earlier_attempts_training_counts() -> None:
    """Attempt 1 trained to 800 and crashed; attempt 2 dies at start-up on a module the site removed."""
    decisions = run(default_policy(), [(CRASH, 800), (CONFIG, None), (CONFIG, None)])
    assert [a for a, _ in decisions] == [A.RESTART, A.RESTART, A.STOP]
    assert "trained before (iteration 800)" in decisions[1][1]


def test_progress_between_two_config_errors_gives_the_second_its_restart() -> None:
    """Weeks apart, two hub outages: the attempt in between got past the best iteration (a refill)."""
    decisions = run(default_policy(), [(CONFIG, 500), (CONFIG, 2000), (CONFIG, 2000)])
    assert [a for a, _ in decisions] == [A.RESTART, A.RESTART, A.STOP]


def test_zero_turns_it_off() -> None:
    [(action, reason)] = run(default_policy(config_error_after_training=0), [(CONFIG, 500)])
    assert action is A.STOP
    assert "Permanent failure detected" in reason


def test_an_override_set_changes_the_configuration_that_trained() -> None:
    """The OOM's override set gave a new configuration; it never trained, so its config error stops."""
    policy = default_policy(overrides=["backend.megatron.micro_batch_size=1"])
    decisions = run(policy, [(OOM, 300), (CONFIG, None)])
    assert [a for a, _ in decisions] == [A.RESTART, A.STOP]
    assert "Permanent failure detected (excluded error_type: config_error)" in decisions[1][1]


def test_the_retry_budget_still_bounds_it() -> None:
    """A rule with no restarts left stops, naming the budget, not the configuration (every attempt
    failed at the iteration it resumed from: no progress refilled it)."""
    spent = tuple(RestartRecord(0.0, "transient", OutcomeKind.CRASH, "nccl", 100) for _ in range(2))
    history = RestartHistory(attempt=3, restarts=spent, iteration=100)
    decision = decide(default_policy(), CONFIG, history, now=HOUR)
    assert decision.action is A.STOP
    assert "retry budget exhausted" in decision.reason


def test_a_running_job_is_cancelled_first() -> None:
    """A configuration error settled in a running attempt is acted on at once, as any fatal line."""
    running = Outcome(JobState.RUNNING, "config_error", signal="hub_unreachable", still_running=True)
    decision = decide(default_policy(), running, RestartHistory(iteration=500), now=0.0)
    assert (decision.action, decision.cancel_first) == (A.RESTART, True)


def test_refill_on_training_does_not_refill_it() -> None:
    """megatron_transient refills its budgets when an attempt dies at an iteration no attempt died at
    before; the configuration error's restart refills only on progress past the best iteration, as the
    docs say: a second one short of iteration 1000 stops."""
    policy = load_policy(yaml.safe_load((REPO / "config" / "restart" / "megatron_transient.yaml").read_text()))
    decisions = run(policy, [(CONFIG, 1000), (CONFIG, 990), (CONFIG, 980)])
    assert [a for a, _ in decisions] == [A.RESTART, A.STOP]
