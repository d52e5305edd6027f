"""Metrics plumbing (daemon/metrics.py, adapters/alerts/metrics_export.py, cli/_metrics.py): Slurm command timing
through the real endpoint, and the flags' answers to bad input and to a missing prometheus-client."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from oellm_autoexp.adapters.executors.base import ExecutorError
from oellm_autoexp.adapters.executors.slurm import run_slurm_command
from oellm_autoexp.daemon.metrics import MonitorMetrics

REPO_ROOT = Path(__file__).resolve().parents[2]


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return _parse(response.read().decode())


def _parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample, parsed by prometheus-client's own parser, keyed by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_slurm_command_is_timed_and_its_failures_counted_by_kind(tmp_path: Path) -> None:
    """run_slurm_command, the one place Slurm commands run, feeds the latency histogram and the failure
    counter (exit status, missing program, timeout); once the metrics are closed, nothing more is counted."""
    metrics = MonitorMetrics(None, endpoint=("127.0.0.1", 0), textfile=tmp_path / "m.prom")
    try:
        run_slurm_command(["true"])
        for argv, timeout_s in ((["false"], 5.0), (["autoexp-no-such-squeue"], 5.0), (["sleep", "5"], 0.2)):
            with pytest.raises(ExecutorError):
                run_slurm_command(argv, timeout_s)
        samples = _samples(metrics.endpoint.url if metrics.endpoint else "")
    finally:
        metrics.close()
    run_slurm_command(["true"])
    assert samples[("autoexp_slurm_command_seconds_count", (("command", "true"),))] == 1
    assert samples[("autoexp_slurm_command_seconds_bucket", (("command", "sleep"), ("le", "0.1")))] == 0
    assert samples[("autoexp_slurm_command_seconds_sum", (("command", "sleep"),))] >= 0.2
    failures = {k[1]: v for k, v in samples.items() if k[0] == "autoexp_slurm_command_failures_total"}
    assert failures == {
        (("command", "false"), ("reason", "exit_status")): 1,
        (("command", "autoexp-no-such-squeue"), ("reason", "missing")): 1,
        (("command", "sleep"), ("reason", "timeout")): 1,
    }
    assert metrics.registry.get_sample_value("autoexp_slurm_command_seconds_count", {"command": "true"}) == 1
    assert "autoexp_slurm_command_seconds_count" in (tmp_path / "m.prom").read_text()  # written at close


def _autoexp(tmp_path: Path, *args: str, hide_prometheus: bool = False) -> subprocess.CompletedProcess[str]:
    hide = "sys.modules['prometheus_client'] = None; " if hide_prometheus else ""
    code = f"import sys; {hide}from oellm_autoexp.cli.main import main; raise SystemExit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "--state-dir", str(tmp_path / "state"), *args]
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)


def test_metrics_flags_without_prometheus_client_say_how_to_install_it(tmp_path: Path) -> None:
    """Without the optional dependency: the help says so, and asking for metrics is refused before anything
    is submitted, with the install command."""
    demo = str(REPO_ROOT / "config" / "experiments" / "demo.yaml")
    helped = _autoexp(tmp_path, "run", "--help", hide_prometheus=True)
    assert "prometheus-client is not installed: pip install 'oellm-autoexp[metrics]'" in " ".join(
        helped.stdout.split()
    )
    refused = _autoexp(tmp_path, "run", demo, "--metrics-textfile", "m.prom", hide_prometheus=True)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == (
        "autoexp: error: --metrics-textfile needs prometheus-client, an optional dependency: "
        "pip install 'oellm-autoexp[metrics]'"
    )
    assert not (tmp_path / "state").exists()  # nothing was submitted


@pytest.mark.parametrize("value", ["port", "70000", "host:"])
def test_a_bad_metrics_port_is_one_clear_message(tmp_path: Path, value: str) -> None:
    """A port that is not a number from 0 to 65535 is refused with what was expected."""
    result = _autoexp(tmp_path, "monitor-session", "--all", "--metrics-port", value)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"--metrics-port {value!r}: expected PORT or ADDR:PORT" in result.stderr


def test_a_taken_port_is_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    """`autoexp run --metrics-port` on a port another process listens on: one message, no session."""
    demo = str(REPO_ROOT / "config" / "experiments" / "demo.yaml")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _autoexp(tmp_path, "run", demo, "--metrics-port", f"127.0.0.1:{port}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"--metrics-port 127.0.0.1:{port}: cannot listen there: Address already in use" in result.stderr
    assert "session" not in result.stdout


@pytest.mark.slurm
def test_a_run_on_slurm_times_its_real_sbatch_and_squeue(tmp_path: Path) -> None:
    """On the localhost cluster, the textfile of `autoexp run` holds the real sbatch and squeue latencies."""
    hello = str(REPO_ROOT / "config" / "experiments" / "hello_slurm.yaml")
    result = _autoexp(tmp_path, "run", hello, "--metrics-textfile", "autoexp.prom")
    assert result.returncode == 0, result.stdout + result.stderr
    samples = _parse((tmp_path / "autoexp.prom").read_text())
    assert samples[("autoexp_slurm_command_seconds_count", (("command", "sbatch"),))] == 1
    assert samples[("autoexp_slurm_command_seconds_count", (("command", "squeue"),))] >= 1
    assert 0 < samples[("autoexp_slurm_command_seconds_sum", (("command", "squeue"),))] < 30
    assert samples[("autoexp_jobs", (("status", "completed"),))] == 1


def test_submit_hands_the_metrics_flags_to_its_background_monitor(tmp_path: Path) -> None:
    """`autoexp submit --metrics-textfile` starts a daemon that writes the file; with --no-monitor the
    flags are refused, since no monitor would honour them."""
    demo = str(REPO_ROOT / "config" / "experiments" / "demo.yaml")
    refused = _autoexp(tmp_path, "submit", demo, "--no-monitor", "--metrics-textfile", "m.prom")
    assert refused.returncode == 2 and "drop --no-monitor" in refused.stderr
    submitted = _autoexp(tmp_path, "submit", demo, "--metrics-textfile", "m.prom")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    textfile, deadline = tmp_path / "m.prom", time.monotonic() + 60
    while time.monotonic() < deadline:
        if textfile.exists() and _parse(textfile.read_text()).get(
            ("autoexp_jobs", (("status", "completed"),))
        ):
            break
        time.sleep(0.2)
    assert _parse(textfile.read_text())[("autoexp_jobs", (("status", "completed"),))] == 1
    pid = int(next((tmp_path / "state").glob("monitor-*.pid")).read_text())
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)  # the daemon ends with its session
