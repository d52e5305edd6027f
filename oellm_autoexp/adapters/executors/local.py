"""LocalExecutor: the rendered sbatch script as a local process group, state on disk.

For a laptop or a single GPU box without Slurm. Ids are `local-<n>`. Each job
has a directory `<state_dir>/local_jobs/<n>/` holding `job.json` (pid, the
pid's start time, log path), `exit.json` (written by the runner when the script
ends) and `cancelled` (written before a cancel signals the group). So a later
`autoexp` process can still tell whether the job lives and how it ended: a
pid is only "alive" if its start time still matches (pids are reused).

Slurm-like behaviour as the monitor sees it: RUNNING while alive; COMPLETED on
exit 0; FAILED otherwise (exit code and signal as sacct shows them: a job
killed by SIGKILL is `0:9`); CANCELLED after cancel(); FAILED with a reason if
the runner vanished without writing an exit status. `#SBATCH --output` is
honoured with `%j` (the local id), `%x` (job name) and `%%`. Not emulated:
time limits, `--signal`, arrays and dependencies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.executors.local_runner import EXIT_FILE
from oellm_autoexp.adapters.fs.atomic_file import write_json_atomic
from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.strays import TAG_PREFIX, TaggedJob

ID_PREFIX = "local-"
JOB_KEY_ENV = "AUTOEXP_LOCAL_JOB_KEY"  # in every process of a local job: its job dir
KILL_WAIT_S = 5.0  # like Slurm's KillWait: TERM, then KILL for what is left
_UNSUPPORTED = ("--dependency", "-d", "--array", "-a")


class LocalExecutor:
    name = "local"
    settle_s = 0.0  # a submission runs inside the monitor: it dies with it, nothing is left pending

    def __init__(self, state_dir: str | Path, kill_wait_s: float = KILL_WAIT_S) -> None:
        self.root = Path(state_dir) / "local_jobs"
        self.kill_wait_s = kill_wait_s
        self._children: dict[str, subprocess.Popen[bytes]] = {}  # reaped in query()

    def submit(
        self, script: Path, *, extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> str:
        opts = {**sbatch_options(Path(script).read_text(encoding="utf-8")), **_cli_options(extra_args)}
        num = self._next_number()
        job_id = f"{ID_PREFIX}{num}"
        job_dir = self.root / str(num)
        job_dir.mkdir(parents=True)
        log = Path(expand_pattern(opts.get("output", "slurm-%j.out"), job_id, opts.get("job-name", "")))
        log.parent.mkdir(parents=True, exist_ok=True)
        key = str(job_dir.resolve())
        child_env = {**os.environ, **(env or {}), "AUTOEXP_JOB_ID": job_id, "AUTOEXP_LOCAL_JOB_NUM": str(num),
                     JOB_KEY_ENV: key}  # fmt: skip
        argv = [
            sys.executable,
            "-m",
            "oellm_autoexp.adapters.executors.local_runner",
            str(job_dir),
            str(Path(script).resolve()),
        ]
        with log.open("ab") as out:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env,
                start_new_session=True,
            )
        self._children[job_id] = child
        info = {
            "job_id": job_id,
            "pid": child.pid,
            "start_ticks": _start_ticks(child.pid),
            "log": str(log),
            "script": str(script),
            "submitted": time.time(),
            "comment": opts.get("comment"),  # the monitor's submission tag (find_by_tag)
            "key": key,  # every process of the job carries it in its environment (JOB_KEY_ENV)
        }
        write_json_atomic(job_dir / "job.json", info)
        return job_id

    def query(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        for child in self._children.values():
            child.poll()  # reap, so an ended child is not a zombie that looks alive
        return {job_id: self._record(job_id) for job_id in job_ids}

    def cancel(self, job_id: str) -> None:
        job_dir = self._dir(job_id)
        info = _read_json(job_dir / "job.json") if job_dir else None
        if job_dir is None or info is None or (job_dir / EXIT_FILE).exists():
            return  # unknown or already ended: not an error, as with scancel
        (job_dir / "cancelled").touch()
        # torchrun starts its workers in sessions of their own: signalling the job's process
        # group alone would leave a worker blocked in NCCL running (and holding its GPU) for
        # the whole collective timeout. Every process of the job carries its key: signal them all.
        strays = _processes_with(str(info.get("key") or ""))
        self._signal_group(info, signal.SIGTERM)
        _signal_pids(strays, signal.SIGTERM)
        deadline = time.monotonic() + self.kill_wait_s
        while time.monotonic() < deadline and (self._alive(info) or _any_alive(strays)):
            time.sleep(0.1)
        strays = _processes_with(str(info.get("key") or "")) | {p for p in strays if _running(p)}
        if self._alive(info) or strays:
            self._signal_group(info, signal.SIGKILL)
            _signal_pids(strays, signal.SIGKILL)
            if not (job_dir / EXIT_FILE).exists():
                write_json_atomic(job_dir / EXIT_FILE, {"exit_code": 0, "signal": 9, "end": time.time()})

    def query_tagged(self, job_ids: Sequence[str]) -> tuple[dict[str, JobRecord], list[TaggedJob]]:
        """query(), plus every live local job that carries a submit tag."""
        records = self.query(job_ids)
        tagged = []
        for info_file in self.root.glob("*/job.json") if self.root.is_dir() else ():
            info = _read_json(info_file)
            comment = str(info.get("comment") or "") if info is not None else ""
            if info is not None and comment.startswith(TAG_PREFIX):
                record = self._record(str(info["job_id"]))
                tagged.append(TaggedJob(record.job_id, comment, record.state))
        return records, tagged

    def find_by_tag(self, tag: str) -> str | None:
        """The local job submitted with `--comment=<tag>`, if any."""
        if not self.root.is_dir():
            return None
        for info_file in self.root.glob("*/job.json"):
            info = _read_json(info_file)
            if info is not None and info.get("comment") == tag:
                return str(info["job_id"])
        return None

    def log_path(self, job_id: str) -> str | None:
        """Where the job's output goes (the expanded `--output`)."""
        job_dir = self._dir(job_id)
        info = _read_json(job_dir / "job.json") if job_dir else None
        return str(info["log"]) if info else None

    def _record(self, job_id: str) -> JobRecord:
        job_dir = self._dir(job_id)
        if job_dir is None or not job_dir.is_dir():
            return JobRecord(job_id, JobState.UNKNOWN, "none")
        info = _read_json(job_dir / "job.json")
        if info is None:
            return JobRecord(job_id, JobState.PENDING, "local", reason="starting")
        start = datetime.fromtimestamp(float(info["submitted"]))
        cancelled = (job_dir / "cancelled").exists()
        ended = _read_json(job_dir / EXIT_FILE)
        if ended is not None:
            return _ended_record(job_id, ended, cancelled, start)
        if self._alive(info):
            return JobRecord(job_id, JobState.RUNNING, "local", nodes=("localhost",), start=start)
        state = JobState.CANCELLED if cancelled else JobState.FAILED
        return JobRecord(job_id, state, "local", start=start, reason="runner vanished without an exit status")

    def _dir(self, job_id: str) -> Path | None:
        num = job_id.removeprefix(ID_PREFIX)
        return self.root / num if job_id.startswith(ID_PREFIX) and num.isdigit() else None

    def _next_number(self) -> int:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / "counter").open("a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # two autoexp processes never hand out one id twice
            handle.seek(0)
            num = int(handle.read().strip() or 0) + 1
            handle.seek(0)
            handle.truncate()
            handle.write(str(num))
        return num

    def _alive(self, info: Mapping[str, Any]) -> bool:
        child = self._children.get(str(info["job_id"]))
        if child is not None:
            return child.poll() is None
        return _pid_alive(int(info["pid"]), info.get("start_ticks"))

    def _signal_group(self, info: Mapping[str, Any], signum: int) -> None:
        if not self._alive(info):
            return
        try:
            os.killpg(int(info["pid"]), signum)  # the runner leads its own group
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            raise ExecutorError(f"cannot signal local job {info['job_id']}: {exc}") from exc


def _processes_with(key: str) -> set[int]:
    """Pids of this user's processes whose environment holds JOB_KEY_ENV=key (Linux /proc)."""
    if not key:
        return set()
    needle = f"{JOB_KEY_ENV}={key}".encode() + b"\0"
    found = set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or another user's
        if needle in environ or environ.endswith(needle[:-1]):
            found.add(int(entry.name))
    found.discard(os.getpid())
    return found


def _signal_pids(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _any_alive(pids: set[int]) -> bool:
    return any(_running(p) for p in pids)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a container's init may never reap one)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _ended_record(job_id: str, ended: Mapping[str, Any], cancelled: bool, start: datetime) -> JobRecord:
    code, sig = int(ended["exit_code"]), ended.get("signal")
    if cancelled:
        state = JobState.CANCELLED
    else:
        state = JobState.COMPLETED if code == 0 and sig is None else JobState.FAILED
    end = datetime.fromtimestamp(float(ended["end"]))
    return JobRecord(
        job_id, state, "local", exit_code=code, signal=sig, nodes=("localhost",), start=start, end=end
    )


def sbatch_options(script: str) -> dict[str, str]:
    """`--key=value` pairs of the script's `#SBATCH` lines (the ones the local executor honours)."""
    found: dict[str, str] = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            found.update(_cli_options(shlex.split(line[len("#SBATCH") :], comments=True)))
        elif line and not line.startswith("#"):
            break  # sbatch stops reading directives at the first command
    return found


def _cli_options(args: Sequence[str]) -> dict[str, str]:
    found = {}
    for arg in args:
        if arg.split("=", 1)[0] in _UNSUPPORTED:
            raise ExecutorError(f"the local executor does not support {arg!r}; use the slurm executor")
        key, sep, value = arg.partition("=")
        if key.startswith("--") and sep:
            found[key[2:]] = value
    return found


def expand_pattern(pattern: str, job_id: str, job_name: str) -> str:
    """sbatch filename pattern: %j job id, %x job name, %% a percent sign."""
    return pattern.replace("%%", "\0").replace("%j", job_id).replace("%x", job_name).replace("\0", "%")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _start_ticks(pid: int) -> int | None:
    """The pid's start time (clock ticks since boot); None where /proc does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])  # field 22 overall; fields[0] is field 3 (state)


def _pid_alive(pid: int, start_ticks: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # owned by someone else: the pid was reused, our runner is gone
    if start_ticks is None:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] != "Z" and int(fields[19]) == start_ticks
