"""The fault sequence one simulated job meets: drawn once, replayed under every policy. No I/O.

Faults arrive on the job's *training clock* (seconds spent training, lost work included),
not on the wall clock: every policy meets the same faults in the same order at the same
point of its training, and only what each one costs differs (detection, decisions,
restarts). That is what makes the oracle a ceiling: it pays each fault's unavoidable part
and nothing more, so its effective training time is never below another policy's.

Primary faults form a Poisson process at the job's rate (nodes x failures per node-day),
except that with `burst_p` the next one follows within minutes (correlated bursts). Each
fault draws its family (by the mix's shares), the way it shows in the log (a variant), whether
it breaks a node (and for how long: a lemon stays bad for days, others are repaired after a
heavy-tailed time), and whether it strikes again on every later attempt (a bug, a config).
Draws a policy makes later (does the next allocation land on a broken node; the queue wait of
a second restart) come from `stream(seed, ...)`, keyed by what they are about, so that they
too are the same under every policy that makes them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from oellm_autoexp.core.fleet.mix import Mix
from oellm_autoexp.core.fleet.settings import DAY_S, HOUR_S, SimSettings


@dataclass(frozen=True)
class Fault:
    """One primary fault of the sequence."""

    index: int
    at_training_s: float  # on the training clock
    family: str
    variant: int  # index into the family's variants
    node: str  # the node it is on ("f<index>": each fault its own node, see `breaks_node`)
    breaks_node: bool  # the node is bad until `bad_for_s` has passed (repeats until excluded)
    bad_for_s: float
    lemon: bool
    slurm_drains: bool  # Slurm takes the node out by itself
    recurs: bool  # strikes every later attempt until a human fixes it
    queue_s: float  # the queue wait of the restart that follows it


def stream(seed: int, *key: object) -> random.Random:
    """A random stream for one named draw (same seed and key: same numbers, on any machine)."""
    return random.Random(":".join(str(k) for k in (seed, *key)))


def queue_wait_s(rng: random.Random, settings: SimSettings) -> float:
    """One queue wait after a resubmission (lognormal, capped)."""
    if settings.queue_median_s <= 0:
        return 0.0
    return min(
        rng.lognormvariate(math.log(settings.queue_median_s), settings.queue_sigma), settings.queue_max_s
    )


def sample_faults(mix: Mix, settings: SimSettings) -> list[Fault]:
    """The primary faults over the horizon's training clock (at most the whole horizon)."""
    rng = stream(settings.seed, "faults", mix.name)
    rate_per_s = settings.nodes * mix.failures_per_1000_node_days / 1000.0 / DAY_S
    mean_gap_s = 1.0 / rate_per_s
    # Bursts keep the mean rate: the other gaps are a little longer.
    normal_gap_s = max((mean_gap_s - settings.burst_p * settings.burst_gap_s) / (1 - settings.burst_p), 1.0)
    names = sorted(mix.shares)
    weights = [mix.shares[n] for n in names]
    faults: list[Fault] = []
    at = 0.0
    while True:
        burst = bool(faults) and rng.random() < settings.burst_p
        at += rng.expovariate(1.0 / (settings.burst_gap_s if burst else normal_gap_s))
        if at >= settings.horizon_s:
            return faults
        faults.append(_fault(len(faults), at, rng.choices(names, weights)[0], mix, settings, rng))


def _fault(
    index: int, at: float, family_name: str, mix: Mix, settings: SimSettings, rng: random.Random
) -> Fault:
    family = mix.families[family_name]
    variant = rng.choices(range(len(family.variants)), [v.weight for v in family.variants])[0]
    breaks = rng.random() < family.node_fault
    lemon = breaks and rng.random() < settings.lemon_share
    repair_s = (
        rng.lognormvariate(math.log(max(settings.repair_median_h, 1e-6) * HOUR_S), settings.repair_sigma)
        if settings.repair_median_h > 0
        else 0.0
    )
    return Fault(
        index=index,
        at_training_s=at,
        family=family_name,
        variant=variant,
        node=f"f{index}",
        breaks_node=breaks,
        bad_for_s=settings.lemon_days * DAY_S if lemon else repair_s,
        lemon=lemon,
        slurm_drains=family.slurm_drains,
        recurs=rng.random() < family.recurs,
        queue_s=queue_wait_s(rng, settings),
    )


def site_drains(settings: SimSettings, node: str) -> bool:
    """The site's health checks take this broken node out (one draw per node, every policy alike)."""
    return stream(settings.seed, "site-drain", node).random() < settings.site_drains_p


def repair_seen(fault: Fault, settings: SimSettings) -> bool:
    """Slurm shows the node's repair (a down/drain period ending at `bad_for_s`): every repair of a
    broken node, and a lemon's only when Slurm or the site drained it (else it just comes back)."""
    drained = fault.slurm_drains or site_drains(settings, fault.node)
    return fault.breaks_node and (not fault.lemon or drained)
