"""Issue 13 D7, D8 and friends: a corrupted, read-only or missing state dir, and the monitor's
liveness in `status`. Every command answers with one line and an exit code, never a traceback."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from tests.integration.conftest import require_unshare

CLI = [sys.executable, "-m", "oellm_autoexp"]


def autoexp(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([*CLI, "--state-dir", str(state), *args], capture_output=True, text=True,
                          timeout=60, check=False, env=env)  # fmt: skip


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def heartbeat_age(line: str) -> int:
    found = re.search(r"heartbeat (\d+) s ago", line)
    assert found, line
    return int(found[1])


def make_session(state: Path, *, pid: int | None = None, heartbeat_age_s: float = 0.0) -> None:
    now = datetime.now(UTC)
    with SQLiteStore(state) as store:
        store.create_session("s", config_path="e.yaml", config={}, now=now)
        if pid is not None:
            then = now - timedelta(seconds=heartbeat_age_s)
            store.acquire_monitor_lock(1, pid=pid, host=socket.gethostname(), now=then, stale_after_s=120)


@pytest.mark.parametrize("command", [["status"], ["sessions"], ["cancel"], ["monitor-session", "--all"]])
def test_corrupted_database_is_named_and_left_alone(tmp_path: Path, command: list[str]) -> None:
    """D7: autoexp.db holds garbage: every command says, in one line, the file, "not a database" and
    what to do (move it aside); exit 2; the file is byte-for-byte unchanged and nothing is added."""
    state = tmp_path / "state"
    state.mkdir()
    garbage = b"this is no database\n" * 300
    (state / "autoexp.db").write_bytes(garbage)
    err = one_line_error(autoexp(state, *command))
    assert str(state / "autoexp.db") in err and "not a database" in err and "mv " in err
    assert (state / "autoexp.db").read_bytes() == garbage
    assert sorted(p.name for p in state.iterdir()) == ["autoexp.db"]


@pytest.mark.parametrize("command", [["status"], ["sessions"], ["explain", "x"]])
def test_read_only_command_on_a_missing_state_dir_creates_nothing(tmp_path: Path, command: list[str]) -> None:
    """`status` (and the other read-only commands) on a state dir that does not exist: one line
    saying there are no sessions, exit 2, and the dir is still not there."""
    state = tmp_path / "nothing_here"
    err = one_line_error(autoexp(state, *command))
    assert "no sessions" in err and str(state) in err
    assert not state.exists()


READ_ONLY_SCRIPT = """
set -e
mount -t tmpfs -o size=8m tmpfs "$1"
"$2" -c 'import sys, socket; from pathlib import Path; from datetime import UTC, datetime
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
with SQLiteStore(Path(sys.argv[1])) as s: s.create_session("ro", config_path="e.yaml", config={}, now=datetime.now(UTC))' "$1"
mount -o remount,ro "$1"
for cmd in status sessions cancel; do
  "$2" -m oellm_autoexp --state-dir "$1" $cmd > "$3/$cmd.out" 2> "$3/$cmd.err" || echo $? > "$3/$cmd.rc"
done
ls -A "$1" > "$3/files"
"""


def test_read_only_state_dir_reads_work_and_writers_say_why(tmp_path: Path) -> None:
    """D8: the state dir is on a read-only mount (a tmpfs remounted ro in a private mount
    namespace): `status` and `sessions` work; `cancel` says the dir cannot be written and that
    read-only commands still work (exit 2); no file is created there."""
    require_unshare(("-rm",), "user and mount namespaces, to mount a read-only tmpfs")
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    script = tmp_path / "ro.sh"
    script.write_text(READ_ONLY_SCRIPT, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    subprocess.run(["unshare", "-rm", "bash", str(script), str(mnt), sys.executable, str(out)], env=env,
                   check=True, timeout=120)  # fmt: skip
    assert not (out / "status.rc").exists(), (out / "status.err").read_text()
    assert "session 1 (ro): active" in (out / "status.out").read_text()
    assert not (out / "sessions.rc").exists(), (out / "sessions.err").read_text()
    assert (out / "cancel.rc").read_text().strip() == "2"
    err = (out / "cancel.err").read_text()
    assert "Traceback" not in err and str(mnt) in err and "cannot write the state there" in err
    assert "Read-only commands (status, sessions, explain) still work" in err
    assert (out / "files").read_text().split() == ["autoexp.db"]


def test_status_shows_a_dead_monitor_and_the_command_to_resume(tmp_path: Path) -> None:
    """The session's monitor pid no longer runs: `status` says the monitor is NOT RUNNING, with its
    heartbeat age, and prints the exact `autoexp --state-dir ... monitor-session --session-id 1`."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    state = tmp_path / "state"
    make_session(state, pid=gone.pid, heartbeat_age_s=42)
    done = autoexp(state, "status")
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("monitor:"))
    assert "NOT RUNNING" in line and f"pid {gone.pid}" in line and "(that pid is gone)" in line
    assert 42 <= heartbeat_age(line) < 60
    assert line.endswith(f"Resume with: autoexp --state-dir {state} monitor-session --session-id 1")


def test_status_shows_a_live_monitor_with_its_heartbeat(tmp_path: Path) -> None:
    """A holder that runs (this test's pid) with a fresh heartbeat: `status` says alive, and the
    JSON carries the heartbeat age."""
    state = tmp_path / "state"
    make_session(state, pid=os.getpid(), heartbeat_age_s=3)
    done = autoexp(state, "status")
    line = next(line for line in done.stdout.splitlines() if line.startswith("monitor:"))
    assert line.startswith(f"monitor: alive (pid {os.getpid()} on {socket.gethostname()}, heartbeat ")
    assert 3 <= heartbeat_age(line) < 60
    monitor = json.loads(autoexp(state, "status", "--json").stdout)["monitor"]
    assert monitor["alive"] is True and 2 <= monitor["heartbeat_age_s"] < 60


def test_cancel_from_a_second_host_is_refused_naming_the_monitor_host(tmp_path: Path) -> None:
    """R6: a monitor on this host holds the session; `autoexp cancel` run under another host name (a
    private UTS namespace) is refused, naming this host, exit 2; the job's status is unchanged."""
    require_unshare(("-r", "--uts"), "a private host name, to play the second login node")
    state = tmp_path / "state"
    make_session(state, pid=os.getpid(), heartbeat_age_s=1)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    second = f"hostname login-other && {sys.executable} -m oellm_autoexp --state-dir {state} cancel"
    done = subprocess.run(["unshare", "-r", "--uts", "bash", "-c", second], capture_output=True, text=True,
                          env=env, timeout=60, check=False)  # fmt: skip
    err = one_line_error(done)
    assert f"monitored on host {socket.gethostname()}" in err and "from login-other" in err
    done = autoexp(state, "status")  # the store is untouched and readable
    assert done.returncode == 0 and "session 1 (s): active" in done.stdout
