"""Causes a broken node gives whose lines usually name no node: one place for both readers. Pure.

Every rank of a hang waits on the same collective, and NCCL's completion errors are printed by
both ends of a broken connection: such a failure is often one node's fault (a GPU, a link, a
switch port), yet its lines do not say which. Two readers ask about it, each for a set of its own:

- core/decide/straggler_blame.py, through node_blame.py: a hang's own lines (the watchdog's
  timeout, the heartbeat monitor's) are the very evidence that names the straggler, so they do
  not count as a root cause of their own (`HANG_CAUSES`). An NCCL error does: "remote process
  exited" is the line of a rank that died, and the hole that rank leaves in the watchdog lines
  would blame its node for what may be the code's crash.
- core/decide/suspicion.py: any of them, the NCCL error too, makes the next attempt run the
  pre-flight check when nothing was blamed (`SUSPECT_CAUSES`). Compared with the failure's error
  type, else its outcome kind (OutcomeKind.HANG is "hang" too).

`stall` counts as a hang for the outcome (core/watch/outcome.py HANG_ERROR_TYPES) but is in
neither set: no shipped pattern gives it, and neither reader counted a user pattern's before.
"""

from __future__ import annotations

# A hang's own error types: where every rank waits, no line names the node that stopped.
HANG_CAUSES = frozenset({"hang", "nccl_timeout"})
# ... and NCCL's errors (a peer gone, a link down): printed at both ends of a broken connection.
SUSPECT_CAUSES = HANG_CAUSES | {"nccl"}
