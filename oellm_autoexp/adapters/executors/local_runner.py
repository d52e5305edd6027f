"""The process that owns one local job: `python -m oellm_autoexp.adapters.executors.local_runner JOB_DIR SCRIPT`.

It is the leader of the job's own session and process group (the executor
starts it with start_new_session), runs the script with bash, forwards
TERM/INT/USR1/USR2 to it the way slurmd signals a batch shell, and on exit
writes `exit.json` atomically (write, then rename) so that any later process
can tell how the job ended, even after the submitting `autoexp` is gone.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from oellm_autoexp.adapters.fs.atomic_file import write_json_atomic

EXIT_FILE = "exit.json"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def exit_status(returncode: int) -> tuple[int, int | None]:
    """Popen's returncode -> (exit code, signal), as sacct shows it: killed by 15 is `0:15`."""
    if returncode < 0:
        return 0, -returncode
    return returncode, None


def run(job_dir: Path, script: Path) -> int:
    child = subprocess.Popen(["bash", str(script)])

    def forward(signum: int, _frame: FrameType | None) -> None:
        # The whole group may get the same signal (a cancel signals the group); passing it
        # on again is harmless and covers a signal sent to this process alone.
        if child.poll() is None:
            child.send_signal(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    returncode = child.wait()
    code, sig = exit_status(returncode)
    write_json_atomic(job_dir / EXIT_FILE, {"exit_code": code, "signal": sig, "end": time.time()})
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    raise SystemExit(run(Path(sys.argv[1]), Path(sys.argv[2])))
