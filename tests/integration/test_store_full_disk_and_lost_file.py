"""Issue 13 D9 and D10, store side, on real files: a full filesystem (a 1 MiB tmpfs mounted in a
private mount namespace) loses no write, and a deleted or replaced autoexp.db is noticed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

FULL_DISK_RUN = """
import json, subprocess, sys
from datetime import UTC, datetime
from pathlib import Path
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.adapters.store.buffer import BufferedStore
state, out = Path(sys.argv[1]), Path(sys.argv[2])
said, clock, now = [], [0.0], datetime.now(UTC)
store = SQLiteStore(state)
job = store.add_job(store.create_session("s", config_path="e.yaml", config={}, now=now).id,
                    job_key="k", name="j", plan={}, now=now)
buf = BufferedStore(store, said.append, clock=lambda: clock[0])
subprocess.run(["dd", "if=/dev/zero", f"of={state / 'filler'}", "bs=64k"], capture_output=True)
def decide(i): return buf.record_decision(job.id, attempt_id=None, action="restart", reason=f"d{i}", now=now)
results = [decide(i) for i in range(3)]
clock[0] = 30.0
results += [decide(3), buf.flush()]
clock[0] = 61.0
results += [decide(4), len(buf.pending())]
(state / "filler").unlink()
results += [buf.flush(), decide(5) is not None]
store.close()
with SQLiteStore(state) as again:
    reasons = [d.reason for d in again.decisions_for_job(job.id)]
(out / "result.json").write_text(json.dumps({"results": results, "reasons": reasons, "said": said}))
"""


def test_full_filesystem_keeps_every_decision_in_order(
    on_full_tmpfs: Callable[[str], dict[str, Any]],
) -> None:
    """D9: the state dir's filesystem is full: decisions are kept in memory (write() returns None),
    flush() fails while full, the warning is said once a minute (2 warnings over 61 s for 5
    failed writes); once space is back, flush() saves them all, in order, and new writes go through."""
    result = on_full_tmpfs(FULL_DISK_RUN)
    assert result["results"] == [None, None, None, None, False, None, 5, True, True]
    assert result["reasons"] == ["d0", "d1", "d2", "d3", "d4", "d5"]
    warnings = [s for s in result["said"] if s.startswith("warning: cannot write")]
    assert len(warnings) == 2 and "disk full" in warnings[0] and "kept in memory" in warnings[0]
    assert result["said"][-1].startswith("the state database is writable again")


SUBMIT_ON_FULL_DISK = """
import json, subprocess, sys, time, yaml
from datetime import UTC, datetime
from pathlib import Path
from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.plan.plan import build_plans
from oellm_autoexp.daemon.session import create_session, job_runtime
from oellm_autoexp.daemon.submitter import Submitter
state, out = Path(sys.argv[1]), Path(sys.argv[2])
exp = out / "e.yaml"
exp.write_text(yaml.safe_dump({"defaults": [{"backend": "command"}, {"slurm": "local"}], "executor": "local",
    "experiment": {"name": "full", "output_dir": str(out / "o")}, "backend": {"command": ["true"]}}))
plans = build_plans(load_jobs(str(exp), []), str(out))
store = SQLiteStore(state)
_, [job] = create_session(store, plans, name="s", config_path=str(exp), now=datetime.now(UTC))
subprocess.run(["dd", "if=/dev/zero", f"of={state / 'filler'}", "bs=64k"], capture_output=True)
said = []
submitter = Submitter(store, said.append)
attempt = submitter.submit(job_runtime(job, state), (), time.time())
cli = subprocess.run([sys.executable, "-m", "oellm_autoexp", "--state-dir", str(state), "submit", str(exp),
                      "--no-monitor"], capture_output=True, text=True)
(state / "filler").unlink()
local_jobs = sorted(p.name for p in (state / "local_jobs").glob("*")) if (state / "local_jobs").exists() else []
(out / "result.json").write_text(json.dumps({"attempt": attempt, "due": submitter.has_due(), "said": said,
    "attempts": len(store.attempts_for_job(job.id)), "local_jobs": local_jobs,
    "cli": [cli.returncode, cli.stdout, cli.stderr]}))
"""


def test_no_submission_while_the_state_dir_is_full(
    tmp_path: Path, on_full_tmpfs: Callable[[str], dict[str, Any]]
) -> None:
    """D9: with the state dir's filesystem full, the submitter records no intent and so starts no
    job (a job the store cannot remember is never started): it says why and retries later. And
    `autoexp submit` there stops with one line naming the state dir, exit 1, no traceback."""
    result = on_full_tmpfs(SUBMIT_ON_FULL_DISK)
    assert result["attempt"] is None and result["due"] is True
    assert "the state dir is full, cannot record attempt 1" in result["said"][0]
    assert result["attempts"] == 0 and result["local_jobs"] in ([], ["counter"])
    code, _, err = result["cli"]
    assert code == 1 and "Traceback" not in err and err.count("\n") == 1, err
    assert f"no space left in {tmp_path / 'mnt'}" in err


def test_deleted_database_file_is_noticed(tmp_path: Path) -> None:
    """D10: autoexp.db (and its -wal/-shm) deleted while the store is open: is_intact() turns False
    and file_problem() says it was deleted; before that it was True."""
    with SQLiteStore(tmp_path) as store:
        store.create_session("s", config_path="e.yaml", config={}, now=datetime.now(UTC))
        assert store.is_intact() and store.file_problem() is None
        for path in tmp_path.glob("autoexp.db*"):
            path.unlink()
        assert not store.is_intact()
        assert f"{tmp_path / 'autoexp.db'} was deleted while in use" in (store.file_problem() or "")


def test_replaced_database_file_is_noticed(tmp_path: Path) -> None:
    """D10: autoexp.db replaced by another file (an empty DB created by a second process after a
    delete, or a restored copy): is_intact() is False and the message names both inodes."""
    with SQLiteStore(tmp_path / "a") as store:
        store.create_session("s", config_path="e.yaml", config={}, now=datetime.now(UTC))
        (tmp_path / "a" / "autoexp.db").unlink()
        SQLiteStore(tmp_path / "a").close()  # the next process finds no file and makes a new one
        assert not store.is_intact()
        assert "was replaced by another file (inode" in (store.file_problem() or "")
