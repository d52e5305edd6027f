"""The job side of the silent-hang probe: the rendered script makes every Python process print its
stacks on the probe's signal, and a user's own sitecustomize still runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from oellm_autoexp.config.experiment import load_jobs
from oellm_autoexp.plan.plan import build_plans
from oellm_autoexp.workloads.stack_dump import SITE_DIR

COMMAND = {
    "defaults": [{"slurm": "local"}, {"backend": "command"}],
    "experiment": {"name": "hello", "output_dir": "runs/${experiment.name}"},
    "backend": {"command": ["python", "-c", "print('hi')"]},
}


def _script(config_dir: Path, write_yaml, overrides: list[str]) -> str:
    exp = write_yaml(config_dir / "experiments" / "probe.yaml", COMMAND)
    (plan,) = build_plans(load_jobs(exp, overrides, environ={}), "/base")
    return plan.script


def test_a_multi_node_script_registers_the_probe(config_dir: Path, write_yaml) -> None:
    script = _script(config_dir, write_yaml, ["slurm.nodes=2"])
    assert "export AUTOEXP_STACK_DUMP_SIGNAL=USR2" in script
    assert f'export PYTHONPATH={SITE_DIR}"${{PYTHONPATH:+:$PYTHONPATH}}"' in script
    # Every shell of the job ignores it: the batch shell and each node's wrapper.
    assert script.count('trap "" USR2') == 2


def test_the_signal_is_configurable_and_null_turns_it_off(config_dir: Path, write_yaml) -> None:
    script = _script(config_dir, write_yaml, ["slurm.nodes=2", "+monitoring.hang.stack_dump_signal=WINCH"])
    assert "export AUTOEXP_STACK_DUMP_SIGNAL=WINCH" in script and 'trap "" WINCH' in script
    off = _script(config_dir, write_yaml, ["slurm.nodes=2", "+monitoring.hang.stack_dump_signal=null"])
    assert "AUTOEXP_STACK_DUMP_SIGNAL" not in off and SITE_DIR not in off
    # One node: no node to blame, the script stays as it was.
    assert "AUTOEXP_STACK_DUMP_SIGNAL" not in _script(config_dir, write_yaml, [])


def test_a_rank_prints_its_stacks_on_the_signal_and_lives_on(tmp_path: Path) -> None:
    user_site = tmp_path / "user_site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    program = (
        "import os, time\n"
        "def waiting_in_the_collective():\n"
        "    print('user site ran' if os.environ.get('USER_SITE_RAN') else 'user site NOT run', flush=True)\n"
        "    time.sleep(60)\n"
        "waiting_in_the_collective()\n"
    )
    env = {**os.environ, "AUTOEXP_STACK_DUMP_SIGNAL": "USR2", "PYTHONPATH": f"{SITE_DIR}:{user_site}"}
    rank = subprocess.Popen([sys.executable, "-c", program], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    watchdog = threading.Timer(30, rank.kill)  # a rank that never answers fails the test, not hangs it
    watchdog.start()
    try:
        assert rank.stdout is not None and rank.stderr is not None
        assert rank.stdout.readline().strip() == "user site ran"  # both ran before the user's code
        rank.send_signal(signal.SIGUSR2)
        header, frame = rank.stderr.readline(), rank.stderr.readline()  # the dump, as the handler wrote it
        assert header.startswith("Current thread 0x") and header.rstrip().endswith(
            "(most recent call first):"
        )
        assert "in waiting_in_the_collective" in frame
        assert rank.poll() is None  # the probe never ends a rank
    finally:
        watchdog.cancel()
        rank.kill()
        rank.communicate(timeout=10)
