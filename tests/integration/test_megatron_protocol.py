"""Megatron's own exit protocol, judged on real megatron-core 0.19.2 logs recorded on 2 x H200.

tests/fixtures/logs/megatron (plain torchrun runs) and tests/fixtures/logs/megatron_autoexp (the
same job under `autoexp run`): the monitor's own view and judge step, fed the real lines.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import yaml

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.signals import PatternSet, merge_pattern_sets
from oellm_autoexp.core.decide.judge import Judgement, PastDecision, history_from, judge
from oellm_autoexp.core.decide.policy import DecisionAction, load_policy
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.attempt_view import AttemptView
from oellm_autoexp.core.watch.outcome import OutcomeKind
from oellm_autoexp.core.watch.progress import HangConfig
from oellm_autoexp.core.watch.schedule import megatron_schedule

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
PATTERNS = load_patterns(["megatron_production"])
POLICY = load_policy(
    yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "config/restart/megatron_transient.yaml").read_text()
    )
)


def _ended(name: str, state: JobState, exit_code: int, history: list[Judgement] = ()) -> Judgement:  # type: ignore[assignment]
    view = AttemptView(PATTERNS)
    view.mark_running(0.0)
    view.read((LOGS / name).read_text(errors="replace").splitlines(), 1.0)
    past = [PastDecision(j.decision.action.value, float(i), j.evidence) for i, j in enumerate(history)]
    record = JobRecord("1", state, "sacct", exit_code=exit_code, nodes=("node1",))
    return judge(
        POLICY, view.end_verdict(record, 2.0), history_from(past, len(history) + 1, view.last_iteration)
    )


def test_exit_16_from_the_rerun_machinery_restarts_once_then_stops() -> None:
    """nan.log: a NaN at iteration 3, Megatron's rerun state machine saves and exits 16 (torchrun itself
    exits 1): one restart as numerical_instability off its node; the same again, no progress: stop."""
    first = _ended("megatron/nan.log", JobState.FAILED, 1)
    assert (first.decision.action, first.decision.rule, first.outcome.exit_code) == (
        DecisionAction.RESTART, "megatron_rerun", 16)  # fmt: skip
    assert first.evidence.error_type == "numerical_instability" and first.effects.exclude_nodes == ("node1",)
    second = _ended("megatron/nan.log", JobState.FAILED, 1, [first])
    assert second.decision.action is DecisionAction.STOP
    assert second.decision.reason.startswith("retry budget exhausted (attempt 2/1")


def test_sigterm_save_and_exit_0_mid_run_is_resumed_then_completes() -> None:
    """Under autoexp run: the walltime signal reached the ranks as SIGTERM, Megatron saved at 101 and
    exited 0 (not completion: resubmitted by the scheduler rule); the next attempt reached 300/300."""
    first = _ended("megatron_autoexp/walltime_attempt1.log", JobState.COMPLETED, 0)
    assert (first.decision.action, first.outcome.kind, first.decision.rule) == (
        DecisionAction.RESTART, OutcomeKind.EARLY_EXIT, "scheduler")  # fmt: skip
    assert first.evidence.iteration == 101
    last = _ended("megatron_autoexp/walltime_attempt2.log", JobState.COMPLETED, 0, [first])
    assert (last.decision.action, last.decision.reason) == (DecisionAction.STOP, "Job completed successfully")


def test_a_frozen_rank_is_a_hang_not_killed() -> None:
    """stop.log: rank 1 frozen with kill -STOP; rank 0's NCCL watchdog line (then torchrun's forced kill of
    the stuck rank) is judged a hang (collective timeout), never `killed`."""
    for name in ("megatron/stop.log", "megatron_autoexp/stop_attempt1.log"):
        j = _ended(name, JobState.FAILED, 1)
        assert (j.outcome.kind, j.evidence.error_type) == (OutcomeKind.HANG, "nccl_timeout"), name
        assert j.decision.action is DecisionAction.RESTART


def test_a_burst_of_kills_short_of_the_best_iteration_is_restarted_each_time() -> None:
    """2 x H200, 2026-11-26: rank 1 killed in four attempts in a row, each resumed from 50 and killed short of
    the best iteration (last logged 90, 70, 80, 60). Each attempt trained and died somewhere new, so
    refill_on_training gives every restart back; with "past the best iteration" alone the fourth is a stop."""
    names = [f"megatron_autoexp/burst_inproc_attempt{n}.log" for n in (1, 2, 3, 4)]
    history: list[Judgement] = []
    for name in names:
        j = _ended(name, JobState.FAILED, 1, history)
        assert (j.decision.action, j.evidence.error_type) == (DecisionAction.RESTART, "killed"), name
        history.append(j)
    assert [j.evidence.iteration for j in history] == [90, 70, 80, 60]
    assert [j.decision.budget_before for j in history] == [3, 3, 3, 3]
    untrained = POLICY.model_copy(
        update={"rules": [r.model_copy(update={"refill_on_training": False}) for r in POLICY.rules]}
    )
    past: list[Judgement] = []
    for name in names:
        view = AttemptView(PATTERNS)
        view.mark_running(0.0)
        view.read((LOGS / name).read_text(errors="replace").splitlines(), 1.0)
        decisions = [PastDecision(p.decision.action.value, float(i), p.evidence) for i, p in enumerate(past)]
        record = JobRecord("1", JobState.FAILED, "sacct", exit_code=1, nodes=("node1",))
        past.append(
            judge(
                untrained,
                view.end_verdict(record, 2.0),
                history_from(decisions, len(past) + 1, view.last_iteration),
            )
        )
    assert [p.decision.action for p in past] == [DecisionAction.RESTART] * 3 + [DecisionAction.STOP]
    assert past[-1].decision.reason == "retry budget exhausted (attempt 4/3)"


def _read_until_iteration(view: AttemptView, name: str, last: int) -> float:
    """Feed the log's lines up to and including iteration `last`'s, each at its own logged time; that time."""
    stamp = re.compile(r"^ \[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] iteration +(\d+)/")
    at = 0.0
    for line in (LOGS / name).read_text(errors="replace").splitlines():
        found = stamp.match(line)
        if found:
            at = datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC).timestamp()
            view.mark_running(at)
        view.read([line], at)
        if found and int(found.group(2)) == last:
            return at
    raise AssertionError(f"iteration {last} not in {name}")


def test_a_silent_stall_where_nothing_is_due_is_judged_at_the_learned_limit_not_the_plain_floor() -> None:
    """2 x H200, 2026-11-26 (session 9's `silent` scenario): rank 1 frozen after iteration 60 of tiny_gpt (saves
    every 50, no evaluation); NCCL's watchdog was 5 min away. With the schedule the monitor reads from the
    launch arguments and `scheduled_floor_s: 15`, the limit is 10 x the 3.8 s log interval (38 s): the
    monitor restarted 38 s after the last line. Without a schedule the scenario's plain floor (90 s) holds."""
    hang = HangConfig(no_output_timeout_s=150, progress_factor=10, progress_floor_s=90, scheduled_floor_s=15)
    schedule = megatron_schedule({"save_interval": 50, "eval_iters": 0})
    view = AttemptView(PATTERNS, schedule=schedule)
    last = _read_until_iteration(view, "megatron_autoexp/silent_attempt1.log", 60)
    verdict = view.hang_verdict(last + 45.0, hang)
    assert verdict is not None and verdict.hang is not None
    assert 30.0 <= verdict.hang.limit_s <= 45.0
    assert "no evaluation or save due before iteration 70" in verdict.hang.detail
    plain = AttemptView(PATTERNS)
    _read_until_iteration(plain, "megatron_autoexp/silent_attempt1.log", 60)
    assert plain.hang_verdict(last + 45.0, hang) is None
    late = plain.hang_verdict(last + 91.0, hang)
    assert late is not None and late.hang is not None and late.hang.limit_s == 90.0


def test_a_worker_that_gives_up_in_its_own_words_is_restarted_as_a_silent_death() -> None:
    """2 x H100, 2026-11-26 (session 10's `guard` scenario): rank 1's own code gave up at iteration 120 with
    one ERROR log line no pattern knows (a lost data-server connection) and exit 1; torchrun began its
    teardown 4 s later, before it reported the exit code. The teardown triggers the verdict. Until session
    14 the worker's last words named the class (nccl guessed, p=0.972); with session 14's catalogs and
    smoothing they are split (healthy 0.60, nccl 0.37), so no guess is made, and the teardown reads `killed`
    with and without the word model: a restart either way (session 14's 2-GPU run: the same)."""
    name = "megatron_autoexp/guard_attempt1.log"
    lines = (LOGS / name).read_text(errors="replace").splitlines()
    teardown = next(i for i, line in enumerate(lines) if "closing signal SIGTERM" in line)
    for patterns in (PATTERNS, WITHOUT_WORDS):
        view = AttemptView(patterns)
        view.mark_running(0.0)
        view.read(lines[: teardown + 1], 1.0)
        verdict = view.fatal_verdict(60.0)
        assert verdict is not None and verdict.cause is not None
        judged = judge(POLICY, verdict, history_from([], 1, view.last_iteration), view.classifier.signals)
        assert judged.decision.action is DecisionAction.RESTART
        assert judged.outcome.error_type == "killed"
        assert judged.outcome.signal != "vocabulary_guess"
    assert judged_reason(PATTERNS, lines[: teardown + 1]) == "Transient failure detected (error_type=killed)"


def judged_reason(patterns: object, lines: list[str]) -> str:
    view = AttemptView(patterns)  # type: ignore[arg-type]
    view.mark_running(0.0)
    view.read(lines, 1.0)
    verdict = view.fatal_verdict(60.0)
    assert verdict is not None
    return judge(
        POLICY, verdict, history_from([], 1, view.last_iteration), view.classifier.signals
    ).decision.reason


WITHOUT_WORDS = merge_pattern_sets([PATTERNS, PatternSet(vocabulary=False)])
