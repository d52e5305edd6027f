"""`autoexp submit CONFIG [overrides] [--no-monitor]`: render, write and submit every job."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from oellm_autoexp.adapters.executor import Executor, ExecutorError
from oellm_autoexp.adapters.submission import make_executor, state_dir, submit_plan
from oellm_autoexp.cli._common import add_config_args, load_plans
from oellm_autoexp.core.plan import JobPlan, log_path_for


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("submit", help="submit every job of an experiment")
    add_submit_args(parser)
    parser.add_argument(
        "--no-monitor", action="store_true", help="only submit; do not hand the jobs to the monitor"
    )
    parser.set_defaults(func=submit_command)


def add_submit_args(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--dependency", help="sbatch --dependency for every job (e.g. afterany:123)")
    parser.add_argument(
        "--sbatch-arg", action="append", default=[], help="extra sbatch argument, e.g. --exclude=node3"
    )


def extra_sbatch_args(args: argparse.Namespace) -> list[str]:
    extra = list(args.sbatch_arg)
    if args.dependency:
        extra.append(f"--dependency={args.dependency}")
    return extra


def submit_all(args: argparse.Namespace) -> tuple[Executor, list[tuple[JobPlan, str]]]:
    """Plan everything first (bad input submits nothing), then submit job by job."""
    plans = load_plans(args)
    executor = make_executor(plans[0].executor, state_dir(getattr(args, "state_dir", None)))
    return executor, submit_plans(executor, plans, extra_sbatch_args(args))


def submit_plans(
    executor: Executor, plans: Sequence[JobPlan], extra: Sequence[str]
) -> list[tuple[JobPlan, str]]:
    submitted: list[tuple[JobPlan, str]] = []
    for plan in plans:
        try:
            job_id = submit_plan(executor, plan, extra)
        except ExecutorError as exc:
            done = ", ".join(f"{p.name}={i}" for p, i in submitted) or "none"
            raise SystemExit(
                f"autoexp: submitting {plan.name} failed: {exc} (already submitted: {done})"
            ) from None
        print(f"submitted {plan.name}: job {job_id}  log {log_path_for(plan, job_id)}", flush=True)
        submitted.append((plan, job_id))
    return submitted


def submit_command(args: argparse.Namespace) -> int:
    submit_all(args)
    if not args.no_monitor:
        # The monitor daemon is not part of this command yet; `autoexp run` waits for the jobs.
        print("note: no monitor attached; use `autoexp run` to wait for the jobs", flush=True)
    return 0
