"""A checkpoint save refused by the filesystem stops the run, naming the directory and its free
space (statvfs of the real directory), under `autoexp run` with the local executor.

The worker saves one checkpoint, then its next save fails with ENOSPC raised in the worker (a real
full filesystem needs a mount this test does not make; the statvfs boundary is faked in
tests/unit/adapters/fs/test_disk_space.py). Everything after the exception is the monitor's own.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore

WORKER = r"""
import errno, os, sys
from pathlib import Path
ck = Path("out/checkpoints"); ck.mkdir(parents=True, exist_ok=True)
print(" saving checkpoint at iteration      10 to out/checkpoints", flush=True)
(ck / "iter_0000010.pt").write_bytes(b"x" * 4096)
print("  successfully saved checkpoint from iteration      10 to out/checkpoints", flush=True)
print(" saving checkpoint at iteration      20 to out/checkpoints", flush=True)
raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(ck / "iter_0000020.pt.tmp"))
"""


def test_a_save_refused_for_space_stops_naming_the_disk(tmp_path: Path) -> None:
    """Stopped (not restarted into the same disk), the reason names the checkpoint directory, its
    free and total space as statvfs reads them, and what to free."""
    experiment = {
        "defaults": [{"slurm": "local"}, {"backend": "command"}, {"monitoring": "autoexp_workloads"},
                     {"restart": "megatron_transient"}],
        "experiment": {"name": "diskfull", "output_dir": "out"},
        "executor": "local",
        "backend": {"command": [sys.executable, "-c", WORKER, "--ckpt-dir", "out/checkpoints"]},
        "monitoring": {"poll_interval_s": 1, "log_poll_interval_s": 0.3, "heartbeat_interval_s": 2},
    }  # fmt: skip
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(experiment))
    argv = [sys.executable, "-m", "oellm_autoexp", "--state-dir", str(tmp_path / "state"), "run", str(config)]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    with SQLiteStore(tmp_path / "state") as store:
        (job,) = store.jobs_for_session(1)
        decisions = [(d.action, d.reason) for d in store.decisions_for_job(job.id)]
    assert [a for a, _ in decisions] == ["stop"], (decisions, done.stdout[-3000:], done.stderr[-3000:])
    reason = decisions[0][1]
    assert re.match(
        r"checkpoint save failed: \S*out/checkpoints has [\d.]+ [KMGTP]?i?B free of [\d.]+ [KMGTP]?i?B",
        reason,
    ), reason
    assert (
        "No space left on device" in reason and "free at least 4 KiB (the last checkpoint's size)" in reason
    )
