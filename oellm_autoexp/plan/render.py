"""Render one sbatch script from a ScriptSpec. Pure: data in, text out.

Every value from a config reaches the script through one of two filters:
`q` (shlex.quote) for shell words, `sbq` for `#SBATCH` values, which sbatch
parses itself (quotes group words, backslash escapes). So a job name or an
argument holding spaces, quotes, `$(...)` or backticks arrives literally and
is never evaluated. Newlines are refused earlier, by the config models.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import cache

import jinja2

from oellm_autoexp.core.template_env import template_environment

# The walltime warning is sent again this often while the step runs (sbatch.sh.j2 says why):
# long enough that a checkpoint in progress is rarely interrupted by a repeat, short enough
# that a warning lost during start-up is delivered well before the time limit.
WARNING_RESEND_S = 30
# ... while the step is younger than this: time enough for a slow start-up (a large checkpoint's
# load) to install its handler; a step older than this gets the warning once.
WARNING_RESEND_WITHIN_S = 600


@dataclass(frozen=True)
class ScriptSpec:
    job_name: str
    job_key: str
    directives: tuple[tuple[str, str | None], ...]  # (directive, value); None = bare flag
    env: tuple[tuple[str, str], ...]  # exported in this order
    make_dirs: tuple[str, ...]
    setup: tuple[tuple[str, ...], ...]  # argv commands run before the launch
    command: tuple[str, ...]  # one node's argv, with backends.base placeholders
    nodes: int
    use_srun: bool  # under Slurm, launch one task per node with srun
    srun_options: tuple[str, ...]
    master_port: int | None  # None: derived from the job id
    forward_signals: tuple[str, ...]  # signals the batch shell passes on to the launch
    # Signals meant for the training processes, not the launcher: the launcher ignores
    # them (torchrun dies of an unhandled USR1) and they go to every process of the step.
    worker_signals: tuple[str, ...] = ()
    # (worker signal, what the training processes get instead): each node's wrapper turns
    # e.g. the walltime USR1 into the SIGTERM Megatron's --exit-signal-handler stops on,
    # sent to the launcher's children only (torchrun itself would tear the job down on TERM).
    worker_signal_as: tuple[tuple[str, str], ...] = ()
    # The pre-flight check's argv (plan/preflight_step.py), run on every node before the
    # launch; () when it is off. Its time limit in seconds.
    preflight: tuple[str, ...] = ()
    preflight_budget_s: int = 0
    # torchrun's processes per node when the script announces the rank layout (node blame maps a
    # `[rankN]:` GPU fault line to its node: core/decide/node_blame.py); None: not announced.
    ranks_per_node: int | None = None
    # The silent-hang probe (monitoring.hang.stack_dump_signal, docs/hang.md): every Python process
    # of the job prints its stacks on this signal (workloads/stack_dump/sitecustomize.py, from the
    # folder `stack_dump_site`, put first on PYTHONPATH); None: off.
    stack_dump_signal: str | None = None
    stack_dump_site: str | None = None


def sbatch_quote(value: str) -> str:
    """Quote a value for an `#SBATCH` line the way sbatch's own parser reads it."""
    if value and all(c.isalnum() or c in "-_.:,@%/=+[]" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _shell_quote(value: object) -> str:
    return shlex.quote(str(value))


@cache
def _environment() -> jinja2.Environment:
    return template_environment(
        autoescape=False, keep_trailing_newline=True, filters={"q": _shell_quote, "sbq": sbatch_quote}
    )


def shell_template(name: str) -> jinja2.Template:
    """A shell-script template of the package (core/templates/), with the `q` and `sbq` filters."""
    return _environment().get_template(name)


def render_sbatch(
    spec: ScriptSpec,
    *,
    warning_resend_s: int = WARNING_RESEND_S,
    warning_resend_within_s: int = WARNING_RESEND_WITHIN_S,
) -> str:
    """The sbatch script for `spec` (the warning's resend times: shorter in tests)."""
    return (
        _environment()
        .get_template("sbatch.sh.j2")
        .render(spec=spec, warning_resend_s=warning_resend_s, warning_resend_within_s=warning_resend_within_s)
    )
