"""The baseline: upstream's production monitor, written out from its config and loop. No I/O.

Facts about github:OpenEuroLLM/oellm-autoexp (read at branch prod/oellm_32b_dense, commit
0bf06da, the branch its 32B production run uses; HEAD of main is c6d0cc0):
- config/experiments/oellm_32b_dense/oellm_32b_dense_production.yaml takes
  `/job: auto_restart_ckptreset`; its `log_events` are written out below in their order
  (checkpoint quarantine, cancels, then restarts, then `inactive`). Every RestartAction
  resubmits with no cap ("RestartAction has NO restart cap of its own", config/job/auto_restart.yaml).
- oellm_autoexp/monitor/loop.py: one poll every `poll_interval_seconds` (60 s default, app.py);
  per poll the log's new text since the cursor is searched by each event in list order and
  the first event that fires acts (`_process_log_events`); `inactivity` fires when 5
  consecutive polls saw no new text AND 1200 s passed since the first of them
  (`_process_inactivity_event`); then a job whose Slurm state (squeue, else sacct) is
  COMPLETED, FAILED or CANCELLED is marked finished (`observe_once`): nobody restarts it.
- auto_restart_ckptreset has no `state_events` (its comment says why: a RUNNING->FAILED restart
  raced the log); main's config/job/auto_restart.yaml restarts on RUNNING->FAILED/CANCELLED
  (`UPSTREAM_MAIN_STATE_RESTARTS`) with a 300 s inactivity timeout.
- No node is ever excluded by these events; no one is paged (a stopped job waits for someone
  to look).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from oellm_autoexp.core.fleet.engine import RESTART, STOP, Reaction, Strike
from oellm_autoexp.core.fleet.lines import Names, render
from oellm_autoexp.core.fleet.mix import Mix
from oellm_autoexp.core.fleet.settings import SimSettings

CANCEL, RESTART_EV, FINISH = "cancel", "restart", "finish"

# auto_restart_ckptreset.yaml `log_events`, in order (substring patterns escaped).
UPSTREAM_EVENTS: tuple[tuple[str, str, str], ...] = (
    ("ckpt_corrupt_restart", r"No such file or directory: '[^']*/iter_(\d+)/__\d+_\d+\.distcp'", RESTART_EV),
    ("err_ckpt_world_size_mismatch", r"Missing key in checkpoint state_dict: rerun_state_machine_state/shard_\d+_(\d+)", CANCEL),
    ("finished_training", re.escape("[after training is done]"), FINISH),
    ("finish", r".*validation loss.*on test set.*", FINISH),
    ("err_unrecognized_argument", re.escape("unrecognized arguments"), CANCEL),
    ("err_ft_package_without_ft_launcher", r"RankMonitorClientError|FT_RANK_MONITOR_IPC_SOCKET env variable should be set", CANCEL),
    ("err_disk_quota", r"Disk quota exceeded|Errno 122", CANCEL),
    ("err_fp8_metadata", re.escape("Saved FP8 metadata does not match"), CANCEL),
    ("err_dataset_cache_corrupt", r"mmap length is greater than file size|ValueError: cannot reshape array", CANCEL),
    ("err_infra_rank", re.escape("Invalid infrastructure rank"), CANCEL),
    ("err_torch_oom", r"torch\.cuda\.OutOfMemoryError|CUDA out of memory\. Tried to allocate", CANCEL),
    ("err_cuda_alloc_init", r"Failed to CUDA calloc|AcceleratorError: CUDA error: out of memory|cudaErrorMemoryAllocation", RESTART_EV),
    ("err_rendezvous", r"RendezvousConnectionError|DistNetworkError", RESTART_EV),
    ("err_userbuffers_stall", r"userbuffers\.cu.*expecting [0-9]+ got [0-9]+", RESTART_EV),
    ("err_nccl_timeout", r"Watchdog caught collective operation timeout|unhandled cuda error|NCCL error", RESTART_EV),
    ("err_cuda_illegal_access", r"illegal memory access|cudaErrorIllegalAddress", RESTART_EV),
    ("err_cpp_terminate", re.escape("terminate called after throwing an instance of"), RESTART_EV),
    ("err_node_failure", r"DUE TO NODE FAILURE|Node failure on", RESTART_EV),
    ("err_child_failed", re.escape("ChildFailedError"), RESTART_EV),
    ("error", re.escape("Exited with exit code 1"), RESTART_EV),
)  # fmt: skip
INACTIVITY_POLLS = 5
INACTIVITY_TIMEOUT_S = 1200.0  # prod/oellm_32b_dense; main's auto_restart.yaml: 300 s
FINISHED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED"})  # loop.py: marked finished, not restarted
UPSTREAM_MAIN_STATE_RESTARTS = frozenset({"FAILED", "CANCELLED"})  # main: state_events RUNNING -> these
PHASES = 4
_COMPILED = tuple((name, re.compile(regex, re.MULTILINE), action) for name, regex, action in UPSTREAM_EVENTS)


@dataclass(frozen=True)
class UpstreamCase:
    detect_s: float
    action: str  # RESTART or STOP
    why: str


@dataclass
class UpstreamPolicy:
    """Upstream's production policy on the same faults (see the module docstring)."""

    mix: Mix
    settings: SimSettings
    names: Names
    name: str = "upstream"
    state_restarts: frozenset[str] = frozenset()  # main's state_events; empty on the production branch
    inactivity_timeout_s: float = INACTIVITY_TIMEOUT_S
    cache: dict[tuple[str, int, bool, int], UpstreamCase] = field(default_factory=dict)

    def react(self, strike: Strike, now: float, bad_nodes: frozenset[str]) -> Reaction:
        fault = strike.fault
        key = (fault.family, fault.variant, strike.at_startup, (fault.index + strike.occurrence) % PHASES)
        case = self.cache.get(key)
        if case is None:
            case = self.cache[key] = self._evaluate(*key)
        return Reaction(case.action, case.detect_s, notified=False, why=case.why)

    def human_took_over(self, now: float) -> None:
        return None  # upstream keeps no budget to reset

    def _evaluate(self, family: str, variant: int, at_startup: bool, phase: int) -> UpstreamCase:
        spec = self.mix.families[family].variants[variant]
        poll_s = self.settings.upstream_poll_s
        seen = render(spec, self.names, step_s=self.settings.step_s, at_startup=at_startup,
                      phase_s=poll_s * phase / PHASES, ranks_per_node=self.settings.gpus_per_node)  # fmt: skip
        end_at, state = seen.slurm.end_at_s, seen.slurm.end.state.value if seen.slurm.end else "COMPLETED"
        cursor, streak_from, streak = 0, None, 0
        t = poll_s
        n = len(seen.lines)
        while True:
            upto = cursor
            while upto < n and seen.times_s[upto] <= t:
                upto += 1
            ended = end_at <= t
            if ended and state in self.state_restarts:
                return UpstreamCase(
                    max(t - seen.fault_at_s, 0.0), RESTART, f"state_events: RUNNING -> {state}"
                )
            if upto > cursor:
                fired = _first_event("\n".join(seen.lines[cursor:upto]))
                cursor, streak_from, streak = upto, None, 0
                if fired is not None and t >= seen.fault_at_s:
                    name, action = fired
                    if action != FINISH:
                        return UpstreamCase(
                            t - seen.fault_at_s, RESTART if action == RESTART_EV else STOP, name
                        )
            else:
                streak_from = t if streak_from is None else streak_from
                streak += 1
                if streak >= INACTIVITY_POLLS and t - streak_from >= self.inactivity_timeout_s:
                    return UpstreamCase(max(t - seen.fault_at_s, 0.0), RESTART, "inactive")
            if ended and state in FINISHED_STATES:
                return UpstreamCase(max(t - seen.fault_at_s, 0.0), STOP, f"marked finished ({state})")
            t += poll_s


@functools.lru_cache(maxsize=64)
def _first_event(text: str) -> tuple[str, str] | None:
    """The first event in list order whose pattern is in `text` (upstream's order, not the log's).

    Cached: the poll phases of one variant read the same chunk (a hang's watchdog cascade on every
    rank of a 16k-GPU job is one 4 MB poll, searched once per pattern)."""
    for name, regex, action in _COMPILED:
        if regex.search(text):
            return name, action
    return None
