"""The classifier and `autoexp classify` over every recorded and synthetic fault log.

tests/fixtures/logs/cpu/ holds real torchrun/srun logs (scripts/gen_cpu_fault_logs.py);
tests/fixtures/logs/synthetic/ holds hand-written GPU messages; tests/fixtures/logs/gpu/,
when present, holds real 2-GPU NCCL logs and each one needs a row here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.classify.root_cause import SILENT_DEATH_PATTERN, log_cause

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
REPO = Path(__file__).resolve().parents[2]
PATTERNS = load_patterns(["megatron_production"])

# file -> (root error_type, rank of the cause or None, a cascade/teardown error type that must NOT win)
EXPECTED: dict[str, tuple[str | None, int | None, str | None]] = {
    "cpu/healthy.log": (None, None, None),
    "cpu/oom.log": ("oom", 1, "nccl"),
    "cpu/exception.log": ("exception", 1, "nccl"),
    "cpu/hang.log": ("nccl_timeout", 0, None),
    "cpu/killed.log": ("killed", None, "nccl"),
    "cpu/segfault.log": ("segfault", None, "nccl"),
    "cpu/nan_loss.log": ("numerical_instability", None, None),
    "cpu/rendezvous_timeout.log": ("rendezvous", None, None),
    "cpu/slurm_srun_killed.log": ("killed", None, "nccl"),
    "cpu/slurm_time_limit.log": ("time_limit", None, None),
    "cpu/slurm_cancelled.log": ("cancelled", None, None),
    # real 2x H200 logs (NCCL 2.28, one host), recorded by scripts/device/gpu_suite.sh
    "gpu/oom.log": ("oom", 1, "nccl_timeout"),
    "gpu/crash.log": ("exception", 1, "nccl_timeout"),
    "gpu/kill.log": ("killed", None, "nccl_timeout"),
    "gpu/segv.log": ("segfault", None, "nccl_timeout"),
    "gpu/nan.log": ("numerical_instability", None, None),
    "gpu/hang.log": ("nccl_timeout", 0, None),
    # real megatron-core 0.19.2 logs on 2x H200 (scripts/device/megatron_suite.sh; README beside them)
    "megatron/healthy.log": (None, None, None),
    "megatron/torch_format.log": (None, None, None),
    "megatron/sigterm.log": ("time_limit", None, None),
    "megatron/sigterm_resume.log": (None, None, None),
    "megatron/resume_changed_train_iters.log": ("config_error", 0, None),
    "megatron/oom.log": ("oom", 1, None),
    "megatron/stop.log": ("nccl_timeout", 0, None),
    "megatron/kill9.log": ("killed", None, None),
    "megatron/nan.log": ("numerical_instability", 1, None),
    "megatron/oom_hang_stacks.log": ("oom", 0, None),
    "megatron/walltime_usr1.log": ("time_limit", None, None),
    "megatron/walltime_resume.log": (None, None, None),
    "synthetic/synthetic_cuda_oom_gen1_torch1.log": ("oom", 3, "nccl_timeout"),
    "synthetic/synthetic_cuda_oom_gen2_typo.log": ("oom", None, None),
    "synthetic/synthetic_cuda_oom_gen3_torch25.log": ("oom", 1, "nccl_timeout"),
    "synthetic/synthetic_nccl_watchdog_timeout.log": ("nccl_timeout", 2, None),
    "synthetic/synthetic_nccl_heartbeat_hang.log": ("hang", 0, None),
    "synthetic/synthetic_xid_79.log": ("gpu_hardware", None, "cuda_error"),
    "synthetic/synthetic_ecc_error.log": ("gpu_hardware", None, "nccl_timeout"),
    "synthetic/synthetic_illegal_memory_access.log": ("cuda_error", 6, "nccl"),
    "synthetic/synthetic_device_side_assert.log": ("cuda_error", None, None),
    "synthetic/synthetic_host_oom_kill.log": ("oom", None, "killed"),
    "synthetic/synthetic_node_failure.log": ("node_failure", None, "nccl"),
    "synthetic/synthetic_preempted.log": ("preempted", None, "exception"),
    "synthetic/synthetic_tcpstore_timeout.log": ("rendezvous", 3, None),
    # real 2x H200 logs recorded UNDER the monitor (scripts/device/gpu_autoexp.sh), both timeouts
    **{
        f"gpu_monitor/{fault}_pg{t}.log": expected
        for t in (30, 600)
        for fault, expected in {
            "oom": ("oom", 1, "nccl_timeout"),
            "crash": ("exception", 1, "nccl_timeout"),
            # rank 1 SIGKILLed: torchrun's teardown line first, rank 0's watchdog timeout long after it
            "kill": ("killed", None, "nccl_timeout"),
            "segv": ("segfault", None, "nccl_timeout"),
            "nan": ("numerical_instability", 1, None),
            "hang": ("nccl_timeout", 0, None),
        }.items()
    },
    "gpu_monitor/healthy.log": (None, None, None),
    # one rank on one H100 under the monitor (scripts/device/gpu_scenarios.py --nproc 1): no survivor
    "gpu_monitor_1gpu/oom_1rank.log": ("oom", 0, None),
    "gpu_monitor_1gpu/crash_1rank.log": ("exception", 0, None),
    "gpu_monitor_1gpu/kill_1rank.log": ("killed", None, None),
    "gpu_monitor_1gpu/segv_1rank.log": ("segfault", None, None),
    "gpu_monitor_1gpu/nan_1rank.log": ("numerical_instability", 0, None),
    # issue 27: rank 0 raised and did not exit (workload fault raise_and_linger), one H100
    "gpu_monitor_1gpu/linger_1rank.log": ("exception", 0, None),
    # issue 25: a healthy run whose MONITOR was SIGSTOPped 75 s mid-run (gpu_scenarios.py paused)
    "gpu_monitor_1gpu/healthy_paused_1rank.log": (None, None, None),
    # megatron-core on 2 x H200 under the monitor (scripts/device/megatron_autoexp.sh)
    "megatron_autoexp/kill9_attempt1.log": ("killed", None, None),  # torchrun's teardown, rank 1 silent
    "megatron_autoexp/oom_attempt1.log": ("oom", 0, None),
    "megatron_autoexp/stop_attempt1.log": ("nccl_timeout", 0, None),  # the frozen rank: a hang, not killed
    # session 9: the frozen rank again, cancelled by the hang verdict (scheduled floor) before NCCL's watchdog
    "megatron_autoexp/silent_attempt1.log": (None, None, None),
    "megatron_autoexp/walltime_attempt1.log": ("time_limit", None, None),  # the planned save + exit 0
    **{f"megatron_autoexp/{s}_attempt2.log": (None, None, None) for s in ("kill9", "stop", "walltime")},
    # 2 x H100, 2026-11-25 (scripts/device/two_gpu_proof.sh, two_gpu_followup.sh): issue 27's faults
    "gpu_monitor/raise_and_linger_pg600.log": ("exception", 1, None),  # rank 0 blocked in NCCL beside it
    # rank 0 alone loads the checkpoint the fault overwrote with garbage: torch 2.6's `Weights only load failed`
    # (a file every resume reads the same way: config_error, catalogs/checkpoint_files.yaml); rolled back
    "gpu_monitor/loadfail_rank0_attempt2.log": ("config_error", 0, None),
    "gpu_monitor/savefull_rank0.log": ("config_error", 0, None),  # ENOSPC in torch.save on rank 0
    # CheckpointException on load; its cause is torch's "PytorchStreamReader failed reading zip archive" (a
    # corrupt checkpoint file: config_error, catalogs/checkpoint_files.yaml); the judge's load-failure rule
    # rolls back on config_error as on exception (core/decide/load_failure.py LOADER_ERROR_TYPES)
    "megatron_autoexp/loadfail_attempt2.log": ("config_error", 1, None),
    "megatron_autoexp/linger_attempt1.log": ("exception", 1, None),  # AUTOEXP_FAULT raise_and_linger
    "megatron_autoexp/diskfull_attempt1.log": ("config_error", None, None),  # writer: unexpected pos
    # 2 x H200, 2026-11-26, the burst's 4th kill -9 of rank 1: its orphaned DataLoader worker's resource_sharer
    # thread printed `[rank1]: ConnectionResetError` through torch's excepthook; the peer's death, not a bug
    "megatron_autoexp/burst_attempt4.log": ("killed", None, None),
    # the same burst with the kills injected in process (AUTOEXP_FAULT=kill@91,75,85,65:1), rank 1 silent
    **{f"megatron_autoexp/burst_inproc_attempt{n}.log": ("killed", None, None) for n in (1, 2, 3, 4)},
    # 2 x H100, session 10: rank 1's own code gave up in words no pattern knows (AUTOEXP_FAULT=guard). The
    # monitor judged it at torchrun's teardown by those words (test_megatron_protocol.py); read whole, the log
    # ends with torchrun's own `--- Logging error ---` traceback (a KeyError in its SIGTERM handling, printed
    # after the monitor's cancel), which reads as a Python exception: a known wart of reading a log after its end
    "megatron_autoexp/guard_attempt1.log": ("exception", None, None),
    # 2 x H200, session 14: rank 1's dataset index gone at iteration 120 (AUTOEXP_FAULT=file_gone): Python's
    # FileNotFoundError, a configuration error (restarted once: the configuration trained until then); the
    # launcher's SIGTERM tracebacks and the store's socket warnings after the monitor's cancel carry no class
    "megatron_autoexp/filegone_attempt1.log": ("config_error", 1, None),
}

FIXTURES = sorted(str(p.relative_to(LOGS)) for p in LOGS.rglob("*.log"))


def test_every_fixture_has_an_expectation() -> None:
    """A new fixture (e.g. a GPU log recorded later) must get a row in EXPECTED."""
    assert sorted(EXPECTED) == FIXTURES


@pytest.mark.parametrize("name", FIXTURES)
def test_root_cause_of_fixture(name: str) -> None:
    """Each log's root cause is the failing rank's own error; the cascade it caused is present but does not win."""
    error_type, rank, cascade = EXPECTED[name]
    signals = classify_lines((LOGS / name).read_text().splitlines(), PATTERNS)
    cause = log_cause(signals)
    assert (cause.error_type if cause else None) == error_type
    if rank is not None:
        assert cause is not None and cause.rank == rank
    if cascade is not None:
        assert any(s.error_type == cascade for s in signals), f"fixture should contain a {cascade} signal"


@pytest.mark.parametrize(
    "name",
    [
        "cpu/oom.log",
        "cpu/exception.log",
        "cpu/killed.log",
        "cpu/segfault.log",
        "gpu/oom.log",
        "gpu/kill.log",
        "gpu/segv.log",
    ],
)
def test_torchrun_summary_names_the_first_failed_rank(name: str) -> None:
    """torchrun's ChildFailedError summary says rank 1 failed first; the classifier extracts it."""
    report = _cli("--json", str(LOGS / name))[0]
    assert report["failed_rank"] == 1


def _classify(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """`autoexp classify ARGS` as a user runs it, from the repository root."""
    argv = [sys.executable, "-m", "oellm_autoexp", "classify", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=check, cwd=REPO)


def _cli(*args: str) -> list[dict]:
    proc = _classify(*args, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_cli_json_over_every_fixture() -> None:
    """`autoexp classify --json` prints one object per file with the root cause, evidence and all signals."""
    reports = _cli("--json", *(str(LOGS / n) for n in FIXTURES))
    assert [Path(r["file"]).relative_to(LOGS).as_posix() for r in reports] == FIXTURES
    for name, report in zip(FIXTURES, reports, strict=True):
        assert report["error_type"] == EXPECTED[name][0], name
        assert {"file", "error_type", "subsystem", "signal", "line", "evidence", "signals"} <= set(report)
        if report["error_type"] is not None:
            assert report["evidence"] and report["signal"]
            cause_lines = [s for s in report["signals"] if s["line_no"] == report["line"]]
            if report["signal"] == SILENT_DEATH_PATTERN:  # made from the launcher's teardown line
                assert any(s["teardown_start"] == "worker_failed" for s in cause_lines)
            else:
                assert any(s["pattern"] == report["signal"] for s in cause_lines)


def test_cli_text_output_names_the_cause() -> None:
    """The human output starts with the file and its root cause."""
    proc = _classify(str(LOGS / "cpu/oom.log"), check=True)
    assert "root cause: oom (host, pattern cpu_alloc_failure" in proc.stdout


def test_cli_missing_file_exits_2(tmp_path: Path) -> None:
    """A log that does not exist is a user error: one line, exit code 2."""
    proc = _classify(str(tmp_path / "nope.log"))
    assert proc.returncode == 2 and "log file not found" in proc.stderr


def test_cli_user_pattern_file_with_bad_regex_exits_2(tmp_path: Path) -> None:
    """A user pattern file with an invalid regex fails with the file, pattern and key named."""
    bad = tmp_path / "mine.yaml"
    bad.write_text("include: [base]\npatterns:\n  - name: broken\n    regex: '(oops'\n")
    proc = _classify("--patterns", str(bad), str(LOGS / "cpu/oom.log"))
    assert proc.returncode == 2
    assert "mine.yaml: patterns[0] (name 'broken') key 'regex': invalid regular expression" in proc.stderr


def test_cli_user_pattern_file_adds_a_cause(tmp_path: Path) -> None:
    """`--patterns FILE` that includes the shipped set can raise a site-specific line above the rest."""
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "include: [megatron_production]\npatterns:\n"
        "  - name: shard_bug\n    regex: 'shard index (?P<index>\\d+) out of range'\n"
        "    error_type: data\n    subsystem: dataset\n    priority: 5\n"
    )
    (report,) = _cli("--json", "--patterns", str(mine), str(LOGS / "cpu/exception.log"))
    assert (report["error_type"], report["signal"]) == ("data", "shard_bug")
