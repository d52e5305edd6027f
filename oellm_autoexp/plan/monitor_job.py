"""The monitor as a Slurm job (`monitoring.supervisor: slurm`): its name, batch script, environment
and scrontab entry. Pure: data in, text out (docs/supervision.md).

The monitor job runs `autoexp monitor-session --session-id N --in-slurm-job` for one session of
one state dir, as a one-CPU job named `monitor_job_name(...)` with `--dependency=singleton`: Slurm
runs at most one job of that name (and user) at a time, so two monitor jobs never watch the
same session. Each monitor job, as it starts, queues its successor (same script, same name): it
waits behind the singleton and starts the moment the running one ends, whatever ended it (a
`scancel`, a crash, its node, the hand-over before the time limit). `--requeue` puts a job
whose node failed back in the queue; `--signal=B:USR1@<margin>` tells the monitor to stop
cleanly a margin before the time limit, and the queued successor takes over.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oellm_autoexp.errors import UserError
from oellm_autoexp.plan.render import shell_template

# Inherited from an allocation, these would configure the monitor job (or a training job it
# submits) like the job it was submitted from: an inherited SLURM_CPU_BIND made a fleet ~3x slower.
SCRUBBED_PREFIXES = ("SLURM_", "SBATCH_", "PMIX_")
# ... except the client's own configuration: where it is set, sbatch/squeue need it to find the cluster.
KEPT_SLURM_VARS = frozenset({"SLURM_CONF"})
NAME_PREFIX = "autoexp-monitor"
SCRON_MARK = "autoexp-scrontab"  # the comment lines that bound our entries in a scrontab


@dataclass(frozen=True)
class MonitorJobSpec:
    """One session's monitor job: where it runs, how long, and what it runs."""

    name: str  # monitor_job_name(); also the singleton's key
    session_id: int
    state_dir: str  # absolute
    workdir: str  # absolute: where autoexp ran (relative paths in the session's config resolve from here)
    python: str  # the interpreter that runs autoexp
    output: str  # the job's own log (Slurm's %j allowed)
    time_min: int
    handover_margin_s: int
    cpus: int = 1
    mem: str | None = None
    partition: str | None = None
    qos: str | None = None
    account: str | None = None


def monitor_job_name(state_dir: str, session_id: int) -> str:
    """`autoexp-monitor-<session>-<8 hex of the state dir>`: session numbers restart in every state
    dir, and the singleton must not make two experiments' monitors wait for each other."""
    digest = hashlib.sha256(state_dir.encode()).hexdigest()[:8]
    return f"{NAME_PREFIX}-{session_id}-{digest}"


def monitor_directives(spec: MonitorJobSpec) -> list[tuple[str, str | None]]:
    """The `#SBATCH` lines of the monitor job, in order (None: a bare flag)."""
    directives: list[tuple[str, str | None]] = [
        ("job-name", spec.name),
        ("dependency", "singleton"),
        ("nodes", "1"),
        ("ntasks", "1"),
        ("cpus-per-task", str(spec.cpus)),
        ("time", str(spec.time_min)),
        ("requeue", None),
        ("signal", f"B:USR1@{spec.handover_margin_s}"),
        ("output", spec.output),
        ("open-mode", "append"),
        ("chdir", spec.workdir),
    ]
    for key, value in (("mem", spec.mem), ("partition", spec.partition), ("qos", spec.qos),
                       ("account", spec.account)):  # fmt: skip
        if value:
            directives.append((key, value))
    return directives


def monitor_argv(spec: MonitorJobSpec) -> list[str]:
    """What the monitor job runs (exec'd: the batch shell IS the monitor, so USR1 and TERM reach it)."""
    return [spec.python, "-m", "oellm_autoexp", "--state-dir", spec.state_dir, "monitor-session",
            "--session-id", str(spec.session_id), "--in-slurm-job"]  # fmt: skip


def render_monitor_script(spec: MonitorJobSpec) -> str:
    """The monitor job's batch script (core/templates/monitor.sh.j2); UserError for a path with a newline."""
    check_one_line(spec)
    return shell_template("monitor.sh.j2").render(
        spec=spec, directives=monitor_directives(spec), argv=monitor_argv(spec)
    )


def check_one_line(spec: MonitorJobSpec) -> None:
    """A newline in a path would end an `#SBATCH` or scrontab line and start a new one: refused."""
    for key, value in vars(spec).items():
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise UserError(f"monitor job: {key} {value!r} contains a newline or control character")


def scrubbed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without what an allocation leaves behind (SLURM_*, SBATCH_*, PMIX_*), SLURM_CONF kept."""
    return {
        key: value
        for key, value in environ.items()
        if key in KEPT_SLURM_VARS or not key.startswith(SCRUBBED_PREFIXES)
    }


# -- scrontab ---------------------------------------------------------------------------------


def scrontab_block(ensure_argv: Sequence[str], spec: MonitorJobSpec, every_min: int,
                   env: Mapping[str, str]) -> str:  # fmt: skip
    """The scrontab entry (bounded by marker comments) that checks every `every_min` minutes that
    the session's monitor job is queued or running, and submits it if not (`ensure_argv`).

    scrontab runs the line with a shell, so every word is quoted; `env` (PYTHONPATH, SLURM_CONF...)
    is set on the line, since a scron job does not get the login shell's environment.
    """
    check_one_line(spec)
    options = [f"--job-name={spec.name}-scron", "--time=5", "--ntasks=1", "--cpus-per-task=1"]
    options += [f"--{key}={value}" for key, value in (("partition", spec.partition), ("qos", spec.qos),
                                                      ("account", spec.account)) if value]  # fmt: skip
    assigns = [f"{key}={shlex.quote(value)}" for key, value in sorted(env.items())]
    command = " ".join(["cd", shlex.quote(spec.workdir), "&&", *(["env", *assigns] if assigns else []),
                        *(shlex.quote(word) for word in ensure_argv)])  # fmt: skip
    return "\n".join([
        f"# {SCRON_MARK} begin {spec.name}: keeps a monitor job for session {spec.session_id} of {spec.state_dir}",
        f"#SCRON {' '.join(options)}",
        f"*/{every_min} * * * * {command}",
        f"# {SCRON_MARK} end {spec.name}",
    ])  # fmt: skip


def merge_scrontab(existing: str, block: str, name: str) -> str:
    """`existing` with our entry for `name` replaced by `block` (or added): installing twice changes nothing."""
    begin, end = f"# {SCRON_MARK} begin {name}:", f"# {SCRON_MARK} end {name}"
    kept: list[str] = []
    inside = False
    for line in existing.splitlines():
        if line.startswith(begin):
            inside = True
        elif inside and line.strip() == end:
            inside = False
        elif not inside:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join([*kept, *([""] if kept else []), block]) + "\n"
