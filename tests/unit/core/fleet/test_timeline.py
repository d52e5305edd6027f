"""The timeline's arithmetic (core/fleet/timeline.py, human.py) with a scripted policy: costs land where they should."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

import pytest

from oellm_autoexp.core.fleet.engine import RESTART, STOP, Reaction, Strike
from oellm_autoexp.core.fleet.faults import Fault
from oellm_autoexp.core.fleet.human import next_check, response_s
from oellm_autoexp.core.fleet.settings import DAY_S, HOUR_S, Human, SimSettings
from oellm_autoexp.core.fleet.timeline import run_policy

SETTINGS = SimSettings(
    gpus=8, days=1.0, checkpoint_min=30, save_s=60, load_s=0, startup_s=100, queue_median_s=0,
    site_drains_p=0.0, pool_factor=1.0,
)  # fmt: skip


@dataclass
class Scripted:
    """Answers every strike with the same reaction; records what it was asked."""

    reaction: Reaction
    name: str = "scripted"
    asked: list[Strike] = field(default_factory=list)

    def react(self, strike: Strike, now: float, bad_nodes: frozenset[str]) -> Reaction:
        self.asked.append(strike)
        return self.reaction

    def human_took_over(self, now: float) -> None:
        return None


def fault(at: float, *, recurs: bool = False, breaks: bool = False, bad_for_s: float = 0.0) -> Fault:
    return Fault(index=0, at_training_s=at, family="f", variant=0, node="f0", breaks_node=breaks,
                 bad_for_s=bad_for_s, lemon=False, slurm_drains=False, recurs=recurs, queue_s=0.0)  # fmt: skip


def test_without_faults_only_start_up_and_saves_are_lost():
    """A day of training: every 30 min + 60 s save a checkpoint; the tail after the last one is shown apart."""
    ledger = run_policy(Scripted(Reaction(RESTART, 0.0)), [], SETTINGS)
    trained = DAY_S - 100
    cycles = int(trained // 1860)
    assert ledger.productive_s == pytest.approx(cycles * 1800)
    assert ledger.losses_s["checkpoint_save"] == pytest.approx(cycles * 60)
    assert ledger.losses_s["uncheckpointed_at_end"] == pytest.approx(trained - cycles * 1860)
    assert ledger.accounted_s() == pytest.approx(DAY_S)


def test_a_fault_loses_the_work_since_the_checkpoint_and_pays_detection_and_start_up():
    """Fault 100 s after the first checkpoint: 100 s lost, 42 s to act, 100 s start-up."""
    ledger = run_policy(Scripted(Reaction(RESTART, 42.0)), [fault(1860 + 100)], SETTINGS)
    assert ledger.losses_s["lost_work"] == pytest.approx(100)
    assert ledger.losses_s["detection_delay"] == pytest.approx(42)
    assert ledger.losses_s["restart_overhead"] == pytest.approx(200)  # the first start and the restart
    assert ledger.restarts == 1 and ledger.accounted_s() == pytest.approx(DAY_S)


def test_restarting_a_fault_that_strikes_every_attempt_burns_attempts_until_a_human_looks():
    """A recurring fault restarted each time: attempts at start-up go to wrong_restart; the backstop ends it."""
    policy = Scripted(Reaction(RESTART, 10.0))
    ledger = run_policy(policy, [fault(1000.0, recurs=True)], SETTINGS)
    assert ledger.losses_s["wrong_restart"] > 0 and ledger.human_interventions == 1
    assert all(s.at_startup for s in policy.asked[1:]) and len(policy.asked) > 2
    assert ledger.losses_s["awaiting_fix"] == pytest.approx(SETTINGS.human.fix_min * 60)


def test_a_restart_that_leaves_a_broken_node_in_lands_on_it():
    """pool_factor 1 and no site drain: the next allocation always holds the broken node."""
    policy = Scripted(Reaction(RESTART, 10.0))
    ledger = run_policy(policy, [fault(1000.0, breaks=True, bad_for_s=3 * HOUR_S)], SETTINGS)
    assert ledger.losses_s["repeated_bad_node"] > 0
    kept_out = Scripted(Reaction(RESTART, 10.0, excluded=frozenset({"f0"})))
    assert (
        run_policy(kept_out, [fault(1000.0, breaks=True, bad_for_s=3 * HOUR_S)], SETTINGS).losses_s.get(
            "repeated_bad_node", 0.0
        )
        == 0.0
    )


def test_a_wrong_stop_waits_for_the_page_to_be_answered():
    """A stop of a fault a restart would have cured: the page's response time is charged to wrong_stop."""
    at = 9 * HOUR_S  # Monday 09:00 after a 100 s start-up, in working hours
    ledger = run_policy(Scripted(Reaction(STOP, 0.0, notified=True)), [fault(at)], SETTINGS)
    assert ledger.losses_s["wrong_stop"] == pytest.approx(SETTINGS.human.day_response_min * 60)


@pytest.mark.parametrize(
    ("t_h", "expected_min"),
    [
        (10, 30), (3, 240), (21, 240), (5 * 24 + 10, 480), (7 * 24 + 9, 30),
        # answered by a later period's response when that comes first: Sunday 23:00 by Monday
        # night's (00:00 + 4 h), Monday 07:30 by the day shift (08:00 + 30 min)
        (6 * 24 + 23, 300), (7.5, 60),
    ],
)  # fmt: skip
def test_a_page_is_answered_by_day_night_or_weekend(t_h, expected_min):
    """Monday 00:00 is zero; days 08-20 Mon-Fri; Saturday and Sunday are the weekend."""
    assert response_s(t_h * HOUR_S, Human()) == pytest.approx(expected_min * 60)


def test_a_later_page_is_never_answered_earlier():
    """Over a fortnight, minute by minute at the edges: the answer time never goes back, so a policy
    that pages sooner (the oracle) never waits longer for the same human."""
    human = Human()
    answers = [t + response_s(t, human) for t in range(0, int(14 * DAY_S), 300)]
    assert all(later >= earlier for earlier, later in pairwise(answers))


@pytest.mark.parametrize(("t_h", "next_h"), [(0, 8), (8, 8), (9, 20), (20.5, 32), (23, 32)])
def test_with_no_supervisor_a_human_looks_at_08_and_20(t_h, next_h):
    assert next_check(t_h * HOUR_S, Human()) == next_h * HOUR_S
