"""`autoexp plan CONFIG [overrides] [--json]`: what would be submitted. Nothing is written or submitted."""

from __future__ import annotations

import argparse
import json
from typing import Any

from oellm_autoexp.adapters.executors.factory import slurm_timeout_s
from oellm_autoexp.adapters.executors.slurm import SlurmExecutor
from oellm_autoexp.cli._common import add_config_args, load_plans
from oellm_autoexp.cli._strategy_views import PLAN_COLUMNS, plan_strategy_rows
from oellm_autoexp.cli._views import render_table
from oellm_autoexp.plan.plan import JobPlan


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("plan", help="render every job's sbatch script; submit nothing")
    add_config_args(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable, scripts included")
    parser.add_argument("--scripts", action="store_true", help="also print each rendered script")
    parser.add_argument(
        "--strategies",
        action="store_true",
        help="rank the allocation strategies by Slurm's --test-only start",
    )
    parser.set_defaults(func=plan_command)


def plan_summary(plan: JobPlan) -> dict[str, Any]:
    return {
        "job_key": plan.job_key,
        "name": plan.name,
        "executor": plan.executor,
        "output_dir": plan.output_dir,
        "checkpoint_dir": plan.checkpoint_dir,
        "log_path": plan.log_path,
        "script_path": plan.script_path,
        "sbatch_args": list(plan.sbatch_args),
        "sweep_values": dict(plan.sweep_values),
    }


def plan_command(args: argparse.Namespace) -> int:
    plans = load_plans(args)
    if args.json:
        print(json.dumps([{**plan_summary(p), "script": p.script} for p in plans], indent=2))
        return 0
    # Nothing is written: the script's path is not printed (it would not exist); submission writes it.
    print(f"{len(plans)} job(s) would be submitted ({plans[0].executor} executor); scripts rendered, "
          "not written (--scripts prints them):")  # fmt: skip
    for plan in plans:
        print(f"  {plan.name}")
        print(f"      log {plan.log_path}   checkpoints {plan.checkpoint_dir}")
        if args.scripts:
            print(plan.script)
        if args.strategies:
            rows = plan_strategy_rows(plan, SlurmExecutor(timeout_s=slurm_timeout_s()))
            print(render_table(rows, PLAN_COLUMNS) if rows else "      (no slurm.strategies)")
    return 0
