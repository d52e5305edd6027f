"""The fleet simulation: one fault sequence, every policy on it, ETTR and losses side by side. No I/O.

`simulate()` draws the faults once (faults.py) and walks the horizon under each policy
(timeline.py): `autoexp` (the monitor's own replay and judgement, autoexp_policy.py),
`upstream` (upstream's production policy, upstream_policy.py), `none` (a human looks twice a
day), `oracle` (instant detection, perfect blame, and a human at once for what needs a
fix: the ceiling) and `oracle_paged` (the same, but its human answers the page as ours does:
the ceiling of what a supervisor can win, since no supervisor changes a human's response).
Seeded: the same inputs give the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oellm_autoexp.core.fleet.autoexp_policy import AutoexpPolicy, Judge
from oellm_autoexp.core.fleet.baselines import NonePolicy, OraclePolicy
from oellm_autoexp.core.fleet.engine import Policy
from oellm_autoexp.core.fleet.faults import sample_faults
from oellm_autoexp.core.fleet.ledger import LOSSES, Ledger
from oellm_autoexp.core.fleet.mix import Mix
from oellm_autoexp.core.fleet.settings import SimSettings
from oellm_autoexp.core.fleet.timeline import run_policy
from oellm_autoexp.core.fleet.upstream_policy import UPSTREAM_MAIN_STATE_RESTARTS, UpstreamPolicy
from oellm_autoexp.core.replay.replay import ReplaySetup

POLICIES = ("autoexp", "upstream", "none", "oracle", "oracle_paged")
EXTRA_POLICIES = ("upstream_main",)  # upstream's main branch: restarts on Slurm states, 300 s inactivity
HOURS_PER_MONTH = 730.0


def simulate(
    mix: Mix,
    settings: SimSettings,
    setup: ReplaySetup,
    policies: Sequence[str] = POLICIES,
    variants: Mapping[str, ReplaySetup] | None = None,
) -> dict[str, Any]:
    """Every policy on the same faults; the JSON-ready result (`--json` prints it).

    `variants`: ours again under other monitor setups (label -> setup), shown as `autoexp[label]`.
    """
    faults = sample_faults(mix, settings)
    judge = Judge(setup, mix, settings)
    ledgers: dict[str, Ledger] = {}
    for name in policies:
        policy = _policy(name, judge, mix, settings)
        # The pre-flight check is ours (config `preflight:`): only our job script runs it.
        ledgers[name] = run_policy(policy, faults, settings, human_at_once=name == "oracle",
                                   preflight=name == "autoexp")  # fmt: skip
    for label, other in (variants or {}).items():
        name = f"autoexp[{label}]"
        ledgers[name] = run_policy(
            AutoexpPolicy(Judge(other, mix, settings), name=name), faults, settings, preflight=True
        )
    return {
        "policies": {name: ledger.to_json(settings.gpus) for name, ledger in ledgers.items()},
        "margins_gpu_hours_per_month": _margins(ledgers, settings),
        "mix": {
            "name": mix.name,
            "source": mix.source,
            "failures_per_1000_node_days": mix.failures_per_1000_node_days,
            "shares": {k: round(v, 4) for k, v in sorted(mix.shares.items())},
        },
        "settings": settings.model_dump(mode="json"),
        "faults": len(faults),
        "faults_by_family": _count(f.family for f in faults),
        "mean_hours_between_faults": round(settings.days * 24 / len(faults), 2) if faults else None,
        "monitor": {
            "replays": judge.replays,
            "restart_policy": setup.policy.description,
            "poll_s": setup.poll_s,
            "fatal_settle_s": setup.early.settle_s,
            "hang": setup.hang.model_dump() if setup.hang else None,
            "cases": {
                f"{k[0]}/{k[1]}{'/startup' if k[2] else ''}": v.cause
                for k, v in sorted(judge.cache.items(), key=lambda kv: kv[0][:4])
                if k[3] == 0
            },
        },
        "loss_buckets": LOSSES,
    }


def _policy(name: str, judge: Judge, mix: Mix, settings: SimSettings) -> Policy:
    if name == "autoexp":
        return AutoexpPolicy(judge)
    if name == "upstream":
        return UpstreamPolicy(mix, settings, judge.names)
    if name == "upstream_main":
        return UpstreamPolicy(mix, settings, judge.names, name=name, state_restarts=UPSTREAM_MAIN_STATE_RESTARTS,
                              inactivity_timeout_s=300.0)  # fmt: skip
    if name == "none":
        return NonePolicy(settings.human)
    if name in ("oracle", "oracle_paged"):
        return OraclePolicy(name=name)
    raise ValueError(f"unknown policy {name!r} (one of {', '.join(POLICIES + EXTRA_POLICIES)})")


def _margins(ledgers: dict[str, Ledger], settings: SimSettings) -> dict[str, float]:
    """ETTR differences as GPU-hours per month of this job (730 h)."""
    per_month = settings.gpus * HOURS_PER_MONTH
    out: dict[str, float] = {}
    ours = ledgers.get("autoexp")
    if ours is None:
        return out
    for other in ("oracle", "oracle_paged", "upstream", "none"):
        if other in ledgers:
            out[f"autoexp_vs_{other}"] = round((ours.ettr - ledgers[other].ettr) * per_month, 1)
    return out


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return dict(sorted(counts.items()))
