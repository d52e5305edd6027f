"""An application Xid that keeps coming back on one GPU is the GPU's. No I/O.

NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, catalogs/xid.yaml) files the codes the
application's own kernel causes (13 Graphics Engine Exception, 31 MMU fault, 43 GPU stopped
processing) under RESTART_APP or IGNORE, and reads a pattern across runs instead: its workflow for
Xid 31 (WORKFLOW_XID_31, also 13's) says "Repeat MMU faults to same GPU (via PCI-ID): RUN_DCGMEUD
(possible HW issue)", "Repeat MMU faults to diff GPU: CHECK_APP/CUDA", "Solo, no burst:
CHECK_APP/CUDA"; Xid 43's investigatory action is CONTACT_SUPPORT. A kernel log (dmesg) that shows
such Xids for several different processes on one GPU, and on no other, is that GPU's fault
(`gpu_hardware`, restart elsewhere); the same on several GPUs, or one process's burst, stays the
application's. One job's own log holds one process per GPU, so this reads a node's kernel log
pasted into the job's output (a prolog's or epilog's dmesg).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from oellm_autoexp.core.classify.blocks import parse_xid
from oellm_autoexp.core.classify.catalog import CLASS_PRIORITY
from oellm_autoexp.core.classify.signals import Signal

REPEATED_XID_PATTERN = "xid_repeated_on_one_gpu"  # the synthetic reading's pattern name
MIN_PROCESSES = 3  # "multiple runs needed to establish pattern": distinct pids on the same GPU
APPLICATION_CLASS = "cuda_error"  # what catalogs/xid.yaml calls an application row
_PID = re.compile(r"\bpid=(?P<pid>\d+)")


def repeated_application_xid(signals: Sequence[Signal]) -> Signal | None:
    """A `gpu_hardware` reading when application Xids recur on exactly one GPU for MIN_PROCESSES pids.

    Made from that GPU's last such line (its node is blamed as the Xid's own would be); None
    when no GPU shows the pattern, or when several do (then the application is the common factor).
    """
    pids: dict[str, set[str]] = {}
    last: dict[str, Signal] = {}
    for signal in signals:
        if signal.error_type != APPLICATION_CLASS:
            continue
        event = parse_xid(signal.line)
        pid = _PID.search(signal.line)
        if event is None or pid is None:
            continue
        pids.setdefault(event.pci, set()).add(pid.group("pid"))
        last[event.pci] = signal
    repeated = [gpu for gpu, seen in pids.items() if len(seen) >= MIN_PROCESSES]
    if len(repeated) != 1:
        return None
    line = last[repeated[0]]
    return Signal(
        pattern=REPEATED_XID_PATTERN, error_type="gpu_hardware", subsystem=line.subsystem, role="root",
        line=line.line, line_no=line.line_no, groups=line.groups, priority=CLASS_PRIORITY["gpu_hardware"],
        rank=line.rank, source=line.source, blames_node=line.blames_node,
    )  # fmt: skip
