"""`make run` with nothing configured: SQLite + kombu's filesystem transport, all processes."""
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def embedded_stack():
    var_dir = tempfile.mkdtemp(prefix="rd-embedded-")
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "BROKER_URL", "ENCRYPTION_KEY")}
    env.update(VAR_DIR=var_dir, PORT=str(port), SWEEP_INTERVAL_SECONDS="2")
    log = open(os.path.join(var_dir, "run.log"), "w+")
    proc = subprocess.Popen(["make", "--no-print-directory", "run"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            output = Path(log.name).read_text()
            key = re.search(r"Development API key: (\S+)", output)
            try:
                if key and requests.get(base + "/healthz", timeout=1).ok and "ready." in output:
                    yield base, key.group(1), var_dir
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("embedded stack did not start:\n" + Path(log.name).read_text()[-3000:])
        if proc.poll() is not None:
            raise AssertionError("make run exited:\n" + Path(log.name).read_text()[-3000:])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_make_run_serves_the_whole_flow_on_sqlite_and_the_filesystem_broker(embedded_stack):
    base, key, var_dir = embedded_stack
    assert os.path.exists(os.path.join(var_dir, "remote-dispatch.db"))
    headers = {"x-api-key": key}
    submitted = requests.post(base + "/fast/v2/remote-dispatch", headers=headers, timeout=10,
                              json={"prompt": "answer Hello from Remote Dispatch", "executionMode": "cloud"})
    assert submitted.status_code == 202
    request_id = submitted.json()["requestId"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        body = requests.get(f"{base}/fast/v2/remote-dispatch/responses/{request_id}",
                            headers=headers, timeout=10).json()
        if body["completedAt"]:
            break
        time.sleep(0.3)
    assert body["status"] == "success"
    assert body["response"]["output"] == {"type": "text", "content": "Hello from Remote Dispatch"}
    assert body["usage"] == {"actions": 0, "credits": 0.0}
    assert requests.get(base + "/readyz", timeout=10).json() == {"status": "ready"}
    # SQLite has no NOTIFY: `wait` falls back to re-reading the row (WAIT_POLL_SECONDS).
    waited = requests.post(base + "/fast/v2/remote-dispatch", headers=headers, timeout=120,
                           json={"prompt": "answer inline", "executionMode": "cloud", "wait": True})
    assert waited.status_code == 200
    assert waited.json()["response"]["text"] == "inline"
