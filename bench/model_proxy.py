"""A reverse proxy in front of an OpenAI-compatible model that keeps every exchange (the eval's meter of model
calls and tokens, the real-model tests' recorder)."""
import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class RecordingProxy:
    """Forwards to `upstream` (a base URL, http or https); `exchanges` holds {"time", "path", "raw", "status",
    "response"} of each request, in order. `base_url` is the upstream's base URL as seen through the proxy."""

    def __init__(self, upstream, timeout=900):
        self.upstream, self.timeout = urlsplit(upstream.rstrip("/")), timeout
        self.exchanges = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}{self.upstream.path}"

    def recorded(self):
        with self._lock:
            return list(self.exchanges)

    def clear(self):
        with self._lock:
            self.exchanges.clear()

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def _forward(self, method, path, raw, headers):
        kind = http.client.HTTPSConnection if self.upstream.scheme == "https" else http.client.HTTPConnection
        upstream = kind(self.upstream.netloc, timeout=self.timeout)
        sent = {name: value for name, value in headers.items() if name.lower() in ("content-type", "authorization")}
        try:
            upstream.request(method, path, body=raw or None, headers={"Content-Type": "application/json", **sent})
            reply = upstream.getresponse()
            status, data = reply.status, reply.read()
            content_type = reply.getheader("Content-Type", "application/json")
        finally:
            upstream.close()
        try:
            response = json.loads(data)
        except ValueError:
            response = data.decode(errors="replace")
        with self._lock:
            self.exchanges.append({"time": time.monotonic(), "path": path, "raw": raw.decode(errors="replace"),
                                   "status": status, "response": response})
        return status, content_type, data

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._relay("GET")

            def do_POST(self):
                self._relay("POST")

            def _relay(self, method):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, content_type, data = proxy._forward(method, self.path, raw, self.headers)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
