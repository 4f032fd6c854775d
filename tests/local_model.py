"""The real local model (config/local_model.py) for tests: llama.cpp's server on a free loopback port,
behind a recording reverse proxy that keeps every request it forwarded and the status it got back."""
import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from config.local_model import MODEL, SLOTS, server_argv, server_env
from tests.processes import ManagedProcess, free_port


class LocalModel:
    def __init__(self):
        self.port = free_port()
        self.server = ManagedProcess(server_argv(self.port), "llama-server", server_env(self.port))
        self.server.wait_until(self._ready, timeout=180)
        self.exchanges = []  # {"path", "raw", "status", "response"} of every request, in order
        self._lock = threading.Lock()
        self._proxy = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self._proxy.serve_forever, daemon=True).start()

    def _ready(self):
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=2).ok
        except requests.RequestException:
            return False

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self._proxy.server_address[1]}/v1"

    def env(self, **extra):
        """Environment for a worker process that plans with this model (through the proxy)."""
        return {"LLM_BASE_URL": self.base_url, "LLM_API_KEY": "", "LLM_MODEL": MODEL, "LLM_CONCURRENCY": str(SLOTS),
                **{key: str(value) for key, value in extra.items()}}

    def clear(self):
        with self._lock:
            self.exchanges.clear()

    def recorded(self):
        with self._lock:
            return list(self.exchanges)

    def close(self):
        self._proxy.shutdown()
        self._proxy.server_close()
        self.server.stop()

    def _handler(self):
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._forward("GET")

            def do_POST(self):
                self._forward("POST")

            def _forward(self, method):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream = http.client.HTTPConnection("127.0.0.1", model.port, timeout=600)
                try:
                    upstream.request(method, self.path, body=raw or None,
                                     headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
                    reply = upstream.getresponse()
                    status, data = reply.status, reply.read()
                    content_type = reply.getheader("Content-Type", "application/json")
                finally:
                    upstream.close()
                try:
                    response = json.loads(data)
                except ValueError:
                    response = data.decode(errors="replace")
                with model._lock:
                    model.exchanges.append({"path": self.path, "raw": raw.decode(errors="replace"),
                                            "status": status, "response": response})
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
