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
RUN = {}  # the running `make run`: its process and log


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def embedded_stack():
    var_dir = tempfile.mkdtemp(prefix="rd-embedded-")
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "BROKER_URL", "ENCRYPTION_KEY",
                        "RATELIMIT_STORAGE_URI", "RATELIMIT_KEY_PREFIX", "WEB_CONCURRENCY")}
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
                if key and requests.get(base + "/healthz", timeout=1).ok and output.count("ready.") >= 2:
                    RUN.update(proc=proc, log=log.name)
                    yield base, key.group(1), var_dir
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("embedded stack did not start:\n" + Path(log.name).read_text()[-3000:])
        if proc.poll() is not None and not RUN.get("stopped"):
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


def test_make_run_listens_on_loopback_only_with_its_own_control_socket(embedded_stack):
    base, _, var_dir = embedded_stack
    port = base.rsplit(":", 1)[1]
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.2:{port}/healthz", timeout=5)
    assert os.path.exists(os.path.join(var_dir, "gunicorn.ctl"))
    output = Path(RUN['log']).read_text()
    assert "No hostname was supplied" not in output
    assert "one web process" in output and output.count("Booting worker") == 1


def test_ctrl_c_hands_the_running_task_back_and_stops_cleanly(embedded_stack):
    import sqlite3

    base, key, var_dir = embedded_stack
    request_id = requests.post(base + "/fast/v2/remote-dispatch", headers={"x-api-key": key}, timeout=10,
                               json={"prompt": "wait 60\nanswer late", "executionMode": "cloud"}).json()["requestId"]
    database = os.path.join(var_dir, "remote-dispatch.db")

    def row():
        with sqlite3.connect(database, timeout=30) as conn:
            return conn.execute("SELECT status, lease_owner, attempt FROM tasks WHERE id = ?",
                                (request_id,)).fetchone()

    deadline = time.monotonic() + 30
    while row()[1] is None:
        assert time.monotonic() < deadline, "the worker never claimed the task"
        time.sleep(0.2)
    proc = RUN['proc']
    RUN["stopped"] = True
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
    proc.wait(30)
    output = Path(RUN['log']).read_text()
    assert "sending SIGKILL" not in output, output[-3000:]  # all stopped inside the grace
    assert "handed back to the queue" in output
    assert not re.findall(r"ERROR|Traceback", output), output[-3000:]
    assert row() == ("pending", None, 0)  # no lease to wait out; the next start runs it
