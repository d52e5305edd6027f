"""squeue / sacct text -> JobRecord, and node-list expansion. Pure.

The commands are run by adapters/executors/slurm.py with the formats below;
these functions only read their text, so they are tested on literal output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from oellm_autoexp.core.jobs.job_record import JobRecord
from oellm_autoexp.core.jobs.job_state import JobState, is_terminal, parse_state

SEP = "|"
# squeue -o: job id (array tasks as 123_4), long state, reason, node list.
SQUEUE_FORMAT = SEP.join(["%i", "%T", "%r", "%N"])
# sacct --parsable2 --format: one line per job and per step (123.batch, 123.extern, 123.0).
SACCT_FIELDS = ("JobID", "State", "ExitCode", "NodeList", "Start", "End")
SACCT_FORMAT = ",".join(SACCT_FIELDS)
_NO_NODES = {"", "None assigned", "(null)", "None"}
_NO_TIME = {"", "Unknown", "None"}


def parse_squeue(text: str) -> dict[str, JobRecord]:
    """Lines of `squeue --noheader -o SQUEUE_FORMAT` -> job id -> record (source squeue)."""
    records = {}
    for line in _lines(text):
        parts = line.split(SEP)
        if len(parts) < 4:
            continue
        job_id, state, reason, nodes = parts[0], parts[1], parts[2], SEP.join(parts[3:])
        records[job_id] = JobRecord(
            job_id, parse_state(state), "squeue", nodes=expand_nodelist(nodes), reason=_reason(reason)
        )
    return records


def parse_squeue_tagged(text: str) -> tuple[dict[str, JobRecord], dict[str, str]]:
    """Lines of `squeue -o SQUEUE_FORMAT|%k` -> (job id -> record, job id -> comment if any)."""
    records, comments = {}, {}
    for line in _lines(text):
        head, sep, comment = line.rpartition(SEP)
        if not sep:
            continue
        records.update(parse_squeue(head))
        job_id = head.split(SEP, 1)[0]
        if comment.strip() and comment.strip() != "(null)" and job_id in records:
            comments[job_id] = comment.strip()
    return records, comments


def parse_sacct(text: str) -> dict[str, JobRecord]:
    """Lines of `sacct --noheader --parsable2 --format SACCT_FORMAT` -> job id -> record.

    The job's own line gives state, exit code and times; when it shows no
    signal, the `.batch` step's does; an unsuccessful job whose own line reads exit 0 takes its
    steps' highest exit status (a cancelled or timed-out job is
    `CANCELLED by 0 0:0`, its batch step `CANCELLED 0:15`). With `-D`, a
    requeued job has several lines; the last one is the current run.
    """
    jobs: dict[str, list[str]] = {}
    batch_signal: dict[str, int | None] = {}
    step_exit: dict[str, int] = {}  # the highest exit status of the job's steps (DerivedExitCode)
    for line in _lines(text):
        parts = line.split(SEP)
        if len(parts) < len(SACCT_FIELDS):
            continue
        job_id, _, step = parts[0].partition(".")
        if not step:
            jobs[job_id] = parts
            continue
        if step == "batch":
            batch_signal[job_id] = parse_exit_code(parts[2])[1]
        code = parse_exit_code(parts[2])[0]
        if code:
            step_exit[job_id] = max(code, step_exit.get(job_id, 0))
    return {
        job_id: _sacct_record(parts, batch_signal.get(job_id), step_exit.get(job_id))
        for job_id, parts in jobs.items()
    }


def _sacct_record(parts: list[str], batch_signal: int | None, step_exit: int | None = None) -> JobRecord:
    job_id, state_text, exit_text, nodes, start, end = parts[: len(SACCT_FIELDS)]
    state = parse_state(state_text)
    code, sig = parse_exit_code(exit_text)
    if code == 0 and step_exit and state is not JobState.COMPLETED:
        # A cancelled (or timed-out) job reads `0:0` while the step it cancelled exited 1: the
        # step's status is what happened to the program (`explain` said exit=0 otherwise).
        code = step_exit
    ended = is_terminal(state)
    return JobRecord(
        job_id,
        state,
        "sacct",
        exit_code=code if ended else None,
        signal=(sig or batch_signal) if ended else None,
        nodes=expand_nodelist(nodes),
        reason=_by_whom(state_text),
        start=parse_time(start),
        end=parse_time(end),
    )


def parse_sbatch_parsable(text: str) -> str:
    """`sbatch --parsable` prints `123` or `123;cluster`; '' if it printed no id."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1].split(";", 1)[0] if lines else ""


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """sacct's `3:0` -> (3, None); `0:15` -> (0, 15); anything else -> (None, None)."""
    code, _, sig = text.strip().partition(":")
    if not code.isdigit():
        return None, None
    return int(code), (int(sig) if sig.isdigit() and int(sig) else None)


def parse_time(text: str) -> datetime | None:
    text = text.strip()
    if text in _NO_TIME:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def expand_nodelist(text: str) -> tuple[str, ...]:
    """`node[1-3,5],gpu[01-02]-ib` -> ('node1', 'node2', 'node3', 'node5', 'gpu01-ib', 'gpu02-ib')."""
    text = text.strip()
    if text in _NO_NODES:
        return ()
    return tuple(host for item in _split_top_level(text) for host in _expand_one(item))


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item]


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    return [f"{head}{num}{rest}" for num in _expand_ranges(match.group(1)) for rest in _expand_one(tail)]


def _expand_ranges(spec: str) -> list[str]:
    """`1-3,5` -> 1 2 3 5; zero padding is kept (`01-03` -> 01 02 03)."""
    out = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        if not high:
            out.append(low)
            continue
        width = len(low) if low.startswith("0") else 0
        out += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
    return out


def _by_whom(state_text: str) -> str:
    """`CANCELLED by 1234` -> `by 1234`: who cancelled, informational only."""
    _, _, rest = state_text.strip().partition(" ")
    return rest


def _reason(text: str) -> str:
    return "" if text in ("None", "(null)") else text


def _lines(text: str) -> Iterable[str]:
    return (line.strip() for line in text.splitlines() if line.strip())


def find_comment(text: str, comment: str) -> str | None:
    """The job id on the first `ID|COMMENT` line whose comment is exactly `comment`."""
    for line in _lines(text):
        job_id, sep, found = line.partition(SEP)
        if sep and found.strip() == comment:
            return job_id.strip()
    return None


_JOB_GRES = re.compile(r"\bJOB_GRES=(\S+)")


def parse_job_gpu_types(text: str) -> tuple[str, ...]:
    """The GPU types a job was given, from `scontrol show job -d` (`JOB_GRES=gpu:h100:1`).

    An untyped allocation (`gpu:2`) or a job without GPUs gives ().
    """
    found = _JOB_GRES.search(text)
    if found is None:
        return ()
    types = []
    for item in found[1].split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) == 3:
            types.append(parts[1])
    return tuple(dict.fromkeys(types))
