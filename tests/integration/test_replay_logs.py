"""`autoexp replay` over the real GPU fault logs, its JSON, `--compare`, and its answers to bad input.

The logs in tests/fixtures/logs/gpu were recorded on 2 x H200 with a 30 s collective timeout
(their README says how); logs recorded under the monitor with 600 s and 30 s timeouts go
into tests/fixtures/logs/gpu_monitor/ (2 ranks) and gpu_monitor_1gpu/ (1 rank, one H100) and are
picked up here by their file names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oellm_autoexp.cli.main import main
from oellm_autoexp.daemon.replay_runs import read_log, replay_file, setup_from_config

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
FAULT_FOLDERS = (LOGS / "gpu", LOGS / "gpu_monitor", LOGS / "gpu_monitor_1gpu")
MAX_DELAY_S = 10.0  # issue 8: decided within 10 s of the first fatal line, whatever the collective timeout
PERMANENT = "Permanent failure detected (excluded error_type: {})"
EXPECTED: dict[
    str, tuple[str, str | None, set[str | None], str | None]
] = {  # fault (in the file name) -> (action, reason, error types, kind or None)
    "oom": ("stop", PERMANENT.format("oom"), {"oom"}, None),
    "crash": ("stop", PERMANENT.format("exception"), {"exception"}, None),
    "segv": ("stop", PERMANENT.format("segfault"), {"segfault"}, None),
    "kill": ("restart", "Transient failure detected (error_type=killed)", {"killed"}, None),
    "hang": ("restart", None, {"hang", "nccl_timeout"}, "hang"),
    "nan": ("stop", PERMANENT.format("numerical_instability"), {"numerical_instability"}, None),
    "healthy": ("stop", "Job completed successfully", {None}, "success"),  # no fatal line at all
    # a rank that raised and lingers: judged on its exception line once the settle window passed
    "linger": ("stop", PERMANENT.format("exception"), {"exception"}, None),
    # issue 27 on 2 x H100: a checkpoint rank 0 fails to load (rolled back: a restart naming it), and a
    # save refused by a full disk (stopped; the replay cannot read the disk, the reason says so)
    # (torch's `Weights only load failed` on the garbage file reads config_error; the load-failure rule rolls
    # back on it as on exception, core/decide/load_failure.py LOADER_ERROR_TYPES)
    "loadfail": ("restart", None, {"config_error"}, None),
    "savefull": ("stop", None, {"config_error"}, None),
}


def fault_logs() -> list[Path]:
    return [p for folder in FAULT_FOLDERS if folder.is_dir() for p in sorted(folder.glob("*.log"))]


def fault_of(path: Path) -> str | None:
    names = [t for t in re.split(r"[^a-z]+", path.stem.lower()) if t in EXPECTED]
    return names[0] if len(names) == 1 else None


def test_every_gpu_log_names_one_known_fault() -> None:
    """No fault log is silently left out of the replay test below: each file name names one fault
    (oom, crash, segv, kill, hang, nan, or healthy for a fault-free run), e.g. `oom_600s.log`."""
    logs = fault_logs()
    assert [p.name for p in logs if fault_of(p) is None] == []
    assert {fault_of(p) for p in logs} >= {"oom", "crash", "segv", "kill", "hang", "nan"}


@pytest.mark.parametrize("path", fault_logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_gpu_fault_is_decided_on_its_root_cause_within_seconds(path: Path) -> None:
    """Each real 2-GPU fault, replayed on its recorded clock with megatron_transient, gets exactly one
    decision on its root cause, taken within 10 s of the first fatal line: oom, crash and segv stop as
    permanent failures, kill restarts as `killed`, hang restarts as a hang (kind hang).

    The code before the judge step (issue 8) judged these attempts on the hang tracker or on the
    survivor's NCCL watchdog line: oom, crash and segv were restarted as `hang` (twice, then the hang
    budget ran out) and kill was recorded as `hang`; these assertions fail on that code.
    """
    fault = fault_of(path) or ""
    action, reason, error_types, kind = EXPECTED[fault]
    result = replay_file(read_log(path), setup_from_config(None, [], []))
    [decision] = result.decisions
    evidence = decision.judgement.evidence
    assert decision.judgement.decision.action.value == action
    if reason is not None:
        assert decision.judgement.decision.reason == reason
    assert evidence.error_type in error_types
    if kind is not None:
        assert evidence.kind == kind
    if fault == "healthy":
        assert result.first_fatal is None and evidence.after_first_fatal_s is None
        return
    assert evidence.after_first_fatal_s is not None and 0 <= evidence.after_first_fatal_s <= MAX_DELAY_S


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_over_a_folder(capsys: pytest.CaptureFixture[str]) -> None:
    """`--json DIR` prints one array with one object per log, in the documented shape; a decision's
    `after_first_fatal_s` is its `at_s` minus the first fatal line's."""
    code, out, _ = run_cli(capsys, "replay", "--json", str(LOGS / "gpu"))
    assert code == 0
    rows = json.loads(out)
    assert [Path(r["file"]).name for r in rows] == sorted(p.name for p in (LOGS / "gpu").glob("*.log"))
    oom = next(r for r in rows if r["file"].endswith("oom.log"))
    assert set(oom) >= {"file", "root_cause", "first_fatal", "decisions", "end_state"}
    assert oom["root_cause"]["error_type"] == "oom" and oom["root_cause"]["line_no"] == 38
    assert oom["first_fatal"]["line_no"] == 38 and oom["end_state"] == "FAILED:1"
    [decision] = oom["decisions"]
    assert set(decision) >= {"at_s", "action", "reason", "error_type", "rule", "after_first_fatal_s"}
    assert decision["after_first_fatal_s"] == pytest.approx(decision["at_s"] - oom["first_fatal"]["at_s"])


def test_human_timeline_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """The human output shows the first fatal line with its rank, the decision with its delay, and a summary."""
    code, out, _ = run_cli(capsys, "replay", str(LOGS / "gpu" / "oom.log"))
    assert code == 0
    assert "FIRST FATAL  root oom (cuda_oom rank 1, line 38)" in out
    assert (
        "decided by fatal_line: stop (rule transient, error_type oom, 5.0 s after the first fatal line)"
        in out
    )
    assert re.search(r"gpu/oom.log\s+oom \(line 38\)\s+stop: Permanent failure detected", out)


def test_compare_shows_two_policies_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    """`--compare A B` prints both policies' decisions per log and marks (`*`) the logs they decide
    differently; two policies that agree on every log mark none."""
    code, out, _ = run_cli(capsys, "replay", str(LOGS / "gpu"), "--compare", "restart=megatron_transient",
                           "restart=none")  # fmt: skip
    assert code == 0
    hang = next(line for line in out.splitlines() if "hang.log" in line)
    assert hang.startswith("*") and "restart: Transient failure detected" in hang
    assert "stop: restart policy none: never restarting" in hang
    code, out, _ = run_cli(capsys, "replay", str(LOGS / "gpu"), "--compare", "restart=megatron_transient",
                           "restart=default")  # fmt: skip
    assert code == 0 and not [line for line in out.splitlines() if line.startswith("*")]


def test_end_state_override(capsys: pytest.CaptureFixture[str]) -> None:
    """`--end-state FAILED:1` on a healthy log: no cause, a failed end, restarted as a crash."""
    code, out, _ = run_cli(
        capsys, "replay", "--json", "--end-state", "FAILED:1", str(LOGS / "cpu" / "healthy.log")
    )
    assert code == 0
    [row] = json.loads(out)
    assert row["end_state"] == "FAILED:1" and row["decisions"][0]["action"] == "restart"


def test_overrides_change_the_settle_window(capsys: pytest.CaptureFixture[str]) -> None:
    """`+monitoring.fatal_settle_s=2` moves the OOM decision to 2 s after the first fatal line."""
    code, out, _ = run_cli(
        capsys, "replay", "--json", str(LOGS / "gpu" / "oom.log"), "+monitoring.fatal_settle_s=2"
    )
    assert code == 0
    assert json.loads(out)[0]["decisions"][0]["after_first_fatal_s"] == 2.0


def test_no_timestamps_warns_and_replays_in_arrival_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log without a single stamp is replayed with zero gaps, with a warning in the output."""
    log = tmp_path / "plain.log"
    oom = (LOGS / "gpu" / "oom.log").read_text(encoding="utf-8").splitlines()[37]
    log.write_text(f"starting\n{oom}\n", encoding="utf-8")
    code, out, _ = run_cli(capsys, "replay", str(log))
    assert code == 0
    assert "warning: no line carries a time stamp: replayed in arrival order with zero gaps" in out
    assert "excluded error_type: oom" in out


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        (None, ["missing.log"], "missing.log: log file not found"),
        ("binary", ["blob.log"], "blob.log: looks like a binary file"),
        ("empty_dir", ["empty"], "empty: directory holds no log files"),
        ("empty", ["empty.log"], "empty.log: log file is empty"),
        (None, ["nothing-*.log"], "nothing-*.log: no file matches this pattern"),
        ("log", ["x.log", "--end-state", "DONE"], "unknown state 'DONE'"),
        ("log", ["x.log", "restart=nope"], "restart: no option 'nope'"),
        ("log", ["x.log", "slurm.nodes=2"], "without --experiment only monitoring=..."),
        (None, ["--session", "7", "job"], "no session database in"),
        ("db", ["--session", "7", "job"], "no session '7'"),
        (None, [], "name at least one LOG"),
    ],
)
def test_bad_input_is_one_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    make: str | None, args: list[str], message: str,
) -> None:  # fmt: skip
    """Bad input exits 2 with one `autoexp: error:` line naming the file or value, and no traceback."""
    from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

    monkeypatch.chdir(tmp_path)
    if make == "binary":
        (tmp_path / "blob.log").write_bytes(b"\x7fELF\x00\x01\x02")
    elif make == "empty_dir":
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "notes.md").write_text("x")
    elif make == "empty":
        (tmp_path / "empty.log").write_text("")
    elif make == "log":
        (tmp_path / "x.log").write_text("hello\n")
    elif make == "db":
        SQLiteStore(tmp_path / "state").close()
    code, _, err = run_cli(capsys, "--state-dir", str(tmp_path / "state"), "replay", *args)
    assert code == 2
    assert err.startswith("autoexp: error: ") and message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bytes_read_again_after_a_monitor_restart_are_replayed_once(tmp_path: Path) -> None:
    """A row re-read by a resumed monitor (its offset was not saved) is delivered once, at its first time."""
    from datetime import UTC, datetime

    from oellm_autoexp.adapters.store.sqlite_store import LogReadInfo
    from oellm_autoexp.daemon.replay_runs import batches_from_record

    log = tmp_path / "x.log"
    log.write_bytes(b"line one\nline two\nline three\n")
    at = [datetime(2026, 11, 23, 1, 0, s, tzinfo=UTC) for s in (0, 5, 9)]
    reads = [
        LogReadInfo(1, 1, 0, 18, at[0]),
        LogReadInfo(2, 1, 9, 18, at[1]),
        LogReadInfo(3, 1, 9, 29, at[2]),
    ]
    batches = batches_from_record(log, reads)
    assert [(b.at_s - at[0].timestamp(), b.lines, b.end_offset) for b in batches] == [
        (0.0, ("line one", "line two"), 18),
        (9.0, ("line three",), 29),
    ]
