"""`autoexp simulate`: a fleet's year of published faults through the monitor, ETTR per policy.

The simulation is pure (core/fleet/); this command reads the mix (adapters/fs/fleet_files.py),
composes the monitor's policy and patterns exactly as `autoexp replay` does
(daemon/replay_runs.py), prints the figures and, with `--plot DIR`, draws them.
docs/simulate.md explains the model, the baselines and every default.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from oellm_autoexp.adapters.fs.fleet_files import read_mix, shipped_mixes
from oellm_autoexp.core.fleet.ledger import LOSSES
from oellm_autoexp.core.fleet.settings import settings_from
from oellm_autoexp.core.fleet.simulate import EXTRA_POLICIES, POLICIES, simulate
from oellm_autoexp.daemon.replay_runs import setup_from_config
from oellm_autoexp.errors import UserError

# CLI flag -> settings key (None: not given, the mix's setting stands).
_FLAGS = {
    "gpus": int, "gpus_per_node": int, "days": float, "checkpoint_min": float, "save_s": float,
    "load_s": float, "startup_s": float, "queue_median_s": float, "seed": int, "exclusion_ttl_h": float,
    "site_drains_p": float, "pool_factor": float, "lemon_strike_p": float, "preflight": float,
    "exclusion_spare_share": float,
}  # fmt: skip
_SETTING = {"preflight": "preflight_s"}  # a flag whose settings key differs from its name
_HELP = {
    "preflight": "seconds the pre-flight check adds to each of our attempts (default 0: off)",
    "exclusion_ttl_h": "our exclusions' upper bound; they end sooner when the node is seen repaired (default 168)",
    "exclusion_spare_share": "the share of the pool's spare nodes our exclusions may take (default 0.5)",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate a fleet's published faults through the monitor: ETTR against upstream, none, oracle",
        description=(
            "A discrete-event simulation on a virtual clock: one job of --gpus GPUs for --days, the faults "
            "of a published mix (or your YAML), each one's real log lines judged by the monitor's own "
            "classifier, judge and restart policy; the same faults under upstream's production policy, "
            "no supervisor and the oracle. Default policy: megatron_transient (as `autoexp replay`)."
        ),
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="monitor overrides, as for `autoexp replay`: restart=fleet, monitoring.fatal_settle_s=10")  # fmt: skip
    parser.add_argument("--mix", default="llama3",
                        help=f"a shipped mix ({', '.join(shipped_mixes())}) or a YAML file (docs/simulate.md)")  # fmt: skip
    for flag, kind in _FLAGS.items():
        parser.add_argument(f"--{flag.replace('_', '-')}", dest=flag, type=kind, default=None,
                            help=_HELP.get(flag, "(default: the mix's setting, else docs/simulate.md)"))  # fmt: skip
    parser.add_argument("--preflight-catches", default=None, metavar="FAMILY,...",
                        help="with --preflight S (seconds the check adds to each of our attempts): the fault "
                             "families it finds on a broken node before training (default: gpu_hw; add "
                             "network_link for the pairwise check)")  # fmt: skip
    parser.add_argument("--preflight-on-suspicion", action="store_true",
                        help="with --preflight S: the check only on the attempts after a failure that may be a "
                             "node's and named none (config preflight.on_suspicion), not on every attempt")  # fmt: skip
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help=f"comma-separated, from {', '.join(POLICIES + EXTRA_POLICIES)}")  # fmt: skip
    parser.add_argument("--also", action="append", default=[], metavar="'KEY=VALUE ...'",
                        help="ours again with these monitor overrides, on the same faults (repeatable): "
                             "--also restart=fleet")  # fmt: skip
    parser.add_argument(
        "--experiment", metavar="EXP.yaml", help="take the monitor's policy and patterns from it"
    )
    parser.add_argument("--config-dir", action="append", default=[], metavar="DIR")
    parser.add_argument("--json", action="store_true", help="one JSON object (docs/simulate.md, 'Output')")
    parser.add_argument("--plot", metavar="DIR",
                        help="write PNGs of ETTR against job size and checkpoint interval (needs matplotlib)")  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    mix = read_mix(args.mix)
    given = {_SETTING.get(k, k): getattr(args, k) for k in _FLAGS}
    if args.preflight_on_suspicion:
        given["preflight_on_suspicion"] = True
    if args.preflight_catches is not None:
        given["preflight_catches"] = tuple(f.strip() for f in args.preflight_catches.split(",") if f.strip())
    settings = settings_from(mix.settings, given, f"--mix {args.mix}")
    unknown = sorted(set(settings.preflight_catches) - set(mix.families))
    if unknown:
        raise UserError(f"--preflight-catches: {', '.join(unknown)} is no family of mix {mix.name} "
                        f"(expected some of {', '.join(sorted(mix.families))})")  # fmt: skip
    setup = setup_from_config(args.experiment, args.overrides, args.config_dir)
    policies = _policies(args.policies)
    variants = {
        text: setup_from_config(args.experiment, [*args.overrides, *text.split()], args.config_dir)
        for text in args.also
    }
    result = simulate(mix, settings, setup, policies, variants)
    if args.plot:
        from oellm_autoexp.adapters.fs.fleet_plots import write_plots  # matplotlib only when asked

        result["plots"] = write_plots(args.plot, mix, settings, setup, policies, variants)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(_table(result))
    return 0


def _policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES + EXTRA_POLICIES]
    if unknown or not names:
        raise UserError(f"--policies: unknown {', '.join(unknown) or '(none given)'}; "
                        f"expected some of {', '.join(POLICIES + EXTRA_POLICIES)}")  # fmt: skip
    return names


def _table(result: dict[str, Any]) -> str:
    s, mix = result["settings"], result["mix"]
    head = (f"{mix['name']}: {s['gpus']} GPUs for {s['days']:g} days, checkpoint every {s['checkpoint_min']:g} min "
            f"(save {s['save_s']:g} s), restart {s['startup_s'] + s['load_s']:.0f} s, seed {s['seed']}; "
            f"{result['faults']} faults (one every {result['mean_hours_between_faults']} h); "
            f"monitor replays: {result['monitor']['replays']}")  # fmt: skip
    buckets = [k for k in LOSSES if any(p["lost_gpu_hours"][k] for p in result["policies"].values())]
    rows = ["| policy | ETTR | " + " | ".join(buckets) + " | restarts | humans |",
            "|---|---:|" + "---:|" * len(buckets) + "---:|---:|"]  # fmt: skip
    for name, p in result["policies"].items():
        lost = " | ".join(f"{p['lost_gpu_hours'][k]:,.0f}" for k in buckets)
        rows.append(f"| {name} | {p['ettr']:.3f} | {lost} | {p['restarts']} | {p['human_interventions']} |")
    margins = ", ".join(f"{k}: {v:+,.0f}" for k, v in result["margins_gpu_hours_per_month"].items())
    return "\n".join([head, "lost GPU-hours by cause:", *rows, f"margin, GPU-hours per month: {margins}"])
