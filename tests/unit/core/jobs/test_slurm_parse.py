"""squeue/sacct text -> JobRecord, on literal output of the localhost Slurm 22.05 cluster."""

from __future__ import annotations

from datetime import datetime

import pytest

from oellm_autoexp.core.jobs.job_state import JobState
from oellm_autoexp.core.jobs.slurm_parse import (
    expand_nodelist,
    parse_exit_code,
    parse_sacct,
    parse_sbatch_parsable,
    parse_squeue,
)

# sacct --noheader --parsable2 --format JobID,State,ExitCode,NodeList,Start,End -j 40,41,42,43
SACCT = """\
40|COMPLETED|0:0|node[1-2]|2026-11-22T04:16:23|2026-11-22T04:16:23
40.batch|COMPLETED|0:0|node1|2026-11-22T04:16:23|2026-11-22T04:16:23
40.0|COMPLETED|0:0|node[1-2]|2026-11-22T04:16:23|2026-11-22T04:16:23
41|FAILED|3:0|node1|2026-11-22T04:16:23|2026-11-22T04:16:23
41.batch|FAILED|3:0|node1|2026-11-22T04:16:23|2026-11-22T04:16:23
42|CANCELLED by 0|0:0|node1|2026-11-22T04:16:23|2026-11-22T04:16:25
42.batch|CANCELLED|0:15|node1|2026-11-22T04:16:23|2026-11-22T04:16:25
43_1|COMPLETED|0:0|node1|2026-11-22T04:16:23|2026-11-22T04:16:23
43_1.batch|COMPLETED|0:0|node1|2026-11-22T04:16:23|2026-11-22T04:16:23
43_2|COMPLETED|0:0|node1|2026-11-22T04:16:23|2026-11-22T04:16:23
43_2.batch|COMPLETED|0:0|node1|2026-11-22T04:16:23|2026-11-22T04:16:23
44|TIMEOUT|0:0|node2|2026-11-22T04:20:00|2026-11-22T04:21:28
44.batch|CANCELLED|0:15|node2|2026-11-22T04:20:00|2026-11-22T04:21:29
44.extern|COMPLETED|0:0|node2|2026-11-22T04:20:00|2026-11-22T04:21:28
45|PENDING|0:0|None assigned|Unknown|Unknown
"""

SQUEUE = """\
42|RUNNING|None|node1
46|RUNNING|None|node[1-2]
47_[5-10]|PENDING|Resources|
43_4|PENDING|Dependency|
"""


@pytest.mark.parametrize(
    ("job_id", "state", "exit_code", "signal", "nodes"),
    [
        ("40", JobState.COMPLETED, 0, None, ("node1", "node2")),
        ("41", JobState.FAILED, 3, None, ("node1",)),
        ("42", JobState.CANCELLED, 0, 15, ("node1",)),  # the signal comes from the .batch step
        ("43_1", JobState.COMPLETED, 0, None, ("node1",)),
        ("43_2", JobState.COMPLETED, 0, None, ("node1",)),
        ("44", JobState.TIMEOUT, 0, 15, ("node2",)),
        ("45", JobState.PENDING, None, None, ()),  # not ended: no exit code yet
    ],
)
def test_sacct_records(job_id, state, exit_code, signal, nodes) -> None:
    """State, exit code, signal and nodes per job; steps (.batch, .0, .extern) are not jobs."""
    record = parse_sacct(SACCT)[job_id]
    assert (record.state, record.exit_code, record.signal, record.nodes) == (state, exit_code, signal, nodes)
    assert record.source == "sacct"


def test_sacct_lists_jobs_not_steps_and_keeps_who_cancelled() -> None:
    """Only job lines become records; `CANCELLED by 0` keeps `by 0` as the reason; times are parsed."""
    records = parse_sacct(SACCT)
    assert sorted(records) == ["40", "41", "42", "43_1", "43_2", "44", "45"]
    assert records["42"].reason == "by 0"
    assert records["42"].end == datetime(2026, 11, 22, 4, 16, 25)
    assert records["45"].start is None


def test_squeue_records() -> None:
    """Live states with expanded nodes; array ids stay as printed; `None` reason is empty."""
    records = parse_squeue(SQUEUE)
    assert records["42"].state is JobState.RUNNING and records["42"].reason == ""
    assert records["46"].nodes == ("node1", "node2")
    assert records["47_[5-10]"].state is JobState.PENDING and records["47_[5-10]"].nodes == ()
    assert records["43_4"].reason == "Dependency"
    assert all(r.source == "squeue" for r in records.values())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node1", ("node1",)),
        ("node[1-3,5]", ("node1", "node2", "node3", "node5")),
        ("gpu[01-03]", ("gpu01", "gpu02", "gpu03")),
        ("a[1-2],b3,c[7]", ("a1", "a2", "b3", "c7")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
        ("jwb[0001-0002]", ("jwb0001", "jwb0002")),
        ("None assigned", ()),
        ("", ()),
    ],
)
def test_expand_nodelist(text, expected) -> None:
    """Slurm host-list syntax, including zero padding and several bracket groups."""
    assert expand_nodelist(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0:0", (0, None)), ("3:0", (3, None)), ("0:15", (0, 15)), ("137:9", (137, 9)), ("", (None, None))],
)
def test_parse_exit_code(text, expected) -> None:
    """sacct's ExitCode is `<exit status>:<signal>`; a zero signal is no signal."""
    assert parse_exit_code(text) == expected


@pytest.mark.parametrize(("text", "expected"), [("123\n", "123"), ("123;cluster\n", "123"), ("", "")])
def test_sbatch_parsable(text, expected) -> None:
    """`sbatch --parsable` prints the id, with `;cluster` on federated setups."""
    assert parse_sbatch_parsable(text) == expected


# scancel of a running `srun python train.py`: the allocation reads 0:0, the batch step was
# signalled, the srun step (the program) exited 1 (localhost Slurm 22.05).
CANCELLED_STEP_EXITED_1 = """\
77|CANCELLED by 0|0:0|node1|2026-11-22T05:00:00|2026-11-22T05:01:00
77.batch|CANCELLED|0:15|node1|2026-11-22T05:00:00|2026-11-22T05:01:00
77.0|FAILED|1:0|node1|2026-11-22T05:00:01|2026-11-22T05:01:00
78|COMPLETED|0:0|node1|2026-11-22T05:00:00|2026-11-22T05:01:00
78.batch|COMPLETED|0:0|node1|2026-11-22T05:00:00|2026-11-22T05:01:00
78.0|COMPLETED|0:0|node1|2026-11-22T05:00:01|2026-11-22T05:01:00
"""


def test_a_cancelled_job_takes_its_steps_exit_status() -> None:
    """`explain` showed exit=0 for a cancelled step that exited 1: the job's 0:0 is not the program's."""
    records = parse_sacct(CANCELLED_STEP_EXITED_1)
    assert (records["77"].state, records["77"].exit_code, records["77"].signal) == (JobState.CANCELLED, 1, 15)
    assert records["78"].exit_code == 0
