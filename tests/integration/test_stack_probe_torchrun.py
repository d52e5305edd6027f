"""Real torchrun (CPU): with the rendered script's settings (--tee=3, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE,
the probe's sitecustomize on PYTHONPATH) each worker's stack dump carries its global rank's prefix,
and the classifier reads it as that rank's answer (core/decide/stack_dump_blame.py)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from oellm_autoexp.adapters.logs.pattern_files import load_patterns
from oellm_autoexp.core.classify.classifier import classify_lines
from oellm_autoexp.core.decide.stack_dump_blame import answered_ranks
from oellm_autoexp.workloads.stack_dump import SITE_DIR
from tests.conftest import unavailable
from tests.paths import REPO

WORKER = """\
import os, sys, time
print("ready pid", os.getpid(), file=sys.stderr, flush=True)
time.sleep(60)
"""
READY = re.compile(r"^\[rank(\d)\]:ready pid (\d+)")


def test_each_worker_s_dump_names_its_rank(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is None:
        unavailable("needs torch (CPU is enough) for a real torchrun")
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER, encoding="utf-8")
    env = {**os.environ, "AUTOEXP_STACK_DUMP_SIGNAL": "USR2", "PYTHONPATH": SITE_DIR,
           "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:", "OMP_NUM_THREADS": "1"}  # fmt: skip
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
            "--master_addr=127.0.0.1", "--master_port=0", "--tee=3", str(worker)]  # fmt: skip
    # As in the rendered script: every shell of the job ignores the signal; Python registers its handler.
    launcher = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGUSR2, signal.SIG_IGN))  # fmt: skip
    guard = threading.Timer(60, lambda: os.killpg(launcher.pid, signal.SIGKILL))
    guard.start()
    lines: list[str] = []
    try:
        assert launcher.stdout is not None
        pids: dict[int, int] = {}
        for line in launcher.stdout:
            lines.append(line.rstrip("\n"))
            if m := READY.match(line):
                pids[int(m[1])] = int(m[2])
                if len(pids) == 2:
                    break
        assert sorted(pids) == [0, 1], "\n".join(lines)
        for pid in pids.values():
            os.kill(pid, signal.SIGUSR2)
        headers = set()
        for line in launcher.stdout:
            lines.append(line.rstrip("\n"))
            if m := re.match(r"^\[rank(\d)\]:Current thread 0x", line):
                headers.add(int(m[1]))
                if headers == {0, 1}:
                    break
    finally:
        guard.cancel()
        os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(timeout=30)
    patterns = load_patterns([REPO / "config" / "monitoring" / "base.yaml"])
    assert answered_ranks(classify_lines(lines, patterns)) == {0, 1}, "\n".join(lines)
