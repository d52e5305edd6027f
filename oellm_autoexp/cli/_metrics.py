"""`--metrics-port` and `--metrics-textfile`, shared by `run`, `submit` and `monitor-session`."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from oellm_autoexp.adapters.store.sqlite_store import SQLiteStore
from oellm_autoexp.errors import UserError

if TYPE_CHECKING:
    from oellm_autoexp.daemon.metrics import MonitorMetrics

INSTALL_HINT = "pip install 'oellm-autoexp[metrics]'"


def has_prometheus_client() -> bool:
    """Installed (found without importing it: every `autoexp` command builds these flags)."""
    try:
        return importlib.util.find_spec("prometheus_client") is not None
    except (ImportError, ValueError):
        return False


def add_metrics_args(parser: argparse.ArgumentParser) -> None:
    missing = "" if has_prometheus_client() else f" [prometheus-client is not installed: {INSTALL_HINT}]"
    parser.add_argument(
        "--metrics-port",
        metavar="[ADDR:]PORT",
        help="serve Prometheus metrics on http://ADDR:PORT/metrics (ADDR defaults to every interface; "
        f"port 0 picks a free one){missing}",
    )
    parser.add_argument(
        "--metrics-textfile",
        metavar="PATH",
        type=Path,
        help="rewrite this node-exporter textfile (name it *.prom) atomically after every poll, "
        f"for clusters whose login nodes forbid open ports{missing}",
    )


def metrics_argv(args: argparse.Namespace) -> list[str]:
    """The same flags for a background monitor (`--detach`)."""
    argv = []
    if getattr(args, "metrics_port", None):
        argv += ["--metrics-port", args.metrics_port]
    if getattr(args, "metrics_textfile", None):
        argv += ["--metrics-textfile", str(Path(args.metrics_textfile).resolve())]
    return argv


def parse_endpoint(value: str) -> tuple[str, int]:
    """`9101` -> ("0.0.0.0", 9101); `127.0.0.1:9101` -> ("127.0.0.1", 9101); UserError otherwise."""
    addr, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UserError(f"--metrics-port {value!r}: expected PORT or ADDR:PORT with a port from 0 to 65535")
    # No ADDR: every interface, as Prometheus scrapes from another host.
    return addr.strip("[]") or "0.0.0.0", int(port)


def check_metrics_args(args: argparse.Namespace) -> None:
    """Refuse the flags before anything is submitted: a bad port, or prometheus-client missing."""
    port, textfile = getattr(args, "metrics_port", None), getattr(args, "metrics_textfile", None)
    if port is None and textfile is None:
        return
    if port is not None:
        parse_endpoint(port)
    if not has_prometheus_client():
        flag = "--metrics-port" if port is not None else "--metrics-textfile"
        raise UserError(f"{flag} needs prometheus-client, an optional dependency: {INSTALL_HINT}")
    if textfile is not None and not Path(textfile).resolve().parent.is_dir():
        raise UserError(
            f"--metrics-textfile {textfile}: the directory {Path(textfile).parent} does not exist"
        )


def metrics_observer(args: argparse.Namespace, store: SQLiteStore | None) -> MonitorMetrics | None:
    """The metrics observer the flags ask for (its endpoint already listening), or None."""
    check_metrics_args(args)
    port, textfile = getattr(args, "metrics_port", None), getattr(args, "metrics_textfile", None)
    if port is None and textfile is None:
        return None
    from oellm_autoexp.daemon.metrics import MonitorMetrics  # optional dependency: only now

    metrics = MonitorMetrics(store, endpoint=parse_endpoint(port) if port else None, textfile=textfile)
    if metrics.endpoint is not None:
        print(f"metrics: {metrics.endpoint.url}", flush=True)
    return metrics
