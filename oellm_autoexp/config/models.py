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
    # Defined at the end of this module; built lazily, so the name resolves once the module has run.
    preflight: PreflightConfig = Field(default_factory=lambda: PreflightConfig())


# -- allocation strategies: the checks behind StrategyConfig/SlurmConfig validation --
# Checks on `slurm.strategies`, `slurm.gpu_types` and `slurm.allocation` (docs/strategies.md).
#
# Every strategy asks for the same number of GPUs as the job (nodes x GPUs per node), never more
# GPUs per node than its type has, and has a walltime; backfill segments need the walltime signal
# (a segment must save before its end). Each problem is one sentence naming the key.


def strategy_problem(slurm: SlurmConfig) -> str | None:
    """The first thing wrong with the strategies of this slurm section, or None."""
    if not slurm.strategies and not slurm.allocation.derive:
        return None
    if run_minutes(slurm) is None:
        return (
            "slurm.allocation.time_min: strategies need the run's walltime (or slurm.sbatch.time in minutes)"
        )
    if slurm.allocation.derive and not slurm.gpu_types:
        return "slurm.allocation.derive: true needs slurm.gpu_types (GPU types, GPUs per node, partitions)"
    if slurm.allocation.segment_minutes and not slurm.signal.enabled:
        return "slurm.allocation.segment_minutes: segments save on the walltime signal; set slurm.signal.enabled: true"
    total = slurm.nodes * slurm.gpus_per_node
    for index, strategy in enumerate(slurm.strategies):
        problem = _one_problem(slurm, strategy, total)
        if problem:
            return f"slurm.strategies[{index}]: {problem}"
    return None


def _one_problem(slurm: SlurmConfig, strategy: StrategyConfig, total: int) -> str | None:
    nodes = strategy.nodes or slurm.nodes
    per_node = strategy.gpus_per_node or slurm.gpus_per_node
    if nodes * per_node != total:
        return (
            f"{nodes} nodes x {per_node} GPUs = {nodes * per_node} GPUs; every strategy asks for the job's"
            f" {total} (slurm.nodes x slurm.gpus_per_node)"
        )
    gpu = slurm.gpu_types.get(strategy.gpu_type or "")
    if gpu is not None and per_node > gpu.gpus_per_node:
        return f"{per_node} GPUs per node, but a {strategy.gpu_type} node has {gpu.gpus_per_node}"
    if strategy.gpu_type and slurm.gpu_types and gpu is None:
        return (
            f"gpu_type {strategy.gpu_type!r} is not in slurm.gpu_types ({', '.join(sorted(slurm.gpu_types))})"
        )
    return None


def run_minutes(slurm: SlurmConfig) -> int | None:
    """The run's whole walltime in minutes: allocation.time_min, else sbatch.time; None if neither."""
    return slurm.allocation.time_min or walltime_minutes(slurm.sbatch.get("time"))


def walltime_minutes(value: object) -> int | None:
    """A Slurm --time value in whole minutes (rounded up); None if it is not one.

    Forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    text = str(value).strip()
    days, _, rest = text.rpartition("-") if "-" in text else ("0", "", text)
    try:
        parts = [int(p) for p in rest.split(":")]
        day_count = int(days)
    except ValueError:
        return None
    if "-" in text:
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        hours, (minutes, seconds) = 0, [*parts, 0][:2]
    total_s = ((day_count * 24 + hours) * 60 + minutes) * 60 + seconds
    return -(-total_s // 60) if total_s > 0 and len(parts) <= 3 else None


# -- pre-flight: a quick check of every node of an allocation before training (docs/preflight.md) --


PreflightCheck = Literal["gemm", "hbm", "allreduce", "pairwise"]
PREFLIGHT_CHECKS: tuple[PreflightCheck, ...] = ("gemm", "hbm", "allreduce")


class PreflightConfig(StrictModel):
    """Checks run on every node of each attempt before training starts (docs/preflight.md).

    Each node measures its GPUs (or, without a GPU, the CPU: a matmul in GFLOP/s, so the path
    runs anywhere) and writes one result line; a node below an absolute floor for its GPU type,
    or below `relative_min` x the allocation's median, fails the attempt with
    `preflight FAIL <node>: ...`, which the shipped patterns classify and blame on that node.
    """

    enabled: bool = Field(default=False, description="off unless turned on (group preflight: default)")
    on_suspicion: bool = Field(
        default=False,
        description=(
            "with enabled false: run the check only on the attempts after a failure that may be a"
            " node's and named none (a hang, an NCCL timeout or error), within suspicion_h of it"
        ),
    )
    suspicion_h: float = Field(
        default=24.0,
        ge=0,
        description="how long such a failure keeps the check on (24 h)",
    )
    checks: list[PreflightCheck] = Field(
        default_factory=lambda: list(PREFLIGHT_CHECKS),
        description=(
            "gemm: bf16 TFLOP/s per GPU; hbm: allocate, write, verify; allreduce: intra-node bus GB/s;"
            " pairwise (opt-in): GB/s between pairs of nodes"
        ),
    )
    relative_min: float = Field(
        default=0.9, gt=0, le=1, description="a node below this x the allocation's median fails"
    )
    min_gemm_tflops: dict[str, float] = Field(
        default_factory=dict, description="absolute floor per GPU type (a substring of the device name)"
    )
    min_allreduce_gbps: dict[str, float] = Field(
        default_factory=dict, description="absolute bus-bandwidth floor per GPU type"
    )
    min_cpu_gemm_gflops: float = Field(default=0.0, ge=0, description="floor of the CPU fallback")
    budget_s: int = Field(default=60, ge=5, description="the whole step's time limit")
    gemm_size: int = Field(default=8192, ge=64)
    gemm_iters: int = Field(default=50, ge=1)
    # The pattern counts in int32: 7.5 GiB (2.0e9 elements) stays below 2**31.
    hbm_gib: float = Field(default=2.0, gt=0, le=7.5, description="GiB written and verified per GPU")
    allreduce_mb: int = Field(default=256, ge=1)
    pairwise_mb: int = Field(default=64, ge=1, description="buffer each node of a pair sends")
    device: Literal["auto", "cuda", "cpu"] = "auto"
    python: list[str] = Field(default_factory=lambda: ["python3"], min_length=1, description="argv prefix")

    @field_validator("python", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_command(value)

    @field_validator("min_gemm_tflops", "min_allreduce_gbps")
    @classmethod
    def _floors_not_negative(cls, value: dict[str, float]) -> dict[str, float]:
        bad = sorted(k for k, v in value.items() if v < 0)
        if bad:
            raise ValueError(f"floors are >= 0 (negative for {', '.join(bad)})")
        return value


# RootConfig names PreflightConfig before it is defined (it is appended here): resolve it now.
RootConfig.model_rebuild()


class TypedRootConfig(RootConfig):
    """An experiment config (`autoexp run CONFIG`), composed from its defaults and overrides."""

    monitoring: MonitoringSection = Field(  # type: ignore[assignment]
        default_factory=MonitoringSection,
        description="the monitor's settings and signal patterns (config/monitoring/*.yaml)",
    )
    restart: RestartPolicy = Field(  # type: ignore[assignment]
        default_factory=RestartPolicy, description="the restart policy (config/restart/*.yaml)"
    )
