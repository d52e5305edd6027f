"""Multi-GPU failures under the real monitor: a rank dies, the survivors block in NCCL.

Each job plays a log recorded on 2 x H200 (tests/fixtures/logs/gpu, one fault on rank 1) with
its recorded gaps and then BLOCKS, as the surviving rank does inside its next collective
(NCCL 2.28 on one host reports nothing; the job stays RUNNING for the whole collective
timeout). CPU/gloo runs never show this: gloo peers die within a second. The monitor must
act on the first fatal line (after its settle window), on the root cause, within seconds,
and cancel the job itself. Local executor: real processes, no Slurm.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.watch.evidence import Evidence

GPU_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "gpu"
PLAYER = Path(__file__).parent / "play_log.py"
HEALTHY = "\n".join(
    f" [2026-11-22 04:30:0{i}] iteration        {i}/       5 | lm loss: 4.0E+00 |" for i in range(1, 6)
)
SETTINGS = {"poll_interval_s": 1, "heartbeat_interval_s": 1, "log_poll_interval_s": 0.5, "fatal_settle_s": 3}
DEADLINE_S = 90.0
DECIDED_WITHIN_S = 10.0  # the bound: decided within 10 s of the first fatal line


def _run(tmp: Path, log: str, until: int, monitoring: dict[str, Any] | None = None) -> tuple[int, str]:
    healthy = tmp / "healthy.log"
    healthy.write_text(HEALTHY + "\n")
    command = [sys.executable, str(PLAYER), str(GPU_LOGS / log), "--until", str(until), "--then", "block",
               "--after", str(tmp / "played"), str(healthy)]  # fmt: skip
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": log.removesuffix(".log"), "output_dir": str(tmp / "out")},
        "executor": "local",
        "backend": {"command": command},
        "monitoring": {**SETTINGS, **(monitoring or {})},
    }
    path = tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp / "state"), "run", str(path)]
    done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=DEADLINE_S, check=False)
    return done.returncode, done.stdout + done.stderr


def _recorded(tmp: Path) -> tuple[list[JobState], list[tuple[str, str, Evidence]]]:
    with SQLiteStore(tmp / "state") as store:
        (job,) = store.jobs_for_session(1)
        states = [a.state for a in store.attempts_for_job(job.id)]
        decisions = [
            (d.action, d.reason, Evidence.from_json(d.evidence)) for d in store.decisions_for_job(job.id)
        ]
    return states, decisions


@pytest.mark.parametrize(
    ("log", "until", "error_type", "root_line"),
    [
        ("oom.log", 39, "oom", 38),  # the OOM, then torchrun's SIGTERM to rank 0
        ("crash.log", 38, "exception", 36),  # `[rank1]: RuntimeError: injected crash ...`
        ("segv.log", 36, "segfault", 15),  # `Fatal Python error: Segmentation fault`
    ],
)
def test_a_dead_rank_with_a_permanent_cause_stops_at_once(
    tmp_path: Path, log: str, until: int, error_type: str, root_line: int
) -> None:
    """OOM, exception or segfault on rank 1 while rank 0 blocks: exactly one attempt, cancelled by the
    monitor, and `Permanent failure detected (excluded error_type: ...)` decided on the root line within
    10 s of the first fatal line, not a `hang` restart after the progress floor."""
    code, output = _run(tmp_path, log, until, {"hang": {"progress_floor_s": 30}})
    assert code == 1, output
    states, decisions = _recorded(tmp_path)
    assert states == [JobState.CANCELLED], output
    ((action, reason, ev),) = decisions
    assert (action, reason) == ("stop", f"Permanent failure detected (excluded error_type: {error_type})")
    assert (ev.trigger, ev.error_type, ev.root_line_no) == ("fatal_line", error_type, root_line)
    assert ev.after_first_fatal_s is not None and ev.after_first_fatal_s <= DECIDED_WITHIN_S


def test_a_silently_killed_rank_is_restarted_as_killed(tmp_path: Path) -> None:
    """Rank 1 SIGKILLed (no line of its own; torchrun's teardown line is the only trace) while rank 0
    blocks: restarted at once, recorded as `killed`, and the next attempt completes."""
    code, output = _run(tmp_path, "kill.log", 16)
    assert code == 0, output
    states, decisions = _recorded(tmp_path)
    assert states == [JobState.CANCELLED, JobState.COMPLETED], output
    (action, reason, ev), (last, _, _) = decisions
    assert (action, reason, last) == ("restart", "Transient failure detected (error_type=killed)", "stop")
    assert ev.trigger == "fatal_line" and ev.signal == "worker_died_silently"
    assert ev.after_first_fatal_s is not None and ev.after_first_fatal_s <= DECIDED_WITHIN_S


def test_a_hung_rank_is_restarted_as_a_hang(tmp_path: Path) -> None:
    """Rank 1 stops taking part (no line from anyone until the collective timeout): the progress tracker's
    verdict restarts it as `hang`, and the next attempt completes."""
    code, output = _run(tmp_path, "hang.log", 15, {"hang": {"progress_floor_s": 6}})
    assert code == 0, output
    states, decisions = _recorded(tmp_path)
    assert states == [JobState.CANCELLED, JobState.COMPLETED], output
    (action, reason, ev), _ = decisions
    assert (action, reason) == ("restart", "Transient failure detected (error_type=hang)")
    assert (ev.trigger, ev.kind) == ("hang", "hang")


def _run_script(tmp: Path, body: str) -> tuple[int, str]:
    script = tmp / "job.sh"
    script.write_text('n=$(( $(cat "$0.n" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$0.n"\n' + body)
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"restart": "megatron_transient"}],
        "experiment": {"name": "megatron", "output_dir": str(tmp / "out")},
        "executor": "local",
        "backend": {"command": ["bash", str(script)]},
        "monitoring": SETTINGS,
    }
    path = tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp / "state"), "run", str(path)]
    done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=DEADLINE_S, check=False)
    return done.returncode, done.stdout + done.stderr


def test_megatron_sigterm_save_and_exit_0_mid_run_is_resumed(tmp_path: Path) -> None:
    """Megatron's `--exit-signal-handler` saves and exits 0 at iteration 120 of 400: not completion; the
    job is resubmitted (the scheduler rule), and the attempt that reaches 400/400 completes it."""
    code, output = _run_script(
        tmp_path,
        """\
if [ "$n" -eq 1 ]; then first=1; last=120; else first=121; last=400; fi
for i in $(seq "$first" 40 "$last") "$last"; do echo " [2026-11-23 01:46:00] iteration $i/     400 | lm loss: 4.1E+00 |"; done
echo "saving checkpoint at iteration     $last to /ckpt in torch_dist format"
echo "  successfully saved checkpoint from iteration     $last to /ckpt"
[ "$n" -eq 1 ] && echo "exiting program after receiving SIGTERM."
exit 0
""",
    )
    assert code == 0, output
    states, decisions = _recorded(tmp_path)
    assert states == [JobState.COMPLETED, JobState.COMPLETED]
    assert [(a, r) for a, r, _ in decisions] == [
        (
            "restart",
            "saved and exited before the last iteration at iteration 120: resubmitted to continue "
            "(counts against the budget only if the next attempt does not get past iteration 120)",
        ),
        ("stop", "Job completed successfully"),
    ]
    assert (decisions[0][2].rule, decisions[0][2].kind) == ("scheduler", "early_exit")


def test_megatron_exit_16_restarts_once_then_stops(tmp_path: Path) -> None:
    """Exit 16 from Megatron's rerun machinery (after `found NaN in local grad norm`) is restarted once as
    numerical_instability; the same exit again, with no progress in between, stops."""
    code, output = _run_script(
        tmp_path,
        """\
echo " [2026-11-23 01:46:00] iteration      118/     400 | lm loss: 4.1E+00 |"
echo "Unexpected result nan on rank 0 at iteration #118 invocation #1 (message='found NaN in local grad norm')"
exit 16
""",
    )
    assert code == 1, output
    states, decisions = _recorded(tmp_path)
    assert states == [JobState.FAILED, JobState.FAILED]
    assert decisions[0][:2] == ("restart", "Transient failure detected (error_type=numerical_instability)")
    assert decisions[0][2].rule == "megatron_rerun" and decisions[0][2].exclude_nodes == ("localhost",)
    assert decisions[1][0] == "stop" and decisions[1][1].startswith("retry budget exhausted (attempt 2/1")
