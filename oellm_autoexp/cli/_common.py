"""Arguments and loading shared by `config show`, `plan`, `submit` and `run`."""

from __future__ import annotations

import argparse
import os

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.daemon.session import restart_policy
from oellm_autoexp.plan.attempt_plan import check_override_sets
from oellm_autoexp.plan.plan import JobPlan, build_plans


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="experiment YAML (a path, or a name under experiments/)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="dotted overrides (backend.megatron.micro_batch_size=16); +key=value adds a key; "
        "group=option swaps a defaults entry (slurm=local)",
    )
    parser.set_defaults(trailing="overrides")  # `CONFIG --json k=v`: k=v is an override (cli/main.py)
    parser.add_argument(
        "--config-dir",
        action="append",
        default=[],
        help="a directory of config groups searched before $AUTOEXP_CONFIG_DIR, the config/ beside the "
        "experiment file and the shipped groups (repeatable; the first match wins)",
    )


def load_plans(args: argparse.Namespace) -> list[JobPlan]:
    """Every job of the experiment, planned; relative output dirs are taken from the cwd.

    Every override set of the restart policy is applied and validated too (UserError).
    """
    jobs = load_jobs(args.config, args.overrides, args.config_dir)
    plans = build_plans(jobs, os.getcwd())
    for plan in plans:  # a bad adaptive-restart override set fails now, not at its failure
        check_override_sets(plan, restart_policy(plan.config.restart, f"job {plan.name}"))
    return plans
