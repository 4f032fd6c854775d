"""A model server on this machine is one of the service's endpoints: a browser task cannot reach it even where private
addresses are allowed (issue 43), whatever process serves it and on whatever port."""
import sys
import tempfile
from pathlib import Path

import pytest
import requests

from tests.conftest import submit, wait_for_status
from tests.processes import ManagedProcess, free_port

pytestmark = pytest.mark.slow
MODELS = '{"object": "list", "data": [{"id": "tiny-model", "object": "model", "owned_by": "local"}]}'
# An OpenAI-compatible server of a model file, as llama.cpp's and llama-cpp-python's are started (--model x.gguf):
# it answers /v1/models and chat completions, on a port of its own.
SERVER = f"""
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self, body):
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._answer({MODELS!r})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer('{{"choices": [{{"message": {{"role": "assistant", "content": "model-secret-reply"}}}}]}}')
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


@pytest.fixture(scope="module")
def model_server():
    port = free_port()
    model = Path(tempfile.mkdtemp(prefix="rd-model-")) / "tiny-model.gguf"
    model.write_bytes(b"GGUF")
    server = ManagedProcess([sys.executable, "-c", SERVER, "--model", str(model), "--port", str(port)],
                            "model-server")

    def ready():
        try:
            return requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).ok
        except requests.RequestException:
            return False

    server.wait_until(ready)
    yield port
    server.stop()


def test_a_browser_cannot_reach_the_model_server_with_private_addresses_allowed(client, api_key, worker,
                                                                               model_server):
    prompt = f"/Operator\ngo to http://127.0.0.1:{model_server}/v1/models\nextract body"
    request_id = submit(client, api_key, {"prompt": prompt, "executionMode": "cloud_browser"}).get_json()["requestId"]
    done = wait_for_status(client, api_key, request_id, timeout=120)
    assert "tiny-model" not in str(done)  # the model list never reached the page
    first = done["response"]["actionTrace"][0]
    assert first.get("failed") and "local model server" in str(first), first
