"""Sessions: turning plans into stored jobs, and stored jobs back into what the monitor needs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from oellm_autoexp.adapters.executors.base import Executor
from oellm_autoexp.adapters.executors.factory import make_executor
from oellm_autoexp.adapters.logs.pattern_files import monitoring_dirs, pattern_set_from_mapping
from oellm_autoexp.adapters.store.sqlite_store import JobInfo, JobStatus, SessionInfo, SQLiteStore
from oellm_autoexp.backends.build import restarts_in_place
from oellm_autoexp.config.loader import shipped_config_dir
from oellm_autoexp.config.models import RootConfig
from oellm_autoexp.config.monitoring import split_monitoring
from oellm_autoexp.core.decide.policy import RestartPolicy, load_policy
from oellm_autoexp.daemon.submitter import Submitter
from oellm_autoexp.daemon.watch import JobRuntime
from oellm_autoexp.plan.plan import JobPlan

DEFAULT_POLICY = "default"  # config/restart/default.yaml when an experiment names none


def plan_to_dict(plan: JobPlan) -> dict[str, Any]:
    data = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if f.name != "config"}
    data["sbatch_args"] = list(plan.sbatch_args)
    data["sweep_values"] = [list(kv) for kv in plan.sweep_values]
    data["config"] = plan.config.model_dump(mode="json", by_alias=True)
    return data


def plan_from_dict(data: dict[str, Any]) -> JobPlan:
    fields = dict(data)
    fields["sbatch_args"] = tuple(fields["sbatch_args"])
    fields["sweep_values"] = tuple(tuple(kv) for kv in fields["sweep_values"])
    fields["config"] = RootConfig.model_validate(fields["config"])
    return JobPlan(**fields)


def create_session(
    store: SQLiteStore, plans: Sequence[JobPlan], *, name: str, config_path: str, now: datetime
) -> tuple[SessionInfo, list[JobInfo]]:
    """A new ACTIVE session holding one job per plan (nothing is submitted here)."""
    summary = {"experiment": plans[0].config.experiment.name, "jobs": [p.name for p in plans]}
    session = store.create_session(name, config_path=config_path, config=summary, now=now)
    jobs = [
        store.add_job(session.id, job_key=p.job_key, name=p.name, plan=plan_to_dict(p), now=now)
        for p in plans
    ]
    return session, jobs


def session_name(experiment: str, now: datetime) -> str:
    return f"{experiment}-{now.astimezone(UTC).strftime('%Y%m%d-%H%M%S-%f')}"


def restart_policy(section: dict[str, Any], source: str) -> RestartPolicy:
    if section:
        return _cached(
            ("restart", source), section, lambda: load_policy(section, source=f"{source}: restart")
        )
    path = shipped_config_dir() / "restart" / f"{DEFAULT_POLICY}.yaml"
    return load_policy(yaml.safe_load(path.read_text(encoding="utf-8")), source=str(path))


# Sweeps share their monitoring and restart sections: parse each distinct one once
# (YAML pattern files and regex compilation cost ~50 ms a job).
_PARSED: dict[str, Any] = {}


def _cached(kind: tuple[str, ...], section: Any, build: Callable[[], Any]) -> Any:
    key = json.dumps([kind[0], section], sort_keys=True, default=str)
    if key not in _PARSED:
        _PARSED[key] = build()
    return _PARSED[key]


ExecutorFactory = Callable[[str, Path], Executor]  # (executor name, state dir) -> Executor


def job_runtime(
    job: JobInfo, state_dir: Path, executor_factory: ExecutorFactory = make_executor
) -> JobRuntime:
    """Rebuild what the monitor needs for a stored job: plan, policy, settings, patterns, executor."""
    plan = plan_from_dict(job.plan)
    source = f"job {job.name}"
    settings, pattern_part = split_monitoring(plan.config.monitoring, source)
    patterns = _cached(
        ("patterns",),
        pattern_part,
        lambda: pattern_set_from_mapping(pattern_part, f"{source}: monitoring", monitoring_dirs()),
    )
    policy = restart_policy(plan.config.restart, source)
    executor = executor_factory(plan.executor, state_dir)
    in_job = restarts_in_place(plan.config.backend)
    return JobRuntime(job, plan, policy, settings, executor, patterns, in_job_restarts=in_job)


def start_session(
    store: SQLiteStore,
    plans: Sequence[JobPlan],
    *,
    config_path: str,
    state_dir: Path,
    now_s: float,
    first_only: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> tuple[SessionInfo, list[str]]:
    """Create a session and submit every job's first attempt (intent first, then sbatch).

    Returns the session and the failures: a job whose first sbatch is refused
    is stopped with the executor's message (a refused first submission is a
    config problem; retrying it forever would help nobody).
    """
    now = datetime.fromtimestamp(now_s, UTC)
    session, jobs = create_session(
        store,
        plans,
        name=session_name(plans[0].config.experiment.name, now),
        config_path=config_path,
        now=now,
    )
    say(f"session {session.id} ({session.name}): {len(jobs)} job(s)")
    submitter = Submitter(store, say)
    failures = []
    for job in jobs:
        submitted = submitter.submit(
            job_runtime(job, state_dir), (), now_s, first_only=first_only, retry=False
        )
        if submitted is None and not submitter.fanout.is_racing(job.id):
            store.set_job_status(job.id, JobStatus.STOPPED.value, "first submission refused by the executor")
            say(f"{job.name}: stopped: its first submission was refused (see above); fix it and run again")
            failures.append(job.name)
    return session, failures
