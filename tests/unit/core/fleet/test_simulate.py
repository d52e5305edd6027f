"""The fleet simulation (core/fleet/): seeded, the oracle a ceiling, unknown faults cost what they cost."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from oellm_autoexp.adapters.fs.fleet_files import read_mix, shipped_families
from oellm_autoexp.core.fleet.autoexp_policy import AutoexpPolicy, Judge
from oellm_autoexp.core.fleet.engine import RESTART, Strike
from oellm_autoexp.core.fleet.faults import Fault
from oellm_autoexp.core.fleet.ledger import LOSSES
from oellm_autoexp.core.fleet.lines import STARTUP_FAULT_S, names_for, render
from oellm_autoexp.core.fleet.mix import load_mix
from oellm_autoexp.core.fleet.settings import settings_from
from oellm_autoexp.core.fleet.simulate import POLICIES, simulate
from oellm_autoexp.core.watch.startup import Startup
from oellm_autoexp.daemon.replay_runs import setup_from_config
from tests.paths import REPO

WEEK = {"days": 7.0, "gpus": 4096}


@pytest.fixture(scope="module")
def setup():  # the monitor's shipped defaults, as `autoexp replay` and `autoexp simulate` compose them
    return setup_from_config(None, [], [])


def test_a_week_with_a_fixed_seed_gives_the_same_numbers_twice(setup):
    """Two runs of the same week and seed agree to the last digit; another seed draws other faults."""
    mix = read_mix("llama3")
    settings = settings_from(mix.settings, {**WEEK, "seed": 7}, "test")
    first, second = simulate(mix, settings, setup), simulate(mix, settings, setup)
    assert first == second
    other = simulate(mix, settings.model_copy(update={"seed": 8}), setup)
    assert other["faults_by_family"] != first["faults_by_family"] or other["policies"] != first["policies"]


@pytest.mark.parametrize("mix_name", ["llama3", "byterobust", "kokolis"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_oracle_is_never_below_any_policy(setup, mix_name, seed):
    """Same faults, instant detection and perfect blame: no policy trains more than the oracle."""
    mix = read_mix(mix_name)
    result = simulate(mix, settings_from(mix.settings, {**WEEK, "seed": seed}, "test"), setup)
    ettr = {name: p["ettr"] for name, p in result["policies"].items()}
    assert set(ettr) == set(POLICIES)
    assert all(ettr["oracle"] >= ettr[name] for name in POLICIES), ettr
    assert result["policies"]["oracle"]["lost_gpu_hours"]["detection_delay"] == 0
    # The oracle whose human answers pages as ours does is still a ceiling for ours (a paging
    # supervisor), below the oracle whose human is there at once.
    assert ettr["autoexp"] <= ettr["oracle_paged"] <= ettr["oracle"], ettr
    # Ours with the pre-flight on suspicion (pairwise) too: a check that finds a node costs an attempt.
    checked = settings_from(mix.settings, {**WEEK, "seed": seed, "preflight_s": 60, "preflight_on_suspicion": True,
                                           "preflight_catches": ["gpu_hw", "network_link"]}, "test")  # fmt: skip
    ours = simulate(mix, checked, setup, ["autoexp"])["policies"]["autoexp"]["ettr"]
    assert ours <= ettr["oracle_paged"], (ours, ettr)


def test_every_second_of_the_horizon_is_accounted_for(setup):
    """Productive time and the loss buckets add up to the allocation's GPU-hours, for every policy."""
    mix = read_mix("kokolis")
    settings = settings_from(mix.settings, WEEK, "test")
    result = simulate(mix, settings, setup)
    total = settings.gpus * settings.days * 24
    for name, p in result["policies"].items():
        assert set(p["lost_gpu_hours"]) == set(LOSSES)
        assert p["productive_gpu_hours"] + sum(p["lost_gpu_hours"].values()) == pytest.approx(
            total, rel=1e-4
        ), name


# pool_factor 1.05: the next allocation almost always holds a broken node left in, and the pool keeps
# spare nodes to exclude it for (pool_factor 1 leaves none: no exclusion can be kept, the cap).
MYSTERY = {
    "name": "mystery",
    "failures_per_1000_node_days": 20.0,
    "families": {
        "mystery": {
            "count": 1,
            "node_fault": 1.0,
            "slurm_drains": False,
            "variants": [
                {"lines": [[0, "frobnicator lost its widget"]], "end": "FAILED:1", "end_after_s": 5}
            ],
        }
    },
    "settings": {"site_drains_p": 0.0, "pool_factor": 1.05, "repair_median_h": 2.0, "lemon_share": 0.0},
}


def test_a_fault_family_the_classifier_does_not_know_shows_as_a_loss(setup):
    """Lines no pattern knows: the monitor sees a plain crash, blames no node, and lands on it again."""
    mix = load_mix(MYSTERY, shipped_families(), "test mix")
    result = simulate(mix, settings_from(mix.settings, WEEK, "test"), setup)
    assert set(result["monitor"]["cases"].values()) == {"crash"}  # no error type: the classifier knew nothing
    ours, oracle = result["policies"]["autoexp"], result["policies"]["oracle"]
    assert ours["lost_gpu_hours"]["repeated_bad_node"] > 0
    assert oracle["lost_gpu_hours"]["repeated_bad_node"] == 0
    assert ours["ettr"] < oracle["ettr"]


def test_a_known_hardware_line_with_its_host_keeps_the_next_attempt_off_the_node(setup):
    """The same setting with an Xid line naming the host: blamed, excluded, no repeat on that node.

    Upstream's cancel and restart lists know no Xid line: the FAILED job is marked finished.
    """
    xid = {**MYSTERY["families"]["mystery"], "variants": [{
        "lines": [[0, "{node} kernel: NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"]],
        "end": "FAILED:1", "end_after_s": 5}]}  # fmt: skip
    mix = load_mix({**MYSTERY, "families": {"xid": xid}}, shipped_families(), "test mix")
    # Exclusions kept past the week: a lemon stays bad 14 days, longer than the 7-day bound.
    result = simulate(mix, settings_from(mix.settings, {**WEEK, "exclusion_ttl_h": 240}, "test"), setup)
    assert set(result["monitor"]["cases"].values()) == {"gpu_hardware"}
    assert result["policies"]["autoexp"]["lost_gpu_hours"]["repeated_bad_node"] == 0
    # Upstream has no pattern for an Xid: the job ends FAILED, is "marked finished" and waits for a look.
    assert result["policies"]["upstream"]["lost_gpu_hours"]["wrong_stop"] > 0


def test_a_budget_run_out_stops_and_waits_for_a_human(tmp_path):
    """At fleet rates faults come in bursts, faster than a resumed attempt regains its lost work:
    with only "past the best iteration" refilling megatron_transient's budget, a week
    (seed 16) runs it out, and the stop pages a human (wrong_stop). The shipped default also refills once an
    attempt trained and died somewhere new (refill_on_training), so that week is not stopped."""
    shipped = (REPO / "config" / "restart" / "megatron_transient.yaml").read_text(encoding="utf-8")
    untrained = shipped.replace("    refill_on_training: true\n", "")
    assert untrained != shipped
    (tmp_path / "restart").mkdir()
    (tmp_path / "restart" / "untrained.yaml").write_text(untrained, encoding="utf-8")
    mix = read_mix("llama3")
    settings = settings_from(mix.settings, {**WEEK, "gpus": 16384, "seed": 16}, "test")
    before = simulate(
        mix, settings, setup_from_config(None, ["restart=untrained"], [str(tmp_path)]), ["autoexp"]
    )
    before = before["policies"]["autoexp"]
    assert any("retry budget exhausted" in reason for reason in before["decisions"])
    assert before["human_interventions"] > 0 and before["lost_gpu_hours"]["wrong_stop"] > 0
    now = simulate(mix, settings, setup_from_config(None, [], []), ["autoexp"])["policies"]["autoexp"]
    assert now["lost_gpu_hours"]["wrong_stop"] < before["lost_gpu_hours"]["wrong_stop"]
    assert now["ettr"] > before["ettr"]


def test_the_oracle_is_never_below_on_short_horizons_where_luck_matters(setup):
    """Two days, many seeds, every policy (upstream's main branch too): no lucky policy beats the oracle."""
    for mix_name in ("llama3", "byterobust"):
        mix = read_mix(mix_name)
        for seed in range(6):
            settings = settings_from(mix.settings, {"days": 2.0, "seed": seed}, "test")
            result = simulate(mix, settings, setup, [*POLICIES, "upstream_main"])
            ettr = {name: p["ettr"] for name, p in result["policies"].items()}
            assert all(ettr["oracle"] >= v for v in ettr.values()), (mix_name, seed, ettr)


def test_a_rank_prefixed_gpu_fault_is_blamed_on_its_node_from_the_layout_line(setup):
    """gpu_hw's ECC variant names no host: the `[rank5]:` prefix and our script's layout line do."""
    mix = read_mix("llama3")
    judge = Judge(setup, mix, settings_from(mix.settings, WEEK, "test"))
    ecc = next(i for i, v in enumerate(mix.families["gpu_hw"].variants) if "ECC" in v.lines[0].text)
    case = judge.case("gpu_hw", ecc, False, 0)
    assert case.cause == "gpu_hardware" and case.blamed == (judge.names.node,)


def test_a_link_down_is_blamed_from_nccl_s_port_event_only_where_nccl_debug_is_set(setup):
    """network_link's link-down variant: with NCCL_DEBUG=WARN (our multi-node script) the node whose
    port went down prints NCCL's async event and is blamed; at start-up (a port already down) and in a
    log without NCCL's lines (upstream's, a one-node job's) nothing names it."""
    mix = read_mix("llama3")
    variants = mix.families["network_link"].variants
    link_down = next(i for i, v in enumerate(variants) if any(not line.at_startup for line in v.lines))
    judge = Judge(setup, mix, settings_from(mix.settings, WEEK, "test"))
    assert judge.case("network_link", link_down, False, 0).blamed == (judge.names.node,)
    assert judge.case("network_link", link_down, True, 0).blamed == ()
    spec = mix.families["network_link"].variants[link_down]
    without = render(spec, judge.names, step_s=10.0, at_startup=False, phase_s=0.0, layout_line=True)
    assert not any("NCCL WARN" in line for line in without.lines)


@pytest.mark.parametrize(("gpus", "at_first_sight"), [(512, False), (4096, True)])
def test_a_completion_error_s_node_is_excluded_at_once_at_scale_else_once_it_fails_again(
    setup, gpus: int, at_first_sight: bool
):
    """network_link's completion-error variant: NCCL's line names its host, but both ends print one.
    On 64 nodes the first strike blames no one; when the broken node fails the next attempt as well
    (at start-up), the node the two failures share is excluded. On 512 nodes (128 or more) the
    named end is excluded at once: a healthy node kept out costs little there, a broken one left
    in costs an attempt (core/decide/recurring_blame.py), as judge() does."""
    mix = read_mix("kokolis")
    variants = mix.families["network_link"].variants
    completion = next(i for i, v in enumerate(variants) if "Got completion" in v.lines[0].text)
    judge = Judge(setup, mix, settings_from(mix.settings, {**WEEK, "gpus": gpus}, "test"))
    first = judge.case("network_link", completion, False, 0)
    assert first.blamed == () and first.named == (judge.names.node,) and first.cause == "nccl"
    fault = Fault(index=0, at_training_s=3600.0, family="network_link", variant=completion, node="f0",
                  breaks_node=True, bad_for_s=86400.0, lemon=False, slurm_drains=False, recurs=False,
                  queue_s=0.0)  # fmt: skip
    ours = AutoexpPolicy(judge)
    once = ours.react(Strike(fault, 0, False, 12000), 3600.0, frozenset({"f0"}))
    again = ours.react(Strike(fault, 1, True, None), 7200.0, frozenset({"f0"}))
    assert once.action == again.action == RESTART
    assert ("f0" in once.excluded) is at_first_sight
    assert "f0" in again.excluded and once.wrong_blame == again.wrong_blame == 0


def test_a_hang_s_watchdog_lines_name_the_node_whose_ranks_never_printed_one(setup):
    """hang's watchdog variant: every rank but the broken node's prints torch's timeout line (4,088 of
    4,096 on 512 nodes); the silent node is blamed, at start-up too. The rendering is what both
    policies read: a one-node job's log has every rank but the faulty one."""
    mix = read_mix("llama3")
    variants = mix.families["hang"].variants
    watchdog = next(i for i, v in enumerate(variants) if any(line.all_peers for line in v.lines))
    judge = Judge(setup, mix, settings_from(mix.settings, WEEK, "test"))
    seen = render(variants[watchdog], judge.names, step_s=10.0, at_startup=False, phase_s=0.0)
    assert sum("Watchdog caught" in line for line in seen.lines) == 4096 - 8
    assert not any(line.startswith(f"[rank{r}]:") for r in range(8) for line in seen.lines)
    assert judge.case("hang", watchdog, False, 0).blamed == (judge.names.node,)
    assert judge.case("hang", watchdog, True, 1).blamed == (judge.names.node,)
    one = render(variants[watchdog], names_for(1), step_s=10.0, at_startup=False, phase_s=0.0)
    assert sum("Watchdog caught" in line for line in one.lines) == 7


def test_the_preflight_finds_the_broken_node_before_training_and_costs_its_seconds(setup):
    """With the check on and catching the family, an attempt that lands on the broken node fails its
    check: judged on the check's own line (blamed, excluded, no budget), the load is not paid;
    every attempt pays the check's seconds. Only ours runs it; the oracle is still the ceiling."""
    mix = load_mix(MYSTERY, shipped_families(), "test mix")
    off = simulate(mix, settings_from(mix.settings, WEEK, "test"), setup, ["autoexp", "upstream", "oracle"])
    settings = settings_from(
        mix.settings, {**WEEK, "preflight_s": 60, "preflight_catches": ["mystery"]}, "test"
    )
    on = simulate(mix, settings, setup, ["autoexp", "upstream", "oracle"])
    assert on["monitor"]["cases"]["preflight/0/startup"] == "preflight_failed"
    ours, ours_off = on["policies"]["autoexp"], off["policies"]["autoexp"]
    assert ours["lost_gpu_hours"]["preflight"] > 0
    assert ours["lost_gpu_hours"]["repeated_bad_node"] < ours_off["lost_gpu_hours"]["repeated_bad_node"]
    assert ours["ettr"] > ours_off["ettr"]
    assert on["policies"]["upstream"] == off["policies"]["upstream"]  # upstream's script has no check
    assert on["policies"]["oracle"]["ettr"] >= ours["ettr"]


def test_a_year_at_16k_gpus_is_simulated_in_under_a_minute(setup):
    """The issue's bound: one simulated year of the Llama 3 mix on 16,384 GPUs, every policy of the
    issue's interface, in well under 60 s (about 13 s on the project's 2-core VM, most of it the hang's
    watchdog cascade: 16,376 lines replayed at each poll phase)."""
    mix = read_mix("llama3")
    settings = settings_from(mix.settings, {"days": 365.0, "gpus": 16384}, "test")
    t0 = time.perf_counter()
    result = simulate(mix, settings, setup, ["autoexp", "upstream", "none", "oracle"])
    assert time.perf_counter() - t0 < 60.0
    assert result["faults"] > 3000  # a year of faults at one every ~2.8 h, all walked


SILENT_LINK = {
    "name": "silent",
    "failures_per_1000_node_days": 20.0,
    "families": {
        "silent": {
            "count": 1,
            "node_fault": 1.0,
            "slurm_drains": False,
            "variants": [
                {
                    "lines": [
                        [600, "[rank{prank}]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank {prank}] "
                              "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
                              "NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
                         {"repeat": 8}],
                    ],
                    "end": "hang",
                }
            ],
        }
    },
    "settings": {"site_drains_p": 0.0, "pool_factor": 1.05, "repair_median_h": 2.0, "lemon_share": 0.0},
}  # fmt: skip


def test_the_check_on_suspicion_runs_only_after_a_failure_that_named_no_node(setup):
    """Peers' watchdog lines name no node: on suspicion the next attempts run the check, which finds the
    node (fewer repeats), at a fraction of the seconds of a check on every attempt. A plain crash is no
    suspicion: the check never runs and costs nothing."""
    mix = load_mix(SILENT_LINK, shipped_families(), "test mix")
    check = {**WEEK, "preflight_s": 60, "preflight_catches": ["silent"]}

    def ours(settings: dict[str, object], which: dict[str, object] = SILENT_LINK) -> dict[str, object]:
        m = load_mix(which, shipped_families(), "test mix")
        return simulate(m, settings_from(m.settings, settings, "test"), setup, ["autoexp"])["policies"][
            "autoexp"
        ]

    off, every = ours(WEEK), ours(check)
    suspect = ours({**check, "preflight_on_suspicion": True})
    assert suspect["lost_gpu_hours"]["repeated_bad_node"] < off["lost_gpu_hours"]["repeated_bad_node"]
    assert 0 < suspect["lost_gpu_hours"]["preflight"] < every["lost_gpu_hours"]["preflight"]
    assert suspect["ettr"] > off["ettr"]
    assert mix.families["silent"].variants[0].hangs
    crash = ours({**check, "preflight_catches": ["mystery"], "preflight_on_suspicion": True}, MYSTERY)
    assert crash["lost_gpu_hours"]["preflight"] == 0


def test_a_silent_start_up_is_judged_at_the_limit_the_job_s_earlier_start_ups_teach(setup):
    """A hang with no line at all, striking an attempt at start-up: judged at startup_timeout_s (1 h) with
    nothing learned, at 2 x the job's start-up once an attempt trained (core/watch/startup.py), as the
    monitor reads it from its attempts table; not twice in a row (the attempt before never trained)."""
    mix = read_mix("kokolis")
    settings = settings_from(mix.settings, WEEK, "test")
    silent = next(
        i for i, v in enumerate(mix.families["hang"].variants) if all(line.after_probe for line in v.lines)
    )
    judge = Judge(setup, mix, settings)
    poll = setup.poll_s
    wait = setup.hang.stack_dump_wait_s  # the verdict waits for the stack-dump probe's answers
    fresh = judge.case("hang", silent, True, 0)
    assert fresh.cause == "hang" and abs(fresh.detect_s + STARTUP_FAULT_S - 3600.0 - wait) <= poll
    restarted = judge.case("hang", silent, True, 0, (Startup(settings.restart_s),))
    assert abs(restarted.detect_s + STARTUP_FAULT_S - 2 * settings.restart_s - wait) <= poll
    fault = Fault(index=0, at_training_s=3600.0, family="hang", variant=silent, node="f0", breaks_node=True,
                  bad_for_s=86400.0, lemon=False, slurm_drains=False, recurs=False, queue_s=0.0)  # fmt: skip
    ours = AutoexpPolicy(judge)
    ours.react(Strike(fault, 0, False, 12000), 3600.0, frozenset({"f0"}))  # the first attempt trained
    learned = ours.react(Strike(fault, 1, True, 12000), 7200.0, frozenset({"f0"}))
    assert (
        abs(learned.detect_s + STARTUP_FAULT_S - 2 * settings.startup_s - wait) <= poll
    )  # its cold start: no load
    not_twice = ours.react(Strike(fault, 2, True, 12000), 12000.0, frozenset({"f0"}))
    assert abs(not_twice.detect_s - fresh.detect_s) <= poll


def _silent_hang_variant(mix):
    """The hang variant whose every line answers the probe: no watchdog line, silence until asked."""
    variants = mix.families["hang"].variants
    return next(i for i, v in enumerate(variants) if all(line.after_probe for line in v.lines))


def test_a_silent_hang_s_node_is_blamed_from_the_stack_dump_probe_only_while_it_is_on(setup):
    """The silent hang (no watchdog line): with the probe on, every rank but the broken node's answers
    it, at start-up too, and the verdict waits for the answers; with `stack_dump_signal: null` no line
    names the node (core/decide/stack_dump_blame.py, docs/hang.md)."""
    mix = read_mix("llama3")
    silent = _silent_hang_variant(mix)
    settings = settings_from(mix.settings, WEEK, "test")
    judge = Judge(setup, mix, settings)
    off = Judge(replace(setup, hang=setup.hang.model_copy(update={"stack_dump_signal": None})), mix, settings)
    for at_startup in (False, True):
        probed, plain = judge.case("hang", silent, at_startup, 0), off.case("hang", silent, at_startup, 0)
        assert probed.cause == plain.cause == "hang"
        assert probed.blamed == (judge.names.node,) and plain.blamed == ()
        assert probed.detect_s == plain.detect_s + setup.hang.stack_dump_wait_s


def test_a_silent_hang_mid_training_is_judged_at_the_scheduled_floor_not_the_plain_one(setup):
    """The simulated job's schedule (a save every checkpoint interval, Megatron's default evaluation) has
    no pause due where the silent hang stands: the verdict comes after `scheduled_floor_s` plus the probe's
    wait, within a poll; with the scheduled floor off it comes after `progress_floor_s`."""
    mix = read_mix("llama3")
    silent = _silent_hang_variant(mix)
    settings = settings_from(mix.settings, WEEK, "test")
    hang = setup.hang
    off = replace(setup, hang=hang.model_copy(update={"scheduled_floor_s": None}))
    poll, wait = setup.poll_s, hang.stack_dump_wait_s
    early = Judge(setup, mix, settings).case("hang", silent, False, 0)
    plain = Judge(off, mix, settings).case("hang", silent, False, 0)
    assert abs(early.detect_s - (hang.scheduled_floor_s + wait)) <= poll
    assert abs(plain.detect_s - (hang.progress_floor_s + wait)) <= poll
    assert early.cause == plain.cause == "hang" and early.blamed == plain.blamed
