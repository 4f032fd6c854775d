"""A real HTTPS webhook receiver on loopback (trustme certificates), scriptable per request."""
import collections
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    method: str
    path: str
    headers: list  # (name, value) pairs as sent, names in the sender's case
    body: bytes

    def header(self, name):
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        """A client that rejects our certificate is part of some tests, not noise."""


class _Handler(BaseHTTPRequestHandler):
    def setup(self):
        # TLS in the connection's own thread, so a stalled handshake never blocks accept().
        self.request = self.server.receiver.context.wrap_socket(self.request, server_side=True)
        super().setup()

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status, headers = self.server.receiver.record(
            Received(self.command, self.path, list(self.headers.items()), body))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


class WebhookReceiver:
    """Answers 200 unless told otherwise: `respond(500, 500, (429, {"Retry-After": "1"}))`
    scripts the next answers; `stop()` takes it off the network (connections are refused)
    and `start()` brings it back on the same port."""

    def __init__(self, ca, host="127.0.0.1"):
        self.host = host
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(host, "localhost").configure_cert(self.context)
        self.port = 0
        self.received = []
        self._script = collections.deque()
        self._lock = threading.Lock()
        self._server = None

    @property
    def url(self):
        return f"https://{self.host}:{self.port}/hook?source=remote-dispatch"

    def respond(self, *answers):
        with self._lock:
            for answer in answers:
                self._script.append(answer if isinstance(answer, tuple) else (answer, {}))

    def record(self, received):
        with self._lock:
            self.received.append(received)
            return self._script.popleft() if self._script else (200, {})

    def start(self):
        self._server = _Server((self.host, self.port), _Handler)
        self._server.receiver = self
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def wait_for(self, count, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.received) >= count:
                return self.received
            time.sleep(0.05)
        raise AssertionError(f"receiver got {len(self.received)} requests, expected {count}")
