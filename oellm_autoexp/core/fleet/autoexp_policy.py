"""Our monitor under fleet faults: its own replay, judge, budgets, blame and exclusions. No I/O.

Nothing here re-implements a decision. Each fault's lines go through `replay_lines`
(core/replay/replay.py): the classifier, the attempt view, the hang tracker, the settle window
and `judge()` on a virtual clock, exactly as `autoexp replay` runs them. That replay is cached
per (family, variant, start-up or not, poll phase): a year of faults needs a few dozen.

A strike at start-up (an attempt that never trains) is judged with the start-up limit the job's
earlier attempts taught (core/watch/startup.py, as the monitor reads it from its attempts table):
each attempt that trained started up in the setting's `startup_s` (the first) or `startup_s` +
`load_s` (a restart); its replay is cached per limit as well.

What the cache keeps is what does not depend on the job's past: when the verdict came, its
`Outcome` (core/watch/outcome.py) and the nodes the evidence blames (core/decide/node_blame.py,
against the attempt's real allocation, as the monitor passes it). What does depend on the
past is asked for every fault: `decide()` (core/decide/policy.py) with the job's restart
history (budgets, refills, rate windows, backoff) and its exclusions in force
(core/decide/exclusions.py `in_force`: until the node is seen repaired, at most the upper
bound, capped by the pool's spare nodes), as the monitor builds them before a decision. What
Slurm would show of a repair (a node event ending when the repair ends; none for a lemon the site
never drained, faults.py `repair_seen`) is the simulation's stand-in for `sacctmgr show event`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.decide.exclusions import (
    Exclusion,
    InForce,
    exclusions_from_blame,
    in_force,
    lift,
    merge_exclusions,
)
from oellm_autoexp.core.decide.judge import blame_for, blame_share
from oellm_autoexp.core.decide.node_blame import Blame
from oellm_autoexp.core.decide.policy import DecisionAction, RestartHistory, RestartRecord, decide
from oellm_autoexp.core.decide.recurring_blame import blame_again, network_named
from oellm_autoexp.core.decide.suspicion import Failure, suspicion
from oellm_autoexp.core.fleet.engine import RESTART, STOP, Reaction, Strike
from oellm_autoexp.core.fleet.faults import Fault, repair_seen
from oellm_autoexp.core.fleet.lines import Names, names_for, probe_answers, render
from oellm_autoexp.core.fleet.mix import Mix
from oellm_autoexp.core.fleet.preflight import FAMILY as PREFLIGHT
from oellm_autoexp.core.fleet.preflight import VARIANT as PREFLIGHT_VARIANT
from oellm_autoexp.core.fleet.settings import SimSettings
from oellm_autoexp.core.jobs.slurm_nodes import NodeEvent
from oellm_autoexp.core.replay.replay import ReplaySetup, replay_lines
from oellm_autoexp.core.watch.outcome import Outcome, OutcomeKind
from oellm_autoexp.core.watch.progress import StartupLimit
from oellm_autoexp.core.watch.schedule import PauseSchedule, megatron_schedule
from oellm_autoexp.core.watch.startup import Startup, startup_limit

PHASES = 4  # poll phases a fault can fall on (a quarter of the poll interval apart)
EPOCH = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday: the simulated clock's zero
JOB = "fleet"
# The repair's drain is seen to begin this long after the fault: after any verdict (the slowest, a
# start-up hang at the 1 h limit), so it is never the failure's own period (exclusions.py `repair_of`).
JUDGED_WITHIN_S = 3600.0 + 600.0


@dataclass(frozen=True)
class Case:
    """The monitor's view of one kind of strike, independent of the job's past."""

    detect_s: float  # from the fault's first line (or silence) to the verdict acted on
    outcome: Outcome | None  # None: the monitor never decided (nothing to act on)
    blamed: tuple[str, ...]  # canonical node names the evidence singles out
    cause: str | None  # the error type judged on
    replay_reason: str  # the decision with an empty history (what `autoexp replay` says)
    named: tuple[str, ...] = ()  # canonical nodes whose NCCL network errors the lines hold


def simulated_schedule(settings: SimSettings) -> PauseSchedule:
    """The simulated Megatron job's pauses: Megatron's default evaluation (100 iterations every 1000)
    and a save every checkpoint interval, in iterations of `step_s` (it logs every iteration)."""
    save_every = max(1, round(settings.checkpoint_s / settings.step_s))
    schedule = megatron_schedule({"save_interval": save_every})
    assert schedule is not None  # whole numbers only
    return schedule


@dataclass
class Judge:
    """Replays of strikes through the monitor's own steps, cached per (family, variant, ...)."""

    setup: ReplaySetup
    mix: Mix
    settings: SimSettings
    names: Names = field(init=False)
    cache: dict[tuple[str, int, bool, int, StartupLimit | None], Case] = field(default_factory=dict)
    replays: int = 0
    # Blame per (family, variant, start-up, lines read, outcome): the poll phases of one variant
    # render the same texts in the same order (only their times differ), so the same lines read
    # give the same blame; a hang's watchdog cascade on 16k ranks is worth classifying once.
    # Each entry: (nodes blamed, nodes NCCL's network errors named).
    blames: dict[tuple[str, int, bool, int, Outcome], tuple[tuple[str, ...], tuple[str, ...]]] = field(
        default_factory=dict
    )

    def __post_init__(self) -> None:
        self.names = names_for(self.settings.nodes)
        if self.setup.schedule is None:  # the simulated job's launch arguments, as the monitor reads them
            self.setup = replace(self.setup, schedule=simulated_schedule(self.settings))

    def case(
        self, family: str, variant: int, at_startup: bool, phase: int, startups: tuple[Startup, ...] = ()
    ) -> Case:
        """`startups`: the job's earlier attempts' start-ups (they matter only to a strike at start-up)."""
        if not at_startup or self.setup.hang is None:
            startups = ()
        limit = startup_limit(startups, self.setup.hang) if startups and self.setup.hang else None
        key = (family, variant, at_startup, phase, limit)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = self._replay(family, variant, at_startup, phase, startups)
        return found

    def _replay(
        self, family: str, variant: int, at_startup: bool, phase: int, startups: tuple[Startup, ...]
    ) -> Case:
        self.replays += 1
        setup = replace(self.setup, startups=startups)
        spec = PREFLIGHT_VARIANT if family == PREFLIGHT else self.mix.families[family].variants[variant]
        seen = render(spec, self.names, step_s=self.settings.step_s, at_startup=at_startup,
                      phase_s=self.setup.poll_s * phase / PHASES, ranks_per_node=self.settings.gpus_per_node,
                      layout_line=True, nccl_debug=self.settings.nodes > 1)  # fmt: skip
        result = replay_lines(seen.lines, seen.times_s, seen.slurm, setup, source=f"fleet:{family}")
        if not result.decisions:
            return Case(seen.slurm.end_at_s - seen.fault_at_s, None, (), None, "no decision")
        last = result.decisions[-1]
        outcome = replace(last.judgement.outcome, nodes=len(self.names.allocation))
        # Blame sees every signal read by the verdict, info lines too (the rank layout), as the
        # monitor's judge step does with its classifier's signals.
        read = sum(1 for at in seen.times_s if at <= last.at_s)
        lines, probe_s = seen.lines[:read], self._probe_s(outcome)
        if probe_s is not None:  # the monitor's stack-dump probe: the answers that came within its wait
            lines += probe_answers(spec, self.names, at_startup=at_startup, within_s=probe_s,
                                   ranks_per_node=self.settings.gpus_per_node)  # fmt: skip
        blame, named = self._blame((family, variant, at_startup, read, outcome), lines)
        return Case(
            detect_s=max(last.at_s - seen.fault_at_s, 0.0) + (probe_s or 0.0),
            outcome=outcome,
            blamed=blame,
            cause=outcome.error_type or outcome.kind.value,
            replay_reason=last.judgement.decision.reason,
            named=named,
        )

    def _probe_s(self, outcome: Outcome) -> float | None:
        """The probe's wait when the monitor probes this verdict (a hang of a job of several
        nodes, the probe on: daemon/stack_probe.py), else None."""
        hang = self.setup.hang
        if hang is None or hang.stack_dump_signal is None or outcome.kind is not OutcomeKind.HANG:
            return None
        return hang.stack_dump_wait_s if len(self.names.allocation) > 1 else None

    def _blame(
        self, key: tuple[str, int, bool, int, Outcome], read: tuple[str, ...]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        found = self.blames.get(key)
        if found is None:
            signals = classify_lines(read, self.setup.patterns)
            outcome, allocation = key[4], self.names.allocation
            found = self.blames[key] = (
                blame_for(self.setup.policy, outcome, signals, allocation).nodes,
                network_named(signals, allocation, outcome.error_type),
            )
        return found


@dataclass
class AutoexpPolicy:
    """`autoexp`: the shipped monitor with a restart policy, patterns and settings (`setup`)."""

    judge: Judge
    name: str = "autoexp"
    restarts: list[RestartRecord] = field(default_factory=list)
    exclusions: list[Exclusion] = field(default_factory=list)
    attempt: int = 1
    failures: list[Failure] = field(default_factory=list)  # restarted ones, for the pre-flight's suspicion
    events: dict[str, NodeEvent] = field(
        default_factory=dict
    )  # per node, what Slurm would show of its repair
    lifted: int = 0  # exclusions ended before their upper bound (repaired or capped)
    peak_excluded: int = 0  # the most exclusions in force at once (what the cap has to allow)
    # The job's attempts' start-ups, oldest first (the monitor's attempts table): the learned start-up limit.
    startups: list[Startup] = field(default_factory=list)
    cold_start: bool = True  # the horizon's first attempt is still running (it loaded no checkpoint)

    def react(self, strike: Strike, now: float, bad_nodes: frozenset[str]) -> Reaction:
        fault = strike.fault
        if strike.occurrence == 0:
            self._note_repair(fault, now)
        phase = (fault.index + strike.occurrence) % PHASES
        case = self.judge.case(fault.family, fault.variant, strike.at_startup, phase, tuple(self.startups))
        self._note_startup(strike)
        decided_at = now + case.detect_s
        if case.outcome is None:
            return Reaction(STOP, case.detect_s, why=case.replay_reason, cause=None)
        stamp = EPOCH + timedelta(seconds=decided_at)
        active = self._in_force(stamp).nodes
        history = RestartHistory(
            attempt=self.attempt,
            restarts=tuple(self.restarts),
            iteration=strike.iteration,
            excluded_nodes=active,
        )
        blamed = tuple(self._real(node, fault.node) for node in case.blamed)
        named = tuple(self._real(node, fault.node) for node in case.named)
        # The attempt's size, as the monitor's judge() sets it from the allocation (a rule's `min_nodes`).
        size = len(self.judge.names.allocation)
        outcome = replace(case.outcome, nodes=size)
        if not blamed:  # as judge() does: a node NCCL's network errors named in an earlier failure too
            share = blame_share(self.judge.setup.policy, outcome)
            blamed = blame_again(named, self.restarts, decided_at, size, share).nodes
        decision = decide(self.judge.setup.policy, outcome, history, decided_at, blamed=blamed)
        if decision.action is not DecisionAction.RESTART:
            return Reaction(STOP, case.detect_s, notified=True, why=decision.reason, cause=case.cause)
        kept = [Blame(n, "fleet simulation", "log") for n in blamed if n in decision.exclude_nodes]
        ttl = timedelta(hours=self.judge.settings.exclusion_ttl_h)
        self.exclusions = merge_exclusions(
            self.exclusions, exclusions_from_blame(JOB, kept, stamp, ttl), stamp
        )
        self.restarts.append(
            RestartRecord(
                time_s=decided_at, rule=decision.rule or "", kind=case.outcome.kind,
                error_type=case.outcome.error_type, iteration=strike.iteration,
                override_set=decision.override_set, named_nodes=named,
            )
        )  # fmt: skip
        self.attempt += 1
        # As the submitter asks before rendering the next attempt (config `preflight.on_suspicion`).
        self.failures.append(Failure(decided_at, case.cause, blamed))
        suspect = suspicion(self.failures, decided_at, self.judge.settings.suspicion_h * 3600.0)
        return Reaction(
            RESTART, case.detect_s, delay_s=decision.delay_s,
            excluded=frozenset(self._in_force(stamp).nodes),
            why=decision.reason, cause=case.cause,
            wrong_blame=sum(1 for n in blamed if n != fault.node), preflight=suspect is not None,
        )  # fmt: skip

    def _note_startup(self, strike: Strike) -> None:
        """The struck attempt's start-up, as the monitor would have written it (None: it never trained)."""
        settings = self.judge.settings
        if strike.at_startup:
            self.startups.append(Startup(None))
        else:
            self.startups.append(Startup(settings.startup_s if self.cold_start else settings.restart_s))
        self.cold_start = False

    def excluded_at(self, now: float) -> frozenset[str]:
        """The nodes still excluded at `now` (exclusions expire, or end with a repair)."""
        return frozenset(self._in_force(EPOCH + timedelta(seconds=now)).nodes)

    def human_took_over(self, now: float) -> None:
        # A human resubmits: a new session, so the budgets start again; exclusions stay (the store keeps them).
        self.restarts, self.attempt, self.failures, self.startups = [], 1, [], []

    def _in_force(self, stamp: datetime) -> InForce:
        """The exclusions in force at `stamp`, as the monitor asks before a submission; the lifted
        ones are ended, as the store ends their rows."""
        settings = self.judge.settings
        if not settings.exclusion_until_repaired:  # the rule before #29: a fixed expiry, no cap
            return InForce(tuple(e for e in self.exclusions if e.is_active(stamp)), ())
        # As the monitor reads them: the events of the excluded nodes only.
        events = [self.events[e.node] for e in self.exclusions if e.node in self.events]
        verdict = in_force(self.exclusions, events, stamp, job=JOB, partition_nodes=settings.pool_nodes,
                           job_nodes=settings.nodes, share=settings.exclusion_spare_share)  # fmt: skip
        self.peak_excluded = max(self.peak_excluded, len(verdict.kept))
        if verdict.lifted:
            self.lifted += len(verdict.lifted)
            self.exclusions = lift(self.exclusions, verdict.lifted, stamp)
        return verdict

    def _note_repair(self, fault: Fault, now: float) -> None:
        """The down/drain period Slurm will show for the fault's node, if its repair is seen: the site
        takes the node out after the failure was judged (a period that began before the exclusion is
        the failure itself, core/decide/exclusions.py `repair_of`), and it is back when repaired."""
        if repair_seen(fault, self.judge.settings):
            start = EPOCH + timedelta(seconds=now + JUDGED_WITHIN_S)
            end = max(EPOCH + timedelta(seconds=now + fault.bad_for_s), start)
            self.events[fault.node] = NodeEvent(fault.node, start, end, "DOWN", fault.family)

    def _real(self, canonical: str, faulty: str) -> str:
        """The faulty node's canonical name is the fault's node; any other is a healthy one."""
        return faulty if canonical == self.judge.names.node else f"healthy:{canonical}"
