"""Fleet ETTR: a year of published faults through the monitor, against upstream, no supervisor and the oracle.

    python benchmarks/bench_fleet_ettr.py            # 3 settings x 1 year + what-ifs (~2 min)
    python benchmarks/bench_fleet_ettr.py --quick    # 30 days each, no what-ifs

`autoexp simulate` (core/fleet/) on top: for each published setting (the Llama 3 mix on 16,384
GPUs, ByteRobust's on 9,600, Kokolis' RSC-1 rate on 16,384; a 30-minute checkpoint interval and
each setting's published save and restart costs) ONE fault sequence is drawn and walked under
every policy: ours with the shipped Megatron default (`restart=megatron_transient`, what
`autoexp replay` uses) and with `restart=fleet`, each also with the pre-flight check (60 s per
attempt; catching gpu_hw, and with the pairwise check network_link too; and only on suspicion,
`preflight: on_suspicion`; and with exclusions as before #29, a fixed 24 h), the shipped default
without its learned start-up limit (1 h for every attempt, as before), upstream's production
policy (prod branch) and its main branch, no supervisor, the oracle (human at once) and the
paged oracle (its human answers pages as ours does). The baseline is measured in the same run,
on the same faults; ours, the paged oracle and upstream again on two more seeds (the draw's
spread). Then what-ifs on the Llama 3 setting, one default changed at a time (the figures of
docs/simulate_defaults.md), and the wall time of each 1-year 16k-GPU simulation (goal < 60 s).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, Report, parse_args, save_result, verdict

from oellm_autoexp.adapters.fs.fleet_files import read_mix
from oellm_autoexp.core.fleet.mix import LineSpec, Mix
from oellm_autoexp.core.fleet.settings import settings_from
from oellm_autoexp.core.fleet.simulate import HOURS_PER_MONTH, simulate
from oellm_autoexp.daemon.replay_runs import setup_from_config

SETTINGS = ("llama3", "byterobust", "kokolis")
POLICIES = ("oracle", "oracle_paged", "autoexp", "upstream", "upstream_main", "none")
GOAL_S = 60.0
NOISE_SEEDS = (2, 3, 4, 5)  # the same year under other seeds: how much of a gap is the draw's
PREFLIGHT_S = 60.0  # the check's budget on 1,000 nodes (docs/preflight.md): a conservative cost
SUSPICION: dict[str, Any] = {
    "preflight_s": PREFLIGHT_S, "preflight_catches": ("gpu_hw", "network_link"), "preflight_on_suspicion": True,
}  # fmt: skip
NO_PROBE = "monitoring.hang.stack_dump_signal=null"  # no stack-dump probe before a hang's cancel
# Ours again on the same faults: (key, monitor overrides, settings changes).
OURS_AGAIN: tuple[tuple[str, tuple[str, ...], dict[str, Any]], ...] = (
    ("autoexp_fleet", ("restart=fleet",), {}),
    ("autoexp_preflight", (), {"preflight_s": PREFLIGHT_S}),
    ("autoexp_fleet_preflight", ("restart=fleet",), {"preflight_s": PREFLIGHT_S}),
    (
        "autoexp_fleet_preflight_pairwise",
        ("restart=fleet",),
        {"preflight_s": PREFLIGHT_S, "preflight_catches": ("gpu_hw", "network_link")},
    ),
    # `preflight: on_suspicion` (pairwise): the check only after a failure that may be a node's and named none.
    ("autoexp_suspicion", (), {**SUSPICION}),
    ("autoexp_fleet_suspicion", ("restart=fleet",), {**SUSPICION}),
    # The shipped default with exclusions as before #29 (a fixed 24 h, no repair seen, no cap).
    ("autoexp_exclusions_24h", (), {"exclusion_until_repaired": False, "exclusion_ttl_h": 24}),
    # The shipped default without the learned start-up limit (core/watch/startup.py): 1 h for every attempt.
    ("autoexp_startup_1h", ("+monitoring.hang.startup_floor_s=3600",), {}),
    # The shipped default without the silent-hang probe (before #29's stack dumps).
    ("autoexp_no_stack_probe", (NO_PROBE,), {}),
    # The shipped default without the scheduled floor (the plain 15-min floor everywhere, before session 9).
    ("autoexp_plain_floor", ("monitoring.hang.scheduled_floor_s=null",), {}),
)
# One default changed at a time, on the Llama 3 setting with restart=fleet: (label, monitor
# overrides, simulation settings, a change to the mix).
WHAT_IFS: tuple[tuple[str, tuple[str, ...], dict[str, Any], str | None], ...] = (
    ("restart=fleet (baseline of this table)", ("restart=fleet",), {}, None),
    ("shipped default restart=megatron_transient (refills on progress)", (), {}, None),
    (
        "shipped default without its first exception's try at >= 128 nodes (as before)",
        ("restart=mt_nosize",),
        {},
        None,
    ),
    ("shipped default + pre-flight on suspicion (pairwise)", (), {**SUSPICION}, None),
    ("restart=fleet + pre-flight on suspicion (pairwise)", ("restart=fleet",), {**SUSPICION}, None),
    (
        "pre-flight on suspicion, only the attempt right after (suspicion_h 0)",
        ("restart=fleet",),
        {**SUSPICION, "suspicion_h": 0},
        None,
    ),
    (
        "no NCCL_DEBUG=WARN: NCCL's own lines (the port event) not in the log",
        ("restart=fleet",),
        {},
        "no_nccl_debug",
    ),
    ("Megatron's rerun line naming the GPU's host left out", ("restart=fleet",), {}, "no_rerun_host"),
    (
        "J, not shipped: the check on suspicion also finds a hang's broken node",
        ("restart=fleet",),
        {**SUSPICION, "preflight_catches": ("gpu_hw", "network_link", "hang")},
        None,
    ),
    ("megatron_transient as shipped before: 3 restarts for the job's life", ("restart=mt_life",), {}, None),
    (
        "shipped default without refill_on_training (only progress past the best iteration refills)",
        ("restart=mt_untrained",),
        {},
        None,
    ),
    ("restart=default (2 in a row, 3 in 6 h)", ("restart=default",), {}, None),
    (
        "no rank blame (GPU fault lines without the [rankN]: prefix, as before)",
        ("restart=fleet",),
        {},
        "no_rank",
    ),
    ("every GPU fault's line names its host", ("restart=fleet",), {}, "hosts"),
    # Exclusions (#29): until the node is seen repaired, 7 days at most, half the spare nodes at most.
    (
        "exclusions as before #29: a fixed 24 h, no repair seen, no cap",
        ("restart=fleet",),
        {"exclusion_until_repaired": False, "exclusion_ttl_h": 24},
        None,
    ),
    (
        "no stack-dump probe on a hang (as before): a silent hang names no node",
        ("restart=fleet", NO_PROBE),
        {},
        None,
    ),
    ("exclusions until repaired, 72 h at most (7 days)", ("restart=fleet",), {"exclusion_ttl_h": 72}, None),
    (
        "exclusions until repaired, 14 days at most (7 days)",
        ("restart=fleet",),
        {"exclusion_ttl_h": 336},
        None,
    ),
    ("exclusions until repaired, 2 h at most", ("restart=fleet",), {"exclusion_ttl_h": 2}, None),
    (
        "exclusions until repaired, a tenth of the spare nodes at most (half)",
        ("restart=fleet",),
        {"exclusion_spare_share": 0.1},
        None,
    ),
    (
        "hang floor 300 s instead of 900 s",
        ("restart=fleet", "+monitoring.hang.progress_floor_s=300"),
        {},
        None,
    ),
    ("hang floor 1800 s", ("restart=fleet", "+monitoring.hang.progress_floor_s=1800"), {}, None),
    ("settle window 30 s instead of 5 s", ("restart=fleet", "+monitoring.fatal_settle_s=30"), {}, None),
    (
        "start-up limit not learned: 1 h for every attempt (as before)",
        ("restart=fleet", "+monitoring.hang.startup_floor_s=3600"),
        {},
        None,
    ),
    (
        "start-up limit 3 x the job's start-up instead of 2 x",
        ("restart=fleet", "+monitoring.hang.startup_factor=3"),
        {},
        None,
    ),
    ("site drains 90 % of broken nodes (50 %)", ("restart=fleet",), {"site_drains_p": 0.9}, None),
    ("checkpoint every 10 min", ("restart=fleet",), {"checkpoint_min": 10}, None),
    ("fleet with 10 restarts in a row without progress (5)", ("restart=fleet10",), {}, None),
    ("pre-flight 60 s per attempt, catching gpu_hw", ("restart=fleet",), {"preflight_s": 60}, None),
    (
        "pre-flight 60 s with the pairwise check (gpu_hw, network_link)",
        ("restart=fleet",),
        {"preflight_s": 60, "preflight_catches": ("gpu_hw", "network_link")},
        None,
    ),
)


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=BENCH_DIR, capture_output=True, text=True, check=False
        ).stdout

    return {"commit": git("rev-parse", "HEAD").strip(), "dirty": bool(git("status", "--porcelain").strip())}


def variants_dir() -> str:
    """A config dir with `restart: fleet10` (the shipped fleet policy with 10 restarts in a row) and
    `restart: mt_life` (megatron_transient as shipped before: its transient budget never refills)."""
    restart = BENCH_DIR.parent / "config" / "restart"
    fleet = (restart / "fleet.yaml").read_text(encoding="utf-8")
    fleet10 = fleet.replace("    max_retries: 5  # in a row", "    max_retries: 10  # in a row")
    transient = (restart / "megatron_transient.yaml").read_text(encoding="utf-8")
    untrained = re.sub(r"\n    # \.\.\. and once an attempt trained.*?\n    refill_on_training: true", "",
                       transient, count=1, flags=re.S)  # fmt: skip
    life = untrained.replace("    max_retries: 3\n    refill_on_progress: true\n    error_type_budgets:",
                             "    max_retries: 3\n    error_type_budgets:")  # fmt: skip
    nosize = transient.replace("      min_nodes: 128\n", "      min_nodes: 100000000\n")
    if fleet10 == fleet or life == untrained or nosize == transient or untrained == transient:
        raise SystemExit(
            "config/restart/fleet.yaml or megatron_transient.yaml changed: update variants_dir()"
        )
    root = Path(tempfile.mkdtemp(prefix="fleet-variants-"))
    (root / "restart").mkdir()
    (root / "restart" / "fleet10.yaml").write_text(fleet10, encoding="utf-8")
    (root / "restart" / "mt_life.yaml").write_text(life, encoding="utf-8")
    (root / "restart" / "mt_untrained.yaml").write_text(untrained, encoding="utf-8")
    (root / "restart" / "mt_nosize.yaml").write_text(nosize, encoding="utf-8")
    return str(root)


def hosts_named(mix: Mix) -> Mix:
    """The same mix with every GPU fault showing as the Xid line with its host (variant 0 only)."""
    gpu = mix.families["gpu_hw"]
    only = gpu.model_copy(update={"variants": (gpu.variants[0],)})
    return mix.model_copy(update={"families": {**mix.families, "gpu_hw": only}})


def without_rank_prefix(mix: Mix) -> Mix:
    """The same mix with the faulty rank's lines unprefixed (as the sim wrote them before rank blame)."""
    families = {}
    for name, family in mix.families.items():
        variants = tuple(
            v.model_copy(update={"lines": tuple(
                line.model_copy(update={"text": line.text.replace("[rank{rank}]: ", "")}) for line in v.lines
            )})
            for v in family.variants
        )  # fmt: skip
        families[name] = family.model_copy(update={"variants": variants})
    return mix.model_copy(update={"families": families})


def without_lines(mix: Mix, drop: Callable[[LineSpec], bool]) -> Mix:
    """The same mix without the lines `drop` picks."""
    families = {}
    for name, family in mix.families.items():
        variants = tuple(
            v.model_copy(update={"lines": tuple(line for line in v.lines if not drop(line))})
            for v in family.variants
        )
        families[name] = family.model_copy(update={"variants": variants})
    return mix.model_copy(update={"families": families})


MIX_CHANGES: dict[str, Callable[[Mix], Mix]] = {
    "hosts": hosts_named,
    "no_rank": without_rank_prefix,
    "no_nccl_debug": lambda mix: without_lines(mix, lambda line: line.nccl_debug),
    "no_rerun_host": lambda mix: without_lines(mix, lambda line: "First rerun:" in line.text),
}


def run_setting(name: str, days: float, out: Report) -> dict[str, Any]:
    mix = read_mix(name)
    settings = settings_from(mix.settings, {"days": days, "checkpoint_min": 30, "seed": 1}, name)
    t0 = time.perf_counter()
    result = simulate(mix, settings, setup_from_config(None, [], []), POLICIES)
    wall_s = time.perf_counter() - t0
    rows = dict(result["policies"])
    for key, overrides, changes in OURS_AGAIN:
        again = settings.model_copy(update=changes)
        rows[key] = simulate(mix, again, setup_from_config(None, list(overrides), []), ["autoexp"])[
            "policies"
        ]["autoexp"]
    per_month = settings.gpus * HOURS_PER_MONTH
    total = settings.gpus * settings.days * 24
    for ceiling in ("oracle", "oracle_paged"):
        top = rows[ceiling]
        for row in rows.values():
            suffix = "" if ceiling == "oracle" else "_paged"
            row[f"gap_to_oracle{suffix}_points"] = round(100 * (top["ettr"] - row["ettr"]), 2)
            row[f"gpu_hours_per_month_behind_oracle{suffix}"] = round((top["ettr"] - row["ettr"]) * per_month)
            # Where the gap is, cause by cause (points of the allocation; negative: the ceiling spent more there).
            row[f"gap{suffix}_by_cause_points"] = {
                cause: round(100 * (hours - top["lost_gpu_hours"][cause]) / total, 2)
                for cause, hours in row["lost_gpu_hours"].items()
            }
    noise = noise_over_seeds(mix, settings)
    out(f"{name}: {settings.gpus} GPUs, {days:g} days, {result['faults']} faults "
        f"(one every {result['mean_hours_between_faults']} h), simulated in {wall_s:.1f} s")  # fmt: skip
    for label, row in rows.items():
        out(f"  {label:<34} ETTR {row['ettr']:.3f}  behind the oracle {row['gap_to_oracle_points']:5.1f} points, "
            f"the paged oracle {row['gap_to_oracle_paged_points']:5.1f} = {row['gpu_hours_per_month_behind_oracle_paged']:>9,} "
            f"GPU-h/month  restarts {row['restarts']:>5}  humans {row['human_interventions']:>4}")  # fmt: skip
    out(f"  other seeds {noise}")
    return {
        "mix": result["mix"], "settings": result["settings"], "faults": result["faults"],
        "mean_hours_between_faults": result["mean_hours_between_faults"], "wall_s": round(wall_s, 2),
        "policies": rows, "monitor_cases": result["monitor"]["cases"], "other_seeds": noise,
    }  # fmt: skip


def noise_over_seeds(mix: Mix, settings: Any) -> dict[str, dict[str, float]]:
    """Ours (shipped, fleet) and the paged oracle on other seeds: the gap's spread from the draw alone."""
    out: dict[str, dict[str, float]] = {}
    for seed in NOISE_SEEDS:
        again = settings.model_copy(update={"seed": seed})
        base = simulate(mix, again, setup_from_config(None, [], []), ["autoexp", "oracle_paged", "upstream"])
        fleet = simulate(mix, again, setup_from_config(None, ["restart=fleet"], []), ["autoexp"])
        out[str(seed)] = {
            "autoexp": base["policies"]["autoexp"]["ettr"],
            "autoexp_fleet": fleet["policies"]["autoexp"]["ettr"],
            "oracle_paged": base["policies"]["oracle_paged"]["ettr"],
            "upstream": base["policies"]["upstream"]["ettr"],
        }
    return out


def run_what_ifs(days: float, out: Report) -> list[dict[str, Any]]:
    base_mix = read_mix("llama3")
    out("")
    out(f"what-ifs: llama3, 16384 GPUs, {days:g} days, one default changed at a time")
    rows = []
    config_dir = variants_dir()
    for label, overrides, changes, mix_change in WHAT_IFS:
        mix = MIX_CHANGES[mix_change](base_mix) if mix_change else base_mix
        settings = settings_from(
            mix.settings, {"days": days, "checkpoint_min": 30, "seed": 1, **changes}, "llama3"
        )
        setup = setup_from_config(None, list(overrides), [config_dir])
        result = simulate(mix, settings, setup, ["autoexp", "oracle", "oracle_paged"])
        ours, oracle = result["policies"]["autoexp"], result["policies"]["oracle"]
        row = {"label": label, "overrides": list(overrides), "settings": changes, "ettr": ours["ettr"],
               "oracle_ettr": oracle["ettr"], "oracle_paged_ettr": result["policies"]["oracle_paged"]["ettr"],
               "lost_gpu_hours": ours["lost_gpu_hours"],
               "restarts": ours["restarts"], "human_interventions": ours["human_interventions"]}  # fmt: skip
        rows.append(row)
        out(
            f"  {label:<66} ETTR {ours['ettr']:.3f} (oracle {oracle['ettr']:.3f}, paged "
            f"{row['oracle_paged_ettr']:.3f})  humans {ours['human_interventions']}"
        )
    shutil.rmtree(config_dir, ignore_errors=True)
    return rows


def main() -> None:
    args = parse_args(__doc__)
    out = Report()
    days = 30.0 if args.quick else 365.0
    settings = {name: run_setting(name, days, out) for name in SETTINGS}
    what_ifs = [] if args.quick else run_what_ifs(days, out)
    slowest = max(s["wall_s"] for s in settings.values())
    met = days < 365 or slowest < GOAL_S
    out(verdict(f"a {days:g}-day simulation of each setting (5 policies) in < {GOAL_S:g} s", met))
    save_result("fleet_ettr", args, {
        **git_state(), "days": days, "goal": f"1-year simulation < {GOAL_S:g} s", "goal_met": met,
        "settings": settings, "what_ifs": what_ifs,
    }, out.text)  # fmt: skip


if __name__ == "__main__":
    main()
