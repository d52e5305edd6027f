"""A real HTTP receiver on 127.0.0.1 for the alert tests: it keeps what it was sent and can fail on purpose."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """What the server does: answer `status` (after `fail_first` 500s), after `delay_s`; keep each body."""

    def __init__(self, *, status: int = 200, fail_first: int = 0, delay_s: float = 0.0) -> None:
        self.status, self.fail_first, self.delay_s = status, fail_first, delay_s
        self.bodies: list[dict[str, Any]] = []  # every body received, failed answers included
        self.answered: list[int] = []
        self.url = ""
        self._lock = threading.Lock()

    def answer(self, body: dict[str, Any]) -> int:
        with self._lock:
            self.bodies.append(body)
            status = 500 if len(self.bodies) <= self.fail_first else self.status
            self.answered.append(status)
        return status

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while len(self.bodies) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return list(self.bodies)


@contextmanager
def serving(receiver: Receiver) -> Iterator[Receiver]:
    """Run `receiver` on a free port of 127.0.0.1 until the block ends."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status = receiver.answer(body)
            time.sleep(receiver.delay_s)
            try:
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else b"no")
            except OSError:
                pass  # the client gave up (timeout): nothing to answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.block_on_close = False  # a slow answer still sleeping must not hold the test up
    thread = threading.Thread(target=server.serve_forever, name="test-webhook-server")
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
