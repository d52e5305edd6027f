"""Launcher and rank prefixes at the start of a log line, stripped before patterns run. No I/O.

Launcher and rank prefixes (`[rank3]:`, `[default3]:`, srun's `3: `, mpirun's
`[1,3]<stderr>:`, DeepSpeed's `[2023-07-10 04:26:05,876] [INFO] [launch.py:318:fn] `,
Ray's `(RayTrainWorker pid=123) `) are stripped once, before the patterns run, so
a pattern is written for the bare line; the rank a prefix names is kept on the
signal for blame. NCCL's own `host:pid:tid [dev] ` prefix, which the bare line may
start with, is read here too (`nccl_host`) and its host kept on the signal; it is
not stripped: NCCL's formats are matched with it in place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# One or more prefixes at the start of a line, each optional, in any order:
#   `[rank3]:` (torchrun >= 2.2), `[default3]:` (torchrun --tee, default role),
#   `3: ` (srun --label), `[1,3]<stderr>:` (mpirun --tag-output: job, rank),
#   `[2023-07-10 04:26:05,876] [INFO] [launch.py:318:sigkill_handler] ` (DeepSpeed),
#   `(RayTrainWorker pid=123) ` / `(pid=123, ip=10.0.0.1) ` (Ray actors and tasks),
#   `gpu004: ` (pdsh, DeepSpeed's multi-node runner: a lower-case host name with a digit),
#   a time stamp that a log collector or terminal put before the line (CI runners and `kubectl logs
#   --timestamps`: `2023-11-20T16:03:25.1234567Z `; `2019-02-21 16:43:26.973428: `; `[2024-08-20
#   01:49:18,235] `; syslog's `Nov 20 16:03:25 `; dmesg's `[  402.306487] ` and `[Wed Jan 27 23:04:35
#   2021] `). A log level after the stamp stays: `WARNING FileNotFoundError: ...` is not a raised
#   exception's line, and the anchored patterns must not read it as one.
# The rank groups are r_torch, r_srun and r_mpi; the process's own `[rankN]:` wins over the
# launcher's task number (srun, mpirun).
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_PREFIX = re.compile(
    r"(?:\s*(?:"
    r"\[(?:rank|default)(?P<r_torch>\d+)\]:"
    r"|(?P<r_srun>\d{1,6}): "
    r"|\[\d+,(?P<r_mpi>\d+)\]<std(?:out|err)>:"
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+\] \[[A-Z]+\] \[[\w.]+:\d+:[\w<>]+\] ?"
    r"|\((?:[\w.:<>-]+ )?pid=\d+(?:, ip=[\d.]+)?\) "
    r"|[a-z][a-z0-9-]*\d[a-z0-9.-]*: "
    r"|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?:? "
    rf"|\[?{_MONTH} [ \d]\d \d\d:\d\d:\d\d\]? "
    r"|\[\s*\d+\.\d+\] "
    rf"|\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) {_MONTH} [ \d]\d \d\d:\d\d:\d\d \d{{4}}\] "
    r"))+"
)
_TORCH_RANK = re.compile(r"\[rank(\d+)\]:")
# NCCL's debug prefix (NVIDIA/nccl src/debug.cc: "%s:%d:%d [%d] ", host name, pid, tid, CUDA device;
# RCCL prints the same). NCCL cuts the host name at its first dot; a dotted one is accepted all the same.
_NCCL_PREFIX = re.compile(r"(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] ")


def strip_prefix(line: str) -> tuple[str, int | None]:
    """The line without its launcher/rank prefixes, and the rank they name (if any)."""
    m = _PREFIX.match(line)
    if m is None:
        return line, None
    rank = m.group("r_torch") or m.group("r_srun") or m.group("r_mpi")
    return line[m.end() :].lstrip(), int(rank) if rank is not None else None


def nccl_host(body: str) -> str | None:
    """The host NCCL's `host:pid:tid [dev] ` prefix names at the start of a bare line (one that
    `strip_prefix` returned: `[rank3]: node7:3468:3905 [4] ...` names node7), else None."""
    m = _NCCL_PREFIX.match(body)
    return m.group("host") if m else None


def torch_rank(line: str, groups: Mapping[str, str]) -> int | None:
    """The torch global rank a line speaks for: its `[rankN]:` prefix, else a `[Rank N]` inside it
    (ProcessGroupNCCL's). Never srun's or mpirun's task number, nor torchrun --tee's `[default3]:`:
    other numberings (with one srun task per node, srun's `3: ` is the node's place; `default3`
    is a local rank)."""
    m = _PREFIX.match(line)
    own = _TORCH_RANK.search(m.group(0)) if m is not None else None
    if own is not None:
        return int(own.group(1))
    value = groups.get("rank")
    return int(value) if value is not None and value.isdigit() else None


def rank_of(prefix_rank: int | None, groups: dict[str, str]) -> int | None:
    """The rank a prefix names, else the pattern's own `rank` group (a `[Rank 3]` inside the line)."""
    if prefix_rank is not None:
        return prefix_rank
    value = groups.get("rank")
    return int(value) if value is not None and value.isdigit() else None
