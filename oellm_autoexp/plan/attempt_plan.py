"""One attempt's plan: the job's stored config, plus a restart's override set, re-rendered. Pure.

Every attempt is rendered afresh from the job's stored (resolved) config, so that
its script says which attempt it is (`AUTOEXP_ATTEMPT`, `AUTOEXP_PREVIOUS_CAUSE`
in its environment) and, after an adaptive restart (core/decide/policy.py), runs with the
override set the decision applied. The overrides go through the same parsing,
key check and validation as `autoexp plan ... key=value`. Overrides apply to the
resolved config: a value that was interpolated from the changed key at plan time
(`${backend.megatron.micro_batch_size}` elsewhere) is not recomputed.

Each attempt's script has its own file (`job.attempt-N.sbatch` next to `job.sbatch`),
so the script every attempt ran is kept.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Iterable, Sequence
from typing import Any

from oellm_autoexp.config.experiment import JobConfig, validate
from oellm_autoexp.config.overrides import apply_override, parse_override
from oellm_autoexp.config.provenance import Provenance
from oellm_autoexp.config.sweep import SweepPoint
from oellm_autoexp.core.decide.policy import RestartPolicy
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.plan import SINGLE_JOB_KEY, JobPlan, plan_job

ATTEMPT_ENV = "AUTOEXP_ATTEMPT"  # 1 for the first submission, then 2, 3...
PREVIOUS_CAUSE_ENV = "AUTOEXP_PREVIOUS_CAUSE"  # what ended the attempt before ("" for the first)
# Set when this attempt runs the pre-flight check on suspicion (`preflight.on_suspicion`): the cause
# of the failure that named no node (core/decide/suspicion.py).
PREFLIGHT_SUSPECT_ENV = "AUTOEXP_PREFLIGHT_SUSPECT"


def attempt_plan(
    plan: JobPlan, attempt_no: int, previous_cause: str, overrides: Sequence[str], suspect: str | None = None
) -> JobPlan:
    """The plan that attempt `attempt_no` is submitted with (UserError for a bad override).

    `suspect`: the cause of a recent failure that may be a node's and named none; with
    `preflight.on_suspicion` this attempt runs the pre-flight check although `enabled` is off.
    """
    data = _config_data(plan)
    prov = Provenance(default=f"job {plan.name}")
    _apply(data, overrides, prov, f"job {plan.name} attempt {attempt_no}")
    env = data["slurm"].setdefault("env", {})
    env[ATTEMPT_ENV] = str(attempt_no)
    env[PREVIOUS_CAUSE_ENV] = previous_cause
    if checks_on_suspicion(plan, suspect):
        data["preflight"]["enabled"] = True
        env[PREFLIGHT_SUSPECT_ENV] = suspect
    replanned = _replan(plan, data, prov)
    path = posixpath.join(replanned.output_dir, f"job.attempt-{attempt_no}.sbatch")
    return dataclasses.replace(replanned, script_path=path, sbatch_args=plan.sbatch_args)


def checks_on_suspicion(plan: JobPlan, suspect: str | None) -> bool:
    """Whether a suspicion turns the pre-flight check on for the attempt (it is not on already)."""
    preflight = plan.config.preflight
    return bool(suspect) and preflight.on_suspicion and not preflight.enabled


def check_override_sets(plan: JobPlan, policy: RestartPolicy) -> None:
    """Every override set of every restart rule applies to this job's config and validates.

    Run when the session starts: a bad set is reported then (UserError naming the rule
    and the set), not when the failure it was meant for happens at 3 a.m.
    """
    for rule in policy.rules:
        for number, entries in enumerate(rule.overrides, start=1):
            where = f"restart rule {rule.name}, overrides set {number} ({' '.join(entries)}), job {plan.name}"
            data = _config_data(plan)
            prov = Provenance(default=where)
            try:
                _apply(data, entries, prov, where)
                _replan(plan, data, prov)
            except UserError as exc:
                message = str(exc)  # parse and validation errors already name `where` as their source
                raise UserError(message if message.startswith(where) else f"{where}: {message}") from None


def _config_data(plan: JobPlan) -> dict[str, Any]:
    data = plan.config.model_dump(mode="json", by_alias=True)
    # The stored output dir may be relative to where the session was planned: pin it, so a
    # re-plan from anywhere writes to the same place.
    data["experiment"]["output_dir"] = _experiment_base(plan)
    return data


def _apply(data: dict[str, Any], overrides: Iterable[str], prov: Provenance, where: str) -> None:
    for text in overrides:
        apply_override(data, parse_override(text), prov, where)


def _replan(plan: JobPlan, data: dict[str, Any], prov: Provenance) -> JobPlan:
    point = SweepPoint("" if plan.job_key == SINGLE_JOB_KEY else plan.job_key, plan.sweep_values)
    return plan_job(JobConfig(point, validate(data, prov), f"job {plan.name}"), "")


def _experiment_base(plan: JobPlan) -> str:
    if plan.job_key == SINGLE_JOB_KEY:
        return plan.output_dir
    return posixpath.dirname(plan.output_dir)
