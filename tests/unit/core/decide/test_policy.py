"""decide(): restart policies, budgets and their reasons. Pure: data and `now` in, Decision out."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from oellm_autoexp.core.decide.policy import (
    Decision,
    DecisionAction,
    RestartHistory,
    RestartPolicy,
    RestartRecord,
    after_restart,
    decide,
    load_policy,
    refill_point,
    restart_delay_s,
    training_refill_point,
)
from oellm_autoexp.core.decide.spend import Spend
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.outcome import Outcome, OutcomeKind
from oellm_autoexp.core.watch.progress import HangKind
from oellm_autoexp.errors import UserError
from tests.paths import REPO

S = JobState
A = DecisionAction
CONFIG_DIR = REPO / "config" / "restart"
HOUR = 3600.0


def shipped(name: str) -> RestartPolicy:
    return load_policy(yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text()))


def one_rule(**rule: Any) -> RestartPolicy:
    return load_policy({"rules": [{"name": "r", **rule}]})


def run_sequence(
    policy: RestartPolicy, outcomes: list[Outcome], iterations: list[int | None] | None = None
) -> list[Decision]:
    """Feed one outcome per attempt through decide(), restarting whenever it says so."""
    history, decisions = RestartHistory(), []
    for n, outcome in enumerate(outcomes):
        reached = iterations[n] if iterations else None
        history = RestartHistory(history.attempt, history.restarts, reached, history.excluded_nodes)
        decision = decide(policy, outcome, history, now=n * HOUR)
        decisions.append(decision)
        if decision.action is not A.RESTART:
            break
        history = after_restart(history, outcome, decision, now=n * HOUR)
    return decisions


def test_four_cancels_give_three_restarts_then_budget_exhausted() -> None:
    """The seed's max_retries scenario: with megatron_transient (max_retries 3), attempts 1-3 are
    cancelled by scancel and restarted; attempt 4 is cancelled and the job stops, saying so."""
    decisions = run_sequence(shipped("megatron_transient"), [Outcome(S.CANCELLED)] * 4)
    assert [d.action for d in decisions] == [A.RESTART, A.RESTART, A.RESTART, A.STOP]
    assert [d.reason for d in decisions[:3]] == ["Transient failure detected (error_type=cancelled)"] * 3
    assert decisions[3].reason == "retry budget exhausted (attempt 4/3)"
    assert [(d.budget_before, d.budget_after) for d in decisions] == [(3, 2), (2, 1), (1, 0), (0, 0)]


@pytest.mark.parametrize(
    ("outcome", "action", "reason"),
    [
        (Outcome(S.FAILED, "oom"), A.STOP, "Permanent failure detected (excluded error_type: oom)"),
        (Outcome(S.OUT_OF_MEMORY), A.STOP, "Permanent failure detected (excluded error_type: oom)"),
        (
            Outcome(S.FAILED, "exception"),
            A.STOP,
            "Permanent failure detected (excluded error_type: exception)",
        ),
        (Outcome(S.FAILED, "nccl"), A.RESTART, "Transient failure detected (error_type=nccl)"),
        (Outcome(S.FAILED, "hang"), A.RESTART, "Transient failure detected (error_type=hang)"),
        (Outcome(S.FAILED, "rendezvous"), A.RESTART, "Transient failure detected (error_type=rendezvous)"),
        (Outcome(S.CANCELLED), A.RESTART, "Transient failure detected (error_type=cancelled)"),
        (
            Outcome(S.CANCELLED, "time_limit"),
            A.RESTART,
            "time limit reached: resubmitted to continue (counts against the budget until an attempt makes progress)",
        ),
        (Outcome(S.NODE_FAIL), A.RESTART, "Transient failure detected (error_type=node_fail)"),
        (
            Outcome(S.PREEMPTED),
            A.RESTART,
            "preempted: resubmitted to continue (counts against the budget until an attempt makes progress)",
        ),
        (
            Outcome(S.CANCELLED, user_cancelled=True),
            A.STOP,
            "Cancelled by user (autoexp cancel); not restarting",
        ),
        (Outcome(S.COMPLETED, exit_code=0), A.STOP, "Job completed successfully"),
        (
            Outcome(S.UNKNOWN),
            A.NONE,
            "state UNKNOWN: waiting for Slurm (never a reason to restart)",
        ),
        (Outcome(S.PENDING), A.NONE, "job still alive (state=PENDING)"),
        (Outcome(S.REQUEUED), A.NONE, "job still alive (state=REQUEUED)"),
        (Outcome(S.PREEMPTED, in_queue=True), A.NONE, "job still alive (state=PREEMPTED)"),
    ],
)
def test_megatron_transient_first_failure(outcome: Outcome, action: DecisionAction, reason: str) -> None:
    """On a job's first attempt, megatron_transient restarts transient failures, stops on
    permanent ones, stops on success and on `autoexp cancel`, and never acts on a job that is
    still queued or whose state Slurm does not know."""
    decision = decide(shipped("megatron_transient"), outcome, RestartHistory(), now=0.0)
    assert (decision.action, decision.reason) == (action, reason)


@pytest.mark.parametrize(
    ("outcome", "action"),
    [
        (Outcome(S.RUNNING, "nccl", still_running=True), A.STOP),
        (Outcome(S.RUNNING, "hang", still_running=True, hang=HangKind.NO_OUTPUT), A.STOP),
        (Outcome(S.RUNNING, "time_limit", still_running=True), A.NONE),
    ],
)
def test_running_job_without_a_rule(outcome: Outcome, action: DecisionAction) -> None:
    """With no fitting rule, a settled fatal line or a hang cancels and stops a running job (it would
    hold its GPUs for the collective timeout, or until walltime); a time limit is Slurm's to end."""
    decision = decide(load_policy({"rules": []}), outcome, RestartHistory(), now=0.0)
    assert (decision.action, decision.cancel_first) == (action, action is A.STOP)
    assert decision.reason


def test_hang_verdict_in_running_job_cancels_and_restarts() -> None:
    """A hung job never ends by itself: the tracker's verdict on a RUNNING job restarts it,
    cancelling the running attempt first."""
    outcome = Outcome(S.RUNNING, "hang", still_running=True, hang=HangKind.NO_PROGRESS)
    decision = decide(shipped("megatron_transient"), outcome, RestartHistory(), now=0.0)
    assert decision.action is A.RESTART
    assert decision.reason == "Transient failure detected (error_type=hang)"
    assert decision.cancel_first


@pytest.mark.parametrize(
    ("error_type", "action", "cancel_first"),
    [
        ("nccl_timeout", A.RESTART, True),  # a collective timeout: restart now
        ("nccl", A.RESTART, True),  # the peers of a lost rank block in NCCL: restart now
        ("oom", A.STOP, True),  # permanent: stop now, not when the blocked peers die
        ("numerical_instability", A.NONE, False),  # wait_for_end_on: Megatron saves and exits 16 itself
        ("time_limit", A.NONE, False),  # the scheduler ends it; its end state decides
        ("preempted", A.NONE, False),
    ],
)
def test_settled_fatal_line_in_a_running_job(
    error_type: str, action: DecisionAction, cancel_first: bool
) -> None:
    """A settled fatal line in a RUNNING job is acted on at once (cancel, then restart or stop), except
    what the scheduler ends by itself and what the rule waits for (`wait_for_end_on`)."""
    outcome = Outcome(S.RUNNING, error_type, still_running=True)
    decision = decide(shipped("megatron_transient"), outcome, RestartHistory(), now=0.0)
    assert (decision.action, decision.cancel_first) == (action, cancel_first)
    assert decision.reason


def test_act_on_fatal_line_can_be_turned_off_per_rule() -> None:
    """A rule with `act_on_fatal_line: false` waits for the job's end, unless the type is in early_cancel_on."""
    policy = load_policy(
        {"rules": [{"name": "r", "act_on_fatal_line": False, "early_cancel_on": ["nccl_timeout"]}]}
    )
    waits = decide(policy, Outcome(S.RUNNING, "oom", still_running=True), RestartHistory(), now=0.0)
    acts = decide(policy, Outcome(S.RUNNING, "nccl_timeout", still_running=True), RestartHistory(), now=0.0)
    assert (waits.action, acts.action) == (A.NONE, A.RESTART)
    assert "act_on_fatal_line off" in waits.reason


@pytest.mark.parametrize(
    ("error_type", "budget", "reason"),
    [
        ("nccl", 2, "retry budget exhausted for error_type=nccl (attempt 3/2)"),
        ("hang", 1, "retry budget exhausted for error_type=hang (attempt 2/1)"),
    ],
)
def test_error_type_budget_runs_out_before_the_rule_budget(error_type: str, budget: int, reason: str) -> None:
    """A per-error-type budget stops a job that keeps failing the same way while the rule's
    own budget (max_retries 10) still has room; the reason names the error type and numbers."""
    policy = one_rule(max_retries=10, error_type_budgets={error_type: budget})
    decisions = run_sequence(policy, [Outcome(S.FAILED, error_type)] * 10)
    assert len(decisions) == budget + 1
    assert decisions[-1].action is A.STOP
    assert decisions[-1].reason == reason


def test_error_type_budget_counts_only_its_type() -> None:
    """Restarts for other error types do not use up a per-error-type budget."""
    policy = one_rule(max_retries=10, error_type_budgets={"nccl": 1})
    outcomes = [Outcome(S.FAILED, "nccl"), Outcome(S.FAILED, "killed"), Outcome(S.FAILED, "killed")]
    assert [d.action for d in run_sequence(policy, outcomes)] == [A.RESTART] * 3


def test_megatron_transient_gives_a_cuda_error_one_retry() -> None:
    """A CUDA error may be node trouble (no device, launch failure) or a kernel bug that
    repeats: megatron_transient tries once more, then stops saying why."""
    decisions = run_sequence(shipped("megatron_transient"), [Outcome(S.FAILED, "cuda_error")] * 3)
    assert [d.action for d in decisions] == [A.RESTART, A.STOP]
    assert decisions[-1].reason == "retry budget exhausted for error_type=cuda_error (attempt 2/1)"


def test_megatron_transient_allows_two_hang_restarts() -> None:
    """megatron_transient keeps the seed's "max 2 stall restarts" as a per-error-type budget."""
    decisions = run_sequence(shipped("megatron_transient"), [Outcome(S.FAILED, "hang")] * 3)
    assert decisions[-1].reason == "retry budget exhausted for error_type=hang (attempt 3/2)"


@pytest.mark.parametrize(
    ("now_h", "action", "reason"),
    [
        (3.0, A.STOP, "restart rate limit: 3 restarts in the last 6h (max 3)"),
        (6.5, A.RESTART, "Transient failure detected (error_type=crash)"),
    ],
)
def test_window_limits_the_restart_rate(now_h: float, action: DecisionAction, reason: str) -> None:
    """With at most 3 restarts in 6 h, a fourth failure inside the window stops the job; once the
    oldest restart has left the window, restarting is allowed again."""
    policy = one_rule(max_retries=10, window={"max_restarts": 3, "hours": 6})
    restarts = tuple(RestartRecord(t * HOUR, "r", OutcomeKind.CRASH) for t in (0.0, 1.0, 2.0))
    decision = decide(policy, Outcome(S.FAILED), RestartHistory(4, restarts), now=now_h * HOUR)
    assert (decision.action, decision.reason) == (action, reason)


@pytest.mark.parametrize(
    ("cooldown_s", "backoff", "delays"),
    [
        (0.0, None, [0.0, 0.0, 0.0]),
        (30.0, None, [30.0, 30.0, 30.0]),
        (60.0, {"factor": 2.0, "max_s": 300.0}, [60.0, 120.0, 240.0, 300.0, 300.0]),
        (10.0, {"factor": 3.0, "max_s": 1000.0}, [10.0, 30.0, 90.0]),
    ],
)
def test_delay_grows_with_backoff_and_is_capped(
    cooldown_s: float, backoff: dict[str, float] | None, delays: list[float]
) -> None:
    """Restart n (0-based) waits cooldown_s x factor**n, never more than max_s; without backoff
    every restart waits cooldown_s."""
    policy = one_rule(max_retries=len(delays), cooldown_s=cooldown_s, backoff=backoff)
    decisions = run_sequence(policy, [Outcome(S.FAILED)] * len(delays))
    assert [d.delay_s for d in decisions] == delays
    assert [restart_delay_s(policy.rules[0], n) for n in range(len(delays))] == delays


@pytest.mark.parametrize(
    ("refill", "iterations", "actions"),
    [
        # Each attempt gets further than any before: the single retry is given back every time.
        (True, [100, 150, 200, 250], [A.RESTART] * 4),
        # Resumed from a checkpoint and failed again below the best iteration: no refill.
        (True, [100, 90], [A.RESTART, A.STOP]),
        # No iteration known at all: nothing to refill on.
        (True, [None, None], [A.RESTART, A.STOP]),
        # Without refill, progress does not matter.
        (False, [100, 150], [A.RESTART, A.STOP]),
    ],
)
def test_refill_on_progress(
    refill: bool, iterations: list[int | None], actions: list[DecisionAction]
) -> None:
    """A job that got past its best iteration since the last restart gets its budget back."""
    policy = one_rule(max_retries=1, refill_on_progress=refill)
    decisions = run_sequence(policy, [Outcome(S.FAILED)] * len(iterations), iterations)
    assert [d.action for d in decisions] == actions


def test_exhausted_after_refill_says_where_counting_started() -> None:
    """When a refilled budget runs out, the reason says since which iteration it was counted
    and which job attempt this is, since the two numbers then differ."""
    policy = one_rule(max_retries=1, refill_on_progress=True)
    decisions = run_sequence(policy, [Outcome(S.FAILED)] * 3, [100, 150, 140])
    assert decisions[-1].reason == (
        "retry budget exhausted (attempt 2/1; counted since progress to iteration 150; rule r, job attempt 3)"
    )


@pytest.mark.parametrize(
    ("iterations", "actions"),
    [
        # Resumed below the best and died again at new points (a burst of faults): trained, refilled.
        ([100, 90, 80, 95], [A.RESTART] * 4),
        # Died starting up (no iteration logged): a crash loop, counted.
        ([100, None, None], [A.RESTART, A.RESTART, A.STOP]),
        # Died at the same iteration again (a bad batch, a kernel bug at one shape): counted.
        ([100, 90, 90, 90], [A.RESTART, A.RESTART, A.RESTART, A.STOP]),
        # A handful of early failure points soon runs out: 90 and 95 were seen, so is 90 again.
        ([100, 90, 95, 90, 95], [A.RESTART, A.RESTART, A.RESTART, A.RESTART, A.STOP]),
    ],
)
def test_refill_on_training(iterations: list[int | None], actions: list[DecisionAction]) -> None:
    """An attempt that trained and died where no attempt died before met a new fault: its restart is
    given back even short of the best iteration; a loop at start-up or at one iteration still stops."""
    policy = one_rule(max_retries=2, refill_on_progress=True, refill_on_training=True)
    decisions = run_sequence(policy, [Outcome(S.FAILED)] * len(iterations), iterations)
    assert [d.action for d in decisions] == actions


def test_refill_on_training_leaves_error_type_budgets_to_progress() -> None:
    """A new failure point refills max_retries only: an error type's own budget (a second hang, a
    second CUDA error) is still counted until an attempt gets past the best iteration."""
    policy = one_rule(max_retries=3, refill_on_progress=True, refill_on_training=True,
                      error_type_budgets={"hang": 1})  # fmt: skip
    hang = Outcome(S.FAILED, error_type="hang")
    decisions = run_sequence(policy, [hang, hang], [100, 90])
    assert [d.action for d in decisions] == [A.RESTART, A.STOP]
    assert "error_type=hang" in decisions[-1].reason


@pytest.mark.parametrize(
    ("restart_iterations", "current", "point"),
    [
        ((), None, 0),
        ((100,), None, 0),
        ((100,), 90, 1),
        ((100,), 100, 0),
        ((100, None), 90, 2),
        ((100, 90), 100, 1),
        ((100, 90, 100), None, 1),
    ],
)
def test_training_refill_point(
    restart_iterations: tuple[int | None, ...], current: int | None, point: int
) -> None:
    """The restarts forgiven are those before the last attempt that died at an iteration none died at before."""
    restarts = tuple(RestartRecord(0.0, "r", OutcomeKind.CRASH, iteration=i) for i in restart_iterations)
    history = RestartHistory(len(restarts) + 1, restarts, current)
    assert training_refill_point(history) == point


@pytest.mark.parametrize(
    ("restart_iterations", "current", "point"),
    [
        ((), None, 0),
        ((100,), None, 0),
        ((100,), 90, 0),
        ((100,), 101, 1),
        ((100, 90), 100, 0),
        ((100, 150), 120, 1),
        ((100, None), 150, 2),
        ((None, None), None, 0),
    ],
)
def test_refill_point(restart_iterations: tuple[int | None, ...], current: int | None, point: int) -> None:
    """The restarts forgiven are those before the last attempt that beat every earlier iteration."""
    restarts = tuple(RestartRecord(0.0, "r", OutcomeKind.CRASH, iteration=i) for i in restart_iterations)
    history = RestartHistory(len(restarts) + 1, restarts, current)
    assert refill_point(history) == point


@pytest.mark.parametrize(
    ("exclude", "node", "before", "after"),
    [
        (True, "nid001", (), ("nid001",)),
        (True, "nid001", ("nid000",), ("nid000", "nid001")),
        (True, "nid001", ("nid001",), ("nid001",)),
        (True, None, ("nid000",), ("nid000",)),
        (False, "nid001", (), ()),
    ],
)
def test_exclude_failing_node(
    exclude: bool, node: str | None, before: tuple[str, ...], after: tuple[str, ...]
) -> None:
    """A node the evidence blamed is added to the nodes the next attempt avoids, when the rule
    asks for it; nodes excluded before stay excluded."""
    policy = one_rule(exclude_failing_node=exclude)
    outcome = Outcome(S.FAILED, "gpu_hardware", node=node)
    blamed = (node,) if node else ()
    decision = decide(policy, outcome, RestartHistory(excluded_nodes=before), now=0.0, blamed=blamed)
    assert decision.action is A.RESTART
    assert decision.exclude_nodes == after


def test_megatron_transient_excludes_a_blamed_node_only() -> None:
    """megatron_transient keeps the next attempt off a node the evidence blamed, and off no node
    an NCCL line merely names."""
    policy, outcome = shipped("megatron_transient"), Outcome(S.FAILED, "nccl", node="nid007")
    assert decide(policy, outcome, RestartHistory(), 0.0).exclude_nodes == ()
    assert decide(policy, outcome, RestartHistory(), 0.0, blamed=("nid007",)).exclude_nodes == ("nid007",)


@pytest.mark.parametrize(
    ("rules", "outcome", "action", "reason"),
    [
        ([], Outcome(S.FAILED, "nccl"), A.STOP, "no restart rule matches (kind=crash, error_type=nccl)"),
        (
            [{"name": "ask", "match": {"error_types": ["nccl"]}, "action": "notify"}],
            Outcome(S.FAILED, "nccl"),
            A.NOTIFY,
            "rule ask: notify on kind=crash, error_type=nccl",
        ),
        (
            [{"name": "halt", "match": {"states": ["FAILED"]}, "action": "stop", "reason": "halt on FAILED"}],
            Outcome(S.FAILED),
            A.STOP,
            "halt on FAILED",
        ),
        (
            [
                {"name": "nccl_only", "match": {"kinds": ["crash"], "error_types": ["nccl"]}},
                {"name": "rest", "action": "stop", "reason": "not nccl"},
            ],
            Outcome(S.FAILED, "killed"),
            A.STOP,
            "not nccl",
        ),
    ],
)
def test_rules_are_tried_in_order(
    rules: list[dict[str, Any]], outcome: Outcome, action: DecisionAction, reason: str
) -> None:
    """The first rule whose every selector fits decides; no fitting rule is a stop that says so."""
    decision = decide(load_policy({"rules": rules}), outcome, RestartHistory(), now=0.0)
    assert (decision.action, decision.reason) == (action, reason)


def test_after_restart_builds_the_next_attempts_history() -> None:
    """Carrying out a restart moves to the next attempt, records what caused it and at which
    iteration, and keeps the excluded nodes for the next decision."""
    outcome = Outcome(S.FAILED, "nccl", node="n1")
    history = RestartHistory(attempt=2, iteration=500)
    decision = decide(one_rule(exclude_failing_node=True), outcome, history, now=10.0, blamed=("n1",))
    nxt = after_restart(history, outcome, decision, now=10.0)
    assert nxt == RestartHistory(
        attempt=3,
        restarts=(RestartRecord(10.0, "r", OutcomeKind.CRASH, "nccl", 500),),
        iteration=None,
        excluded_nodes=("n1",),
    )


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
def test_shipped_policies_validate(name: str) -> None:
    """Every shipped config/restart/*.yaml parses with yaml.safe_load and validates."""
    policy = shipped(name)
    assert policy.description


def test_none_policy_never_restarts() -> None:
    """restart: none stops every ended job with its own reason."""
    decision = decide(shipped("none"), Outcome(S.FAILED, "nccl"), RestartHistory(), now=0.0)
    assert (decision.action, decision.reason) == (A.STOP, "restart policy none: never restarting")


def test_default_policy_rate_limits_a_progressing_crash_loop() -> None:
    """default.yaml refills on progress, but a job crashing three times in 6 h stops anyway."""
    decisions = run_sequence(shipped("default"), [Outcome(S.FAILED)] * 4, [100, 200, 300, 400])
    assert decisions[-1].reason == "restart rate limit: 3 restarts in the last 6h (max 3)"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"rules": [{"name": "r", "max_retrys": 3}]},
            "restart.rules.0.max_retrys: Extra inputs are not permitted",
        ),
        (
            {"rules": [{"name": "r", "max_retries": -1}]},
            "restart.rules.0.max_retries: Input should be greater",
        ),
        ({"rules": [{"name": "r", "action": "reboot"}]}, "restart.rules.0.action: Input should be"),
        ({"rules": [{"name": "r", "match": {"kinds": ["crashed"]}}]}, "restart.rules.0.match.kinds.0"),
        ({"rules": [{"name": "r"}, {"name": "r"}]}, "rule names must be unique (repeated: r)"),
        ({"rules": [{"name": "r", "error_type_budgets": {"nccl": -1}}]}, "error_type_budgets must be >= 0"),
        (
            {"rules": [{"name": "r", "config_error_after_training": "once"}]},
            "restart.rules.0.config_error_after_training: Input should be a valid integer",
        ),
    ],
)
def test_bad_policy_is_a_user_error_naming_the_key(data: dict[str, Any], message: str) -> None:
    """A mistyped key or value is reported as one line with its key path, never silently ignored."""
    with pytest.raises(UserError) as info:
        load_policy(data)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("limits", "spent", "reason"),
    [
        (
            {"max_gpu_hours": 10},
            Spend(12.5, 3.0, 3.0, 4),
            "GPU-hour budget spent: 12.5 of 10 GPU-h over 4 attempts",
        ),
        (
            {"max_wall_hours": 2},
            Spend(0.0, 2.5, 2.5, 2),
            "wall-hour budget spent: 2.5 of 2 h over 2 attempts",
        ),
        ({"max_gpu_hours": 10}, Spend(9.0, 3.0, 3.0, 4), None),
        ({"max_gpu_hours": 10}, None, None),  # not measured: no verdict on it
    ],
)
def test_cumulative_budget_stops_with_the_figures(
    limits: dict[str, float], spent: Spend | None, reason: str | None
) -> None:
    """A job whose attempts together spent the policy's GPU-hour or wall-hour budget is stopped with
    the figures, before any per-rule budget; within it, the rule decides as before."""
    policy = load_policy({"rules": [{"name": "r"}], **limits})
    decision = decide(policy, Outcome(S.FAILED, "nccl"), RestartHistory(spent=spent), now=0.0)
    if reason is None:
        assert decision.action is A.RESTART
    else:
        assert (decision.action, decision.reason) == (A.STOP, reason)


@pytest.mark.parametrize(
    ("outcome", "what"),
    [(Outcome(S.TIMEOUT), "time limit reached"), (Outcome(S.CANCELLED, "time_limit"), "time limit reached"),
     (Outcome(S.COMPLETED, "exit_before_end", exit_code=0), "saved and exited before the last iteration"),
     (Outcome(S.PREEMPTED), "preempted")],
)  # fmt: skip
def test_planned_resubmissions_say_what_they_are(outcome: Outcome, what: str) -> None:
    """Walltime, exit_interval and preemption restarts are the plan working: the reason names the end,
    the iteration reached and what the budget does; never "Transient failure"."""
    history = RestartHistory(attempt=2, iteration=1200,
                             restarts=(RestartRecord(0.0, "scheduler", OutcomeKind.TIMEOUT, "time_limit", 600),))  # fmt: skip
    decision = decide(shipped("megatron_transient"), outcome, history, now=0.0)
    assert decision.action is A.RESTART
    assert decision.reason == (f"{what} at iteration 1200: resubmitted to continue (counts against the "
                               "budget only if the next attempt does not get past iteration 1200)")  # fmt: skip
    assert "Transient failure" not in decision.reason


def test_a_planned_end_under_a_rule_without_refill_names_the_budget_left() -> None:
    policy = load_policy({"rules": [{"name": "r", "match": {"kinds": ["timeout"]}, "max_retries": 2}]})
    decision = decide(policy, Outcome(S.TIMEOUT), RestartHistory(iteration=50), now=0.0)
    assert (
        decision.reason
        == "time limit reached at iteration 50: resubmitted to continue (1 of 2 restarts left)"
    )
