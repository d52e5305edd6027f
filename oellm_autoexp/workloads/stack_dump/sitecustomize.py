"""Every Python process of the job prints its stacks on the probe's signal; the user's own
sitecustomize still runs.

The rendered script (core/templates/sbatch.sh.j2) puts this folder first on PYTHONPATH and sets
AUTOEXP_STACK_DUMP_SIGNAL (monitoring.hang.stack_dump_signal). Python imports the first
`sitecustomize` on its path at start-up: this one registers faulthandler on the signal, then
runs the next `sitecustomize` further down the path, if any, as if it had been the only one.

faulthandler writes from its C signal handler, without the GIL: a rank blocked in a collective,
in C, answers too; only a rank that cannot run at all (stopped, in uninterruptible sleep, its
node frozen) stays silent, and that is what the monitor looks for (core/decide/stack_dump_blame.py).
Not chained: at start-up the previous disposition is the default one (USR2's ends the process:
the probe must never kill a rank) or `ignored` (the script ignores it in every shell of the
job); a handler the user's own code installs later replaces this one, and the probe then gets no
answer from that rank: the probe's signal is configurable for that case.
"""

from __future__ import annotations

import faulthandler
import importlib.machinery
import importlib.util
import os
import signal
import sys


def _register() -> None:
    name = os.environ.get("AUTOEXP_STACK_DUMP_SIGNAL", "")
    number = getattr(signal, "SIG" + name, None) if name else None
    if isinstance(number, int):
        faulthandler.register(number, file=sys.stderr, all_threads=True, chain=False)


def _run_next() -> None:
    """The next `sitecustomize` on the path after this folder (a user's, a site's), run in place."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _register()
except (OSError, RuntimeError, ValueError) as exc:  # no stderr, a signal this platform lacks
    print(f"autoexp: stack dump on SIG{os.environ.get('AUTOEXP_STACK_DUMP_SIGNAL')} not registered: {exc}",
          file=sys.stderr)  # fmt: skip
_run_next()
