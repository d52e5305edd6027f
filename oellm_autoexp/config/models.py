"""Typed experiment configuration (pydantic 2). Unknown keys are rejected.

The composed YAML (see config/loader.py) validates into `RootConfig`. The
`monitoring` and `restart` sections belong to the monitor and restart-policy
code, which validate them with their own models (config/monitoring.py,
core/decide/policy.py); here they are kept as mappings so that their YAML always
passes through untouched. `TypedRootConfig` names those models in their place:
the model of the JSON Schema (config/schema.py, `autoexp config schema`).
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from oellm_autoexp.config.monitoring import MonitoringSection
from oellm_autoexp.config.strategy_check import strategy_problem
from oellm_autoexp.core.decide.policy import RestartPolicy

# sbatch reads `#SBATCH` lines itself; a newline in a value would start a new
# line of the script, which bash would run. Control characters are refused.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIRECTIVE = re.compile(r"^[a-z][a-z0-9-]*$")

NAME_MAX_CHARS = 128
SbatchValue = str | int | float | bool | None
EnvValue = str | int | float | bool


class StrictModel(BaseModel):
    # `args=[--steps,40]`: a number given where a string is wanted is that string ("40").
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


def _no_control(value: str, what: str) -> str:
    if _CONTROL.search(value):
        raise ValueError(f"{what} must not contain newlines or control characters")
    return value


class ExperimentConfig(StrictModel):
    # Names become file, directory and Slurm job names (255 bytes at most on most filesystems,
    # and sweep points append their key): refuse a longer one up front.
    name: str = Field(
        min_length=1, max_length=NAME_MAX_CHARS, description="experiment name; sweep points append their key"
    )
    output_dir: str = Field(description="base output dir; each sweep point gets a sub-directory")
    description: str = ""

    @field_validator("name")
    @classmethod
    def _name_is_one_line(cls, value: str) -> str:
        return _no_control(value, "experiment.name")


class SignalConfig(StrictModel):
    """`--signal=B:<name>@<seconds_before>`: warn the batch shell before the time limit.

    The batch shell passes the warning on to the training processes as `forward_as`. Unset,
    that is the signal the backend's program stops on: Megatron's `--exit-signal`
    (SIGTERM unless set) when the megatron_torchrun backend has `exit_signal_handler`,
    otherwise the warning signal itself.
    """

    enabled: bool = False
    name: str = Field(default="USR1", pattern=r"^[A-Z0-9]+$")
    seconds_before: int = Field(default=300, ge=1)
    forward_as: str | None = Field(
        default=None, pattern=r"^[A-Z0-9]+$", description="signal the training processes get (e.g. TERM)"
    )


class StrategyConfig(StrictModel):
    """One allocation strategy (docs/strategies.md); unset fields come from the slurm section."""

    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$", description="default: s<N>")
    partition: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    gpu_type: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    type_in_request: bool = Field(
        default=True, description="false: --gres=gpu:N, the partition picks the type"
    )
    nodes: int | None = Field(default=None, ge=1)
    gpus_per_node: int | None = Field(default=None, ge=1)
    time_min: int | None = Field(default=None, ge=1, description="default: allocation.time_min")
    account: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    qos: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")


class GpuTypeConfig(StrictModel):
    """One GPU type of the cluster: its nodes' GPU count, its rate, the partitions that hold it."""

    gpus_per_node: int = Field(ge=1)
    cost_per_gpu_hour: float = Field(default=1.0, ge=0, description="service units per GPU-hour")
    partitions: list[str] = Field(default_factory=list)


class AllocationConfig(StrictModel):
    """How the strategies are used: how many at once, backfill segments (docs/strategies.md)."""

    fan_out: int = Field(default=1, ge=1, le=16, description="submit the best K strategies at once")
    derive: bool = Field(default=False, description="add every valid shape of slurm.gpu_types")
    time_min: int | None = Field(default=None, ge=1, description="the run's walltime; default: sbatch.time")
    segment_minutes: list[int] = Field(
        default_factory=list, description="shorter walltimes to try (backfill), run as checkpointed segments"
    )
    save_buffer_s: int = Field(default=300, ge=1, description="a segment's warning before its end (>= 60 s)")

    @field_validator("segment_minutes")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(m < 1 for m in value):
            raise ValueError("segment lengths are whole minutes >= 1")
        return value


class SlurmConfig(StrictModel):
    nodes: int = Field(default=1, ge=1, description="--nodes")
    gpus_per_node: int = Field(default=0, ge=0, description="also sets --gres=gpu:N unless given")
    mig: bool = Field(default=False, description="GPUs are MIG slices: one CPU per task by default")
    cpus_per_task: int | None = Field(default=None, ge=1, description="default: 1 for MIG, else 4/GPU, <=32")
    sbatch: dict[str, SbatchValue] = Field(
        default_factory=dict,
        description="any sbatch directive: key without dashes; true = flag, null/false = omitted",
    )
    srun: list[str] = Field(default_factory=list, description="extra srun options")
    env: dict[str, EnvValue] = Field(default_factory=dict, description="exported in the script")
    setup: list[list[str]] = Field(
        default_factory=list, description="argv commands run before launch, e.g. [module, load, X]"
    )
    scratch_dir: str | None = Field(default=None, description="caches go here (default: <output_dir>/.cache)")
    caches: bool = Field(default=True, description="point HF_HOME, TORCH_HOME... under scratch_dir")
    signal: SignalConfig = Field(default_factory=SignalConfig, description="a warning before the time limit")
    master_port: int | None = Field(default=None, ge=1024, le=65535, description="default: from job id")
    launcher: Literal["srun", "none"] = Field(
        default="srun", description="under Slurm, start one task per node with srun"
    )
    log_name: str = Field(default="slurm-%j.out", description="file name under <output_dir>/logs")
    strategies: list[StrategyConfig] = Field(default_factory=list, description="allocation alternatives")
    gpu_types: dict[str, GpuTypeConfig] = Field(default_factory=dict, description="the cluster's GPU types")
    allocation: AllocationConfig = Field(
        default_factory=AllocationConfig, description="how the strategies are used (docs/strategies.md)"
    )

    @model_validator(mode="after")
    def _strategies_fit(self) -> SlurmConfig:
        problem = strategy_problem(self)
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("sbatch")
    @classmethod
    def _directives_are_safe(cls, value: dict[str, SbatchValue]) -> dict[str, SbatchValue]:
        for key, item in value.items():
            if not _DIRECTIVE.match(key):
                raise ValueError(f"sbatch directive {key!r} must look like 'job-name' (no leading dashes)")
            if isinstance(item, str):
                _no_control(item, f"slurm.sbatch.{key}")
        return value

    @field_validator("env")
    @classmethod
    def _env_names_are_valid(cls, value: dict[str, EnvValue]) -> dict[str, EnvValue]:
        for key in value:
            if not _ENV_NAME.match(key):
                raise ValueError(f"environment variable name {key!r} is not valid")
        return value

    @field_validator("log_name")
    @classmethod
    def _log_name_is_plain(cls, value: str) -> str:
        if "/" in value:
            raise ValueError("log_name is a file name, not a path")
        return _no_control(value, "slurm.log_name")


def _split_command(value: Any) -> Any:
    # A string is split the way a shell would split it, but never run by one.
    return shlex.split(value) if isinstance(value, str) else value


class CommandBackend(StrictModel):
    """Any command, as an argv list (a string is split with shlex.split)."""

    kind: Literal["command"]
    command: list[str] = Field(min_length=1)

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_command(value)


class TorchrunBackend(StrictModel):
    """torchrun <script> <args>: any torch DDP script."""

    kind: Literal["torchrun"]
    script: str
    args: list[str] = Field(default_factory=list)
    nproc_per_node: int | None = Field(default=None, ge=1, description="default: gpus_per_node, or 1")
    torchrun: list[str] = Field(default_factory=lambda: ["torchrun"], min_length=1)
    torchrun_args: list[str] = Field(default_factory=list)

    @field_validator("args", "torchrun", "torchrun_args", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_command(value)


class MegatronTorchrunBackend(StrictModel):
    """torchrun <megatron_path>/pretrain_gpt.py (or -m <module>) --key value ... --save/--load <checkpoint dir>."""

    kind: Literal["megatron_torchrun"]
    megatron_path: str | None = Field(default=None, description="a Megatron-LM checkout holding `script`")
    script: str | None = Field(default="pretrain_gpt.py", description="relative to megatron_path")
    module: str | None = Field(
        default=None,
        description="run `torchrun -m <module>` instead of a script (e.g. oellm_autoexp.workloads.megatron_gpt)",
    )
    nproc_per_node: int | None = Field(default=None, ge=1, description="default: gpus_per_node, or 1")
    torchrun: list[str] = Field(default_factory=lambda: ["torchrun"], min_length=1)
    torchrun_args: list[str] = Field(default_factory=list)
    megatron: dict[str, Any] = Field(
        default_factory=dict,
        description="Megatron arguments: micro_batch_size: 4 -> --micro-batch-size 4; true -> flag",
    )
    extra_args: list[str] = Field(default_factory=list)

    @field_validator("torchrun", "torchrun_args", "extra_args", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_command(value)

    @model_validator(mode="after")
    def _script_or_module(self) -> MegatronTorchrunBackend:
        if self.module is None:
            if not self.script:
                raise ValueError("set script (a Megatron-LM training script) or module (run with -m)")
            return self
        if "script" in self.model_fields_set and self.script is not None:
            raise ValueError(
                f"script {self.script!r} and module {self.module!r}: give one (script: null to run the module)"
            )
        self.script = None
        return self

    @field_validator("megatron")
    @classmethod
    def _save_load_are_ours(cls, value: dict[str, Any]) -> dict[str, Any]:
        taken = sorted({"save", "load"} & set(value))
        if taken:
            raise ValueError(
                f"{', '.join(taken)} are set to the job's checkpoint dir so that every "
                "resubmission resumes; use pretrained_checkpoint for a starting point"
            )
        return value


BackendConfig = Annotated[
    CommandBackend | TorchrunBackend | MegatronTorchrunBackend, Field(discriminator="kind")
]


class SweepConfig(StrictModel):
    """grid: cartesian product of the value lists; list: explicit points. Both: their product."""

    # `list` is the user-facing key; the attribute is `points` so it never shadows the builtin.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    grid: dict[str, list[Any]] = Field(default_factory=dict, description="dotted key -> values")
    points: list[dict[str, Any]] = Field(
        default_factory=list, alias="list", description="explicit points: dotted key -> value"
    )


class RootConfig(StrictModel):
    experiment: ExperimentConfig
    executor: Literal["slurm", "local"] = "slurm"
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    backend: BackendConfig
    monitoring: dict[str, Any] = Field(default_factory=dict, description="validated by the monitor")
    restart: dict[str, Any] = Field(default_factory=dict, description="validated by the restart policy")
    sweep: SweepConfig | None = None


class TypedRootConfig(RootConfig):
    """An experiment config (`autoexp run CONFIG`), composed from its defaults and overrides."""

    monitoring: MonitoringSection = Field(  # type: ignore[assignment]
        default_factory=MonitoringSection,
        description="the monitor's settings and signal patterns (config/monitoring/*.yaml)",
    )
    restart: RestartPolicy = Field(  # type: ignore[assignment]
        default_factory=RestartPolicy, description="the restart policy (config/restart/*.yaml)"
    )
