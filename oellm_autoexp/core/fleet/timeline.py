"""One job's horizon under one policy: training, faults, decisions, restarts, humans. No I/O.

A discrete-event walk on a virtual clock (nothing sleeps). The job trains; checkpoints
complete every `checkpoint_min` of training plus a blocking save. At each primary fault
(faults.py, on the training clock) the work since the last checkpoint is lost and the policy
is asked what it does (engine.py); the timeline charges what that costs:

- detection: the time from the strike to the action;
- a restart: the cooldown and queue wait, then the start-up; if the fault strikes every attempt
  (a bug, a config), or a broken node was left in the pool and the new allocation lands on it
  (chance 1 / pool_factor), that attempt fails at start-up and the policy is asked again: all of
  it is charged to `wrong_restart` / `repeated_bad_node`;
- a stop: the wait for a human (paged: human.py `response_s`; not paged: the next look), charged
  to `wrong_stop` when a restart was what it needed, else to `awaiting_fix` with the fix;
- the backstop: a crash loop still going at the next look is ended by that human.

A human who acts does the right thing: fixes what needs fixing, keeps every broken node out,
and resubmits (a new session: `Policy.human_took_over`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from oellm_autoexp.core.fleet.engine import HUMAN, STOP, Policy, Reaction, Strike
from oellm_autoexp.core.fleet.faults import Fault, queue_wait_s, site_drains, stream
from oellm_autoexp.core.fleet.human import next_check, response_s
from oellm_autoexp.core.fleet.ledger import Ledger
from oellm_autoexp.core.fleet.preflight import FAMILY as PREFLIGHT
from oellm_autoexp.core.fleet.preflight import caught
from oellm_autoexp.core.fleet.settings import SimSettings

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class _Run:
    def __init__(
        self, policy: Policy, settings: SimSettings, *, human_at_once: bool, preflight: bool
    ) -> None:
        self.policy, self.settings = policy, settings
        # The pre-flight check (preflight.py): its seconds on every attempt, or only on the attempts
        # a policy asks for after a suspect failure (`preflight_on_suspicion`); the families it catches.
        check_s = settings.preflight_s if preflight else 0.0
        self.suspect_s = check_s if settings.preflight_on_suspicion else 0.0
        self.preflight_s = 0.0 if settings.preflight_on_suspicion else check_s
        self.catches = frozenset(settings.preflight_catches) if check_s > 0 else frozenset()
        # The oracle's human is there at once: no wait on any path can beat that, so it stays a ceiling.
        self.human_at_once = human_at_once
        self.horizon = settings.horizon_s
        self.ledger = Ledger(self.horizon)
        self.t = 0.0
        self.attempt_training_s = 0.0  # training in the current attempt (since its start-up)
        self.bad: dict[str, tuple[float, Fault]] = {}  # broken node -> (bad until, its fault)
        self.human_excluded: set[str] = set()
        self.fixed: set[int] = set()  # recurring faults a human fixed

    # -- the clock --------------------------------------------------------------------------------

    def spend(self, cause: str, seconds: float) -> bool:
        """Charge `seconds` (cut at the horizon) to `cause`; False once the horizon is reached."""
        used = min(max(seconds, 0.0), self.horizon - self.t)
        self.ledger.lose(cause, used)
        self.t += used
        return self.t < self.horizon

    def train(self, seconds: float) -> None:
        self.t += seconds
        self.attempt_training_s += seconds

    def close_attempt(self, *, at_end: bool) -> int:
        """Account the attempt's training; returns the iteration it reached."""
        s = self.settings
        cycle = s.checkpoint_s + s.save_s
        done = math.floor(self.attempt_training_s / cycle)
        rest = self.attempt_training_s - done * cycle
        self.ledger.productive_s += done * s.checkpoint_s
        self.ledger.lose("checkpoint_save", done * s.save_s)
        self.ledger.lose("uncheckpointed_at_end" if at_end else "lost_work", rest)
        self.attempt_training_s = 0.0
        return int((self.ledger.productive_s + min(rest, s.checkpoint_s)) / s.step_s)

    # -- the horizon ------------------------------------------------------------------------------

    def run(self, faults: Sequence[Fault]) -> Ledger:
        if not self.spend("restart_overhead", self.settings.startup_s):
            return self.ledger
        if not self.spend("preflight", self.preflight_s):
            return self.ledger
        trained = 0.0  # the training clock the faults are placed on
        for fault in faults:
            gap = fault.at_training_s - trained
            if self.t + gap >= self.horizon:
                break
            self.train(gap)
            trained = fault.at_training_s
            iteration = self.close_attempt(at_end=False)
            self.ledger.faults += 1
            if fault.breaks_node:
                self.bad[fault.node] = (self.t + fault.bad_for_s, fault)
            if not self.handle(fault, iteration):
                return self.ledger
        self.train(self.horizon - self.t)
        self.close_attempt(at_end=True)
        return self.ledger

    def handle(self, fault: Fault, iteration: int) -> bool:
        """Everything from a primary fault until training resumes; False once the horizon is reached."""
        strike = Strike(fault, 0, False, iteration)
        loop_look = next_check(self.t, self.settings.human)
        charge = "detection_delay"
        while True:
            if strike.occurrence and self.t >= loop_look:
                return self.by_human(fault, strike.fault, strike.occurrence)  # the backstop
            reaction = self.policy.react(strike, self.t, self.broken_now())
            self.note(reaction)
            if not self.spend(charge, reaction.detect_s):
                return False
            if reaction.action == HUMAN:
                return self.by_human(fault, strike.fault, strike.occurrence)
            if reaction.action == STOP:
                return self.stopped(fault, strike, reaction)
            self.ledger.restarts += 1
            check_s = self.preflight_s or (self.suspect_s if reaction.preflight else 0.0)
            doomed = self.doom(
                strike.fault, reaction.excluded | self.human_excluded, fault.index, strike.occurrence,
                self.catches if check_s > 0 else frozenset(),
            )  # fmt: skip
            charge_restart = doomed[0] if doomed else None
            queue = self.queue_s(fault, strike.occurrence)
            if not self.spend(charge_restart or "queue_wait", reaction.delay_s + queue):
                return False
            charge, culprit = doomed or ("", fault)
            if culprit.family == PREFLIGHT:  # the check fails before the checkpoint is loaded
                if not self.spend(charge, self.settings.startup_s + check_s):
                    return False
            elif not self.start_attempt(charge_restart, check_s):
                return False
            if doomed is None:
                return True
            strike = Strike(culprit, strike.occurrence + 1, True, None)

    def stopped(self, fault: Fault, strike: Strike, reaction: Reaction) -> bool:
        """The job waits for a human: paged, or found at the next look."""
        human = self.settings.human
        if reaction.notified:
            wait = 0.0 if self.human_at_once else response_s(self.t, human)
        else:
            wait = next_check(self.t, human) - self.t
        needs_fix = strike.fault.recurs and strike.fault.index not in self.fixed
        if not self.spend("awaiting_fix" if needs_fix else "wrong_stop", wait):
            return False
        return self.by_human(fault, strike.fault, strike.occurrence)

    def by_human(self, fault: Fault, culprit: Fault, occurrence: int) -> bool:
        """A human fixes what needs it, keeps every broken node out, and resubmits."""
        self.ledger.human_interventions += 1
        self.policy.human_took_over(self.t)
        if culprit.recurs and culprit.index not in self.fixed:
            self.fixed.add(culprit.index)
            if not self.spend("awaiting_fix", self.settings.human.fix_min * 60.0):
                return False
        self.human_excluded |= self.broken_now()
        if not self.spend("queue_wait", self.queue_s(fault, occurrence)):
            return False
        return self.start_attempt(None, self.preflight_s)

    def start_attempt(self, charge: str | None, check_s: float) -> bool:
        """Launch, checkpoint load and the pre-flight check of a new attempt (`charge`: a doomed one's)."""
        if not self.spend(charge or "restart_overhead", self.settings.restart_s):
            return False
        return self.spend(charge or "preflight", check_s)

    # -- draws ------------------------------------------------------------------------------------

    def doom(self, culprit: Fault, excluded: frozenset[str] | set[str], index: int, occurrence: int,
             catches: frozenset[str]) -> tuple[str, Fault] | None:  # fmt: skip
        """Does the next attempt fail at start-up, and why: a recurring fault, or a broken node left in."""
        if culprit.recurs and culprit.index not in self.fixed:
            return "wrong_restart", culprit
        self.bad = {node: entry for node, entry in self.bad.items() if entry[0] > self.t}  # repaired ones go
        for node, (_, bad) in sorted(self.bad.items()):
            if bad.slurm_drains or node in excluded or self.site_drained(node):
                continue
            draw = stream(self.settings.seed, "same-node", index, occurrence, node)
            strikes_p = self.settings.lemon_strike_p if bad.lemon else 1.0  # a lemon fails now and then
            if draw.random() < self.settings.same_node_p and draw.random() < strikes_p:
                return "repeated_bad_node", caught(bad) if bad.family in catches else bad
        return None

    def site_drained(self, node: str) -> bool:
        """The site's health checks took this broken node out (one draw per node, every policy alike)."""
        return site_drains(self.settings, node)

    def queue_s(self, fault: Fault, occurrence: int) -> float:
        """The first restart after a fault waits its drawn queue time; later ones draw their own."""
        if occurrence == 0:
            return fault.queue_s
        return queue_wait_s(stream(self.settings.seed, "queue", fault.index, occurrence), self.settings)

    def broken_now(self) -> frozenset[str]:
        return frozenset(node for node, (until, _) in self.bad.items() if until > self.t)

    def note(self, reaction: Reaction) -> None:
        self.ledger.strikes += 1
        self.ledger.wrong_blame += reaction.wrong_blame
        self.ledger.decisions[_short(reaction.why)] += 1


def _short(reason: str) -> str:
    """A decision's reason without the numbers that make every one unique."""
    return _NUMBER.sub("N", reason)[:120] or "-"


def run_policy(
    policy: Policy,
    faults: Sequence[Fault],
    settings: SimSettings,
    *,
    human_at_once: bool = False,
    preflight: bool = False,
) -> Ledger:
    """The horizon under `policy`: the ledger of where each second went.

    `preflight`: the policy's job script runs the pre-flight check (settings.preflight_s > 0).
    """
    return _Run(policy, settings, human_at_once=human_at_once, preflight=preflight).run(faults)
