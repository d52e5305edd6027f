"""Getting the monitor's metrics out: an HTTP endpoint, or a node-exporter textfile.

Login nodes often forbid open ports, so both exist. The endpoint is prometheus-client's
own WSGI server on a thread of its own (`MetricsEndpoint`, stopped by `close`); the
textfile is the text exposition format written atomically (adapters/fs/atomic_file.py), so
node-exporter's textfile collector never reads half a file. prometheus-client is an
optional dependency (`pip install 'oellm-autoexp[metrics]'`): import this module only when
metrics were asked for.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest, start_http_server

from oellm_autoexp.adapters.fs.atomic_file import write_text_atomic
from oellm_autoexp.errors import UserError

# Counters' `_created` series (their creation time) double the textfile and say nothing here.
disable_created_metrics()


class MetricsEndpoint:
    """`GET /metrics` on addr:port (port 0: any free port; `port` says which)."""

    def __init__(self, registry: CollectorRegistry, addr: str, port: int) -> None:
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=registry)
        except OSError as exc:
            raise UserError(
                f"--metrics-port {addr}:{port}: cannot listen there: {exc.strerror or exc}"
            ) from None
        self.addr = addr
        self.port = int(self._server.server_address[1])
        self._closed = False

    @property
    def url(self) -> str:
        host = "localhost" if self.addr in ("", "0.0.0.0", "::") else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


def write_textfile(registry: CollectorRegistry, path: Path) -> None:
    """Replace `path` with the registry's metrics in the text format (node-exporter reads *.prom)."""
    write_text_atomic(path, generate_latest(registry).decode("utf-8"))
