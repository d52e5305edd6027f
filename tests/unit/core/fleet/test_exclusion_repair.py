"""The fleet simulation's exclusions go through core/decide/exclusions.py `in_force`, as the monitor's do:
until the node is seen repaired, 7 days at most, capped by the pool's spare nodes."""

from __future__ import annotations

import pytest

from oellm_autoexp.adapters.fs.fleet_files import read_mix
from oellm_autoexp.core.fleet.autoexp_policy import AutoexpPolicy, Judge
from oellm_autoexp.core.fleet.engine import RESTART, Strike
from oellm_autoexp.core.fleet.faults import Fault
from oellm_autoexp.core.fleet.settings import DAY_S, HOUR_S, settings_from
from oellm_autoexp.core.fleet.simulate import simulate
from oellm_autoexp.daemon.replay_runs import setup_from_config

WEEK = {"days": 7.0, "gpus": 4096}
OLD_RULE = {"exclusion_until_repaired": False, "exclusion_ttl_h": 24}  # before #29: 24 h, no cap


@pytest.fixture(scope="module")
def setup():  # the monitor's shipped defaults, as `autoexp simulate` composes them
    return setup_from_config(None, [], [])


def _ecc_fault(judge: Judge, index: int, *, lemon: bool, bad_for_s: float) -> Fault:
    """A GPU fault whose `[rankN]:` line blames its node (test_simulate.py shows it is blamed)."""
    variants = judge.mix.families["gpu_hw"].variants
    ecc = next(i for i, v in enumerate(variants) if "ECC" in v.lines[0].text)
    assert judge.case("gpu_hw", ecc, False, 0).blamed == (judge.names.node,)
    return Fault(index=index, at_training_s=HOUR_S, family="gpu_hw", variant=ecc, node=f"f{index}",
                 breaks_node=True, bad_for_s=bad_for_s, lemon=lemon, slurm_drains=False, recurs=False,
                 queue_s=0.0)  # fmt: skip


def _policy(setup, **changes) -> AutoexpPolicy:  # type: ignore[no-untyped-def]
    mix = read_mix("llama3")
    return AutoexpPolicy(Judge(setup, mix, settings_from(mix.settings, {**WEEK, **changes}, "test")))


def test_a_repaired_node_is_let_back_when_its_repair_ends(setup):
    """A broken node repaired after 10 h: excluded until then, no longer once Slurm shows the repair."""
    ours = _policy(setup)
    fault = _ecc_fault(ours.judge, 0, lemon=False, bad_for_s=10 * HOUR_S)
    reaction = ours.react(Strike(fault, 0, False, 100), HOUR_S, frozenset({"f0"}))
    assert reaction.action == RESTART and "f0" in reaction.excluded
    assert "f0" in ours.excluded_at(HOUR_S + 9 * HOUR_S)
    assert "f0" not in ours.excluded_at(HOUR_S + 11 * HOUR_S)
    assert ours.lifted == 1


def test_a_lemon_nobody_drained_stays_out_for_the_upper_bound(setup):
    """A lemon the site never drained is never seen repaired: out for 7 days (the bound), then back."""
    ours = _policy(setup, site_drains_p=0.0)
    fault = _ecc_fault(ours.judge, 0, lemon=True, bad_for_s=14 * DAY_S)
    ours.react(Strike(fault, 0, False, 100), HOUR_S, frozenset({"f0"}))
    assert "f0" in ours.excluded_at(6 * DAY_S)
    assert "f0" not in ours.excluded_at(8 * DAY_S)
    assert ours.lifted == 0  # over at its bound, not lifted


def test_a_small_pool_caps_the_exclusions_and_lifts_the_oldest(setup):
    """2 job nodes of a 3-node pool: 1 spare, so one exclusion at a time; the newer blame wins."""
    ours = _policy(setup, gpus=16, pool_factor=1.5)
    assert (ours.judge.settings.nodes, ours.judge.settings.pool_nodes) == (2, 3)
    first, second = (_ecc_fault(ours.judge, i, lemon=True, bad_for_s=14 * DAY_S) for i in (0, 1))
    ours.react(Strike(first, 0, False, 100), HOUR_S, frozenset({"f0"}))
    reaction = ours.react(Strike(second, 0, False, 200), 3 * HOUR_S, frozenset({"f0", "f1"}))
    assert reaction.excluded == frozenset({"f1"})
    assert ours.excluded_at(4 * HOUR_S) == frozenset({"f1"}) and ours.lifted == 1


@pytest.mark.parametrize("mix_name", ["llama3", "kokolis"])
def test_until_repaired_keeps_the_oracle_a_ceiling_and_repeats_less_than_24_h(setup, mix_name):
    """On the same faults: the oracles stay above ours with the new rule, and fewer restarts land on a
    broken node than with the 24-hour expiry (a month at 4,096 GPUs; seed 1)."""
    mix = read_mix(mix_name)
    month = {"days": 30.0, "gpus": 4096, "seed": 1}
    new = simulate(
        mix, settings_from(mix.settings, month, "test"), setup, ["autoexp", "oracle", "oracle_paged"]
    )
    old = simulate(mix, settings_from(mix.settings, {**month, **OLD_RULE}, "test"), setup, ["autoexp"])
    ettr = {name: p["ettr"] for name, p in new["policies"].items()}
    assert ettr["autoexp"] <= ettr["oracle_paged"] <= ettr["oracle"], ettr
    lost_new = new["policies"]["autoexp"]["lost_gpu_hours"]["repeated_bad_node"]
    lost_old = old["policies"]["autoexp"]["lost_gpu_hours"]["repeated_bad_node"]
    assert lost_new < lost_old
    assert ettr["autoexp"] >= old["policies"]["autoexp"]["ettr"]
