"""Planning: validated per-job configs -> JobPlans (paths, sbatch script, sbatch args). Pure.

A JobPlan holds everything needed to (re)submit one job: the monitor renders
nothing itself, it writes `plan.script` to `plan.script_path` and submits it
again (adapters/executors/factory.py), optionally with extra sbatch args such as
`--exclude` or `--dependency`. `job_key` is stable for a sweep point across
re-plans, so a restarted monitor finds its jobs again.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oellm_autoexp.backends.base import LaunchContext
from oellm_autoexp.backends.build import build_argv, procs_per_node
from oellm_autoexp.backends.megatron_torchrun import exit_signal
from oellm_autoexp.config.experiment import JobConfig
from oellm_autoexp.config.models import CommandBackend, MegatronTorchrunBackend, RootConfig, SlurmConfig
from oellm_autoexp.config.monitoring import MonitoringSection
from oellm_autoexp.core.watch.progress import HangConfig
from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.preflight_step import preflight_argv
from oellm_autoexp.plan.render import ScriptSpec, render_sbatch
from oellm_autoexp.workloads.stack_dump import SITE_DIR as STACK_DUMP_SITE

SINGLE_JOB_KEY = "main"
CPUS_PER_GPU = 4
MAX_DEFAULT_CPUS = 32
SCRIPT_NAME = "job.sbatch"
# Caches that otherwise fill $HOME (small quotas on clusters) -> <scratch>/cache/<sub>.
CACHE_VARS = (
    ("HF_HOME", "huggingface"),
    ("HF_DATASETS_CACHE", "huggingface/datasets"),
    ("TORCH_HOME", "torch"),
    ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
    ("TRITON_CACHE_DIR", "triton"),
    ("VLLM_CACHE_ROOT", "vllm"),
    ("XDG_CACHE_HOME", "xdg"),
    ("PIP_CACHE_DIR", "pip"),
)


@dataclass(frozen=True)
class JobPlan:
    job_key: str  # stable per sweep point ("main" without a sweep)
    name: str  # Slurm job name
    executor: str  # "slurm" | "local"
    output_dir: str
    checkpoint_dir: str
    log_path: str  # with %j, as sbatch's --output; see log_path_for()
    script_path: str
    script: str  # the rendered sbatch script
    sbatch_args: tuple[str, ...]  # extra sbatch command-line args for every submission
    sweep_values: tuple[tuple[str, Any], ...]
    config: RootConfig  # this job's resolved config, to re-plan with changes


def log_path_for(plan: JobPlan, job_id: str) -> str:
    """The log file of one submission: sbatch's %j (job id), %x (job name), %% (a percent sign)."""
    text = plan.log_path.replace("%%", "\0").replace("%j", job_id.split("_")[0])
    return text.replace("%x", plan.name).replace("\0", "%")


def build_plans(jobs: Sequence[JobConfig], base_dir: str) -> list[JobPlan]:
    """One JobPlan per job; relative output dirs are taken relative to `base_dir`."""
    plans = [plan_job(job, base_dir) for job in jobs]
    _check_unique([p.output_dir for p in plans], "output dir")
    return plans


def plan_job(job: JobConfig, base_dir: str) -> JobPlan:
    cfg = job.config
    key = job.point.key or SINGLE_JOB_KEY
    name = f"{cfg.experiment.name}_{job.point.key}" if job.point.key else cfg.experiment.name
    base = posixpath.join(base_dir, cfg.experiment.output_dir)
    out = posixpath.normpath(posixpath.join(base, job.point.key) if job.point.key else base)
    ckpt = posixpath.join(out, "checkpoints")
    log = posixpath.join(out, "logs", cfg.slurm.log_name)
    _check_executor(cfg, job.source)
    nproc = procs_per_node(cfg.backend, cfg.slurm.gpus_per_node)
    ctx = LaunchContext(cfg.slurm.nodes, nproc, ckpt, out, rank_prefix=_stack_dump_signal(cfg) is not None)
    spec = script_spec(cfg, name, key, out, ckpt, log, build_argv(cfg.backend, ctx), nproc)
    script_path = posixpath.join(out, SCRIPT_NAME)
    return JobPlan(
        key, name, cfg.executor, out, ckpt, log, script_path, render_sbatch(spec), (), job.point.values, cfg
    )


def _check_executor(cfg: RootConfig, source: str) -> None:
    if cfg.executor == "local" and cfg.slurm.nodes > 1:
        raise UserError(
            f"{source}: slurm.nodes: the local executor runs on one machine, got {cfg.slurm.nodes} nodes "
            "(use executor=slurm)"
        )


def default_cpus_per_task(slurm: SlurmConfig) -> int:
    """1 for MIG slices; otherwise 4 per GPU (4 with no GPU), at most 32."""
    if slurm.cpus_per_task is not None:
        return slurm.cpus_per_task
    if slurm.mig:
        return 1
    return min(MAX_DEFAULT_CPUS, CPUS_PER_GPU * max(1, slurm.gpus_per_node))


def sbatch_directives(slurm: SlurmConfig, name: str, log: str) -> dict[str, str | None]:
    """Our defaults, then every user directive on top (null/false removes one, true is a flag)."""
    found: dict[str, Any] = {
        "job-name": name,
        "output": log,
        "nodes": slurm.nodes,
        "ntasks-per-node": 1,
        "cpus-per-task": default_cpus_per_task(slurm),
    }
    if slurm.gpus_per_node and not ({"gres", "gpus-per-node", "gpus"} & set(slurm.sbatch)):
        found["gres"] = f"gpu:{slurm.gpus_per_node}"
    if slurm.signal.enabled:
        found["signal"] = f"B:{slurm.signal.name}@{slurm.signal.seconds_before}"
    found.update(slurm.sbatch)
    return {
        k: (None if v is True else _text(v)) for k, v in found.items() if v is not None and v is not False
    }


def script_env(
    cfg: RootConfig, name: str, key: str, out: str, ckpt: str, cpus: int, nproc: int
) -> dict[str, str]:
    # Default: the experiment's base dir, shared by all sweep points (one download, not one per job).
    scratch = cfg.slurm.scratch_dir or _experiment_base(out, key)
    env = {
        "AUTOEXP_JOB_NAME": name,
        "AUTOEXP_JOB_KEY": key,
        "AUTOEXP_OUTPUT_DIR": out,
        "AUTOEXP_CHECKPOINT_DIR": ckpt,
        "NPROC_PER_NODE": str(nproc),
        "OMP_NUM_THREADS": str(max(1, cpus // nproc)),
        "TOKENIZERS_PARALLELISM": "false",
    }
    if cfg.slurm.caches:
        env.update({var: posixpath.join(scratch, ".cache", sub) for var, sub in CACHE_VARS})
    env.update({k: _text(v) for k, v in cfg.slurm.env.items()})
    return env


def script_spec(
    cfg: RootConfig, name: str, key: str, out: str, ckpt: str, log: str, argv: list[str], nproc: int
) -> ScriptSpec:
    directives = sbatch_directives(cfg.slurm, name, log)
    cpus = int(directives.get("cpus-per-task") or default_cpus_per_task(cfg.slurm))
    env = script_env(cfg, name, key, out, ckpt, cpus, nproc)
    cache_dirs = [v for k, v in env.items() if k in dict(CACHE_VARS)]
    signals = tuple(dict.fromkeys([cfg.slurm.signal.name, "TERM", "INT"]))
    return ScriptSpec(
        job_name=name,
        job_key=key,
        directives=tuple(directives.items()),
        env=tuple(env.items()),
        make_dirs=(out, ckpt, posixpath.dirname(log), *cache_dirs),
        setup=tuple(tuple(argv_) for argv_ in cfg.slurm.setup),
        command=tuple(argv),
        nodes=cfg.slurm.nodes,
        use_srun=cfg.slurm.launcher == "srun",
        srun_options=tuple(cfg.slurm.srun),
        master_port=cfg.slurm.master_port,
        forward_signals=signals,
        worker_signals=_worker_signals(cfg),
        worker_signal_as=_worker_signal_as(cfg),
        preflight=preflight_argv(cfg.preflight, out),
        preflight_budget_s=cfg.preflight.budget_s,
        ranks_per_node=_ranks_per_node(cfg, nproc),
        stack_dump_signal=_stack_dump_signal(cfg),
        stack_dump_site=STACK_DUMP_SITE if _stack_dump_signal(cfg) else None,
    )


def _stack_dump_signal(cfg: RootConfig) -> str | None:
    """The hang probe's signal (monitoring.hang.stack_dump_signal) on a job of several nodes, the only
    kind whose silent ranks name a node to exclude; None when it is off."""
    if cfg.slurm.nodes < 2:
        return None
    monitoring = cfg.monitoring
    if isinstance(monitoring, MonitoringSection):
        hang = monitoring.hang
    else:  # an untyped config: the section as written, with the model's defaults
        raw = monitoring.get("hang", {})
        hang = HangConfig.model_validate(raw) if isinstance(raw, dict) else None
    return hang.stack_dump_signal if hang is not None else None


def _ranks_per_node(cfg: RootConfig, nproc: int) -> int | None:
    """The layout the script announces for node blame: torchrun's static rendezvous over several
    nodes (global rank = node rank x nproc + local rank). A command backend's layout is its own."""
    if isinstance(cfg.backend, CommandBackend) or cfg.slurm.nodes < 2:
        return None
    return nproc


def _worker_signals(cfg: RootConfig) -> tuple[str, ...]:
    """The pre-timeout warning signal, when enabled and not one that must end the launcher too."""
    name = cfg.slurm.signal.name
    return (name,) if cfg.slurm.signal.enabled and name not in ("TERM", "INT", "KILL") else ()


def _worker_signal_as(cfg: RootConfig) -> tuple[tuple[str, str], ...]:
    """(warning signal, signal the training processes get) where the two differ."""
    received = _worker_signals(cfg)
    sent = forwarded_signal(cfg)
    return tuple((name, sent) for name in received if name != sent)


def forwarded_signal(cfg: RootConfig) -> str:
    """What the training processes get for the walltime warning (see SignalConfig)."""
    wanted = cfg.slurm.signal.forward_as
    listens = exit_signal(cfg.backend.megatron) if isinstance(cfg.backend, MegatronTorchrunBackend) else None
    if wanted and listens and wanted != listens:
        raise UserError(
            f"slurm.signal.forward_as: {wanted}, but Megatron's --exit-signal-handler listens for "
            f"SIG{listens} (backend.megatron.exit_signal): the warning would not stop training"
        )
    return wanted or listens or cfg.slurm.signal.name


def _experiment_base(out: str, key: str) -> str:
    return out if key == SINGLE_JOB_KEY else posixpath.dirname(out)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_unique(values: list[str], what: str) -> None:
    seen = {v for v in values if values.count(v) > 1}
    if seen:
        raise UserError(
            f"two jobs share the {what} {sorted(seen)[0]!r}; give the sweep points distinct values"
        )


def configured_exclude(plan: JobPlan) -> str | None:
    """The experiment's own `slurm.sbatch.exclude`, kept when exclusions are added to it."""
    value = plan.config.slurm.sbatch.get("exclude")
    return value if isinstance(value, str) and value.strip() else None
