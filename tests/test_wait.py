"""`wait: true`: blocks until the task is over (LISTEN/NOTIFY), 408 on timeout, many at once."""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from app import lifecycle
from tests.conftest import ROOT, submit, wait_for_status

CLOUD = {"executionMode": "cloud"}
pytestmark = pytest.mark.slow


def submit_and_wait(client, key, prompt, headers=None):
    return client.post("/fast/v2/remote-dispatch", json={"prompt": prompt, "wait": True, **CLOUD},
                       headers={"x-api-key": key, **(headers or {})})


@pytest.fixture
def waiters(app):
    return app.extensions["task_waiters"]


def test_wait_returns_the_finished_task_like_a_poll(client, api_key, worker):
    response = submit_and_wait(client, api_key, "answer Hello inline")
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "success"
    assert body["completedAt"] is not None
    assert body["response"]["output"] == {"type": "text", "content": "Hello inline"}
    assert body["usage"] == {"actions": 0, "credits": 0.0}
    polled = client.get(f"/fast/v2/remote-dispatch/responses/{body['requestId']}",
                        headers={"x-api-key": api_key}).get_json()
    assert body == polled


def test_a_failed_task_is_returned_with_200_and_status_error(client, api_key, worker):
    response = submit_and_wait(client, api_key, "book me a flight")
    assert response.status_code == 200
    assert response.get_json()["status"] == "error"


def test_wait_is_woken_by_notify_not_by_polling(client, api_key, worker, waiters, monkeypatch):
    """With the fallback poll pushed out to an hour, only the NOTIFY can end the wait in time."""
    monkeypatch.setattr(waiters, "poll_seconds", 3600)
    response = submit_and_wait(client, api_key, "wait 0.5\nanswer woken")
    assert waiters.listening.is_set()
    assert response.status_code == 200
    assert response.get_json()["response"]["text"] == "woken"


def test_the_listener_reconnects_when_its_connection_is_killed(client, api_key, worker, waiters,
                                                              monkeypatch):
    from sqlalchemy import text

    from app.extensions import db

    monkeypatch.setattr(waiters, "poll_seconds", 3600)
    assert submit_and_wait(client, api_key, "answer first").status_code == 200
    old_pid = waiters.backend_pid
    assert db.session.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": old_pid}).scalar()
    db.session.commit()
    response = submit_and_wait(client, api_key, "wait 0.5\nanswer after reconnect")
    assert response.status_code == 200
    assert response.get_json()["response"]["text"] == "after reconnect"
    assert waiters.listening.is_set() and waiters.backend_pid != old_pid


def test_timeout_is_408_and_the_task_runs_on(client, app, api_key, worker, monkeypatch):
    monkeypatch.setitem(app.config, "WAIT_TIMEOUT_SECONDS", 0.3)
    response = submit_and_wait(client, api_key, "wait 2\nanswer finished later")
    assert response.status_code == 408
    body = response.get_json()
    assert body == {"error": "Request Timeout", "requestId": body["requestId"],
                    "message": "The task did not finish within 0.3 s; it keeps running. "
                               "Poll its requestId for the result."}
    finished = wait_for_status(client, api_key, body["requestId"])
    assert finished["status"] == "success"
    assert finished["response"]["text"] == "finished later"


def test_replaying_an_idempotent_wait_after_408_reattaches_to_the_task(client, app, api_key, worker,
                                                                       monkeypatch):
    headers = {"Idempotency-Key": "order-17"}
    monkeypatch.setitem(app.config, "WAIT_TIMEOUT_SECONDS", 0.3)
    timed_out = submit_and_wait(client, api_key, "wait 1\nanswer done", headers)
    assert timed_out.status_code == 408
    monkeypatch.setitem(app.config, "WAIT_TIMEOUT_SECONDS", 60)
    again = submit_and_wait(client, api_key, "wait 1\nanswer done", headers)
    assert again.status_code == 200
    assert again.get_json()["requestId"] == timed_out.get_json()["requestId"]
    assert again.get_json()["response"]["text"] == "done"


def test_input_required_ends_the_wait(client, app, api_key, waiters, monkeypatch):
    """The task is not published; another thread pauses it for input, as a worker would."""
    monkeypatch.setattr("app.dispatch.service.dispatch", lambda task_id, **_: True)
    monkeypatch.setattr(waiters, "poll_seconds", 3600)
    question = {"output": {"type": "text", "content": "Which account?"}, "text": "Which account?",
                "structuredOutput": None, "actionTrace": []}

    def pause_the_waited_task():
        deadline = time.monotonic() + 30
        while not waiters._events and time.monotonic() < deadline:
            time.sleep(0.05)
        (task_id,) = list(waiters._events)
        with app.app_context():
            assert lifecycle.finish(task_id, "input-required", question, {"actions": 1, "credits": 1.0},
                                    hitl={"type": "text", "question": "Which account?"})

    pauser = threading.Thread(target=pause_the_waited_task)
    pauser.start()
    response = submit_and_wait(client, api_key, "answer unused")
    pauser.join()
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "input-required"
    assert body["completedAt"] is None
    assert body["response"]["output"]["content"] == "Which account?"
    assert body["hitlInputMetadata"] == {"type": "text", "question": "Which account?"}


def test_when_every_wait_slot_is_taken_the_submit_is_refused_with_503(client, api_key, waiters,
                                                                      monkeypatch):
    monkeypatch.setattr(waiters, "_slots", threading.BoundedSemaphore(1))
    waiters._slots.acquire()
    response = submit_and_wait(client, api_key, "answer hi")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"  # its own, not the rate limiter's window reset
    assert response.get_json()["error"] == "Service Unavailable"
    assert submit(client, api_key, {"prompt": "answer hi", **CLOUD}).status_code == 202


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def web_server(app):
    """The real web process: gunicorn with config/gunicorn.py, one gthread worker."""
    port = _free_port()
    log = tempfile.NamedTemporaryFile(prefix="gunicorn-", suffix=".log", delete=False)
    env = {**os.environ, "PORT": str(port), "WEB_CONCURRENCY": "1", "WEB_THREADS": "48"}
    command = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "app:create_app()"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(base + "/healthz", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("gunicorn did not start:\n" + Path(log.name).read_text()[-3000:])
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_many_concurrent_waits_complete_and_other_requests_are_served(web_server, api_key, worker):
    count = 40  # within WAIT_MAX_CONCURRENT (48 threads - 8 kept for other requests)
    headers = {"x-api-key": api_key}

    def one(n):
        return requests.post(web_server + "/fast/v2/remote-dispatch", headers=headers, timeout=120,
                             json={"prompt": f"wait 0.2\nanswer number {n}", "wait": True, **CLOUD})

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(one, n) for n in range(count)]
        # While they all wait, the process still answers other calls.
        time.sleep(0.5)
        assert requests.get(web_server + "/healthz", timeout=30).ok
        listed = requests.get(web_server + "/fast/v2/remote-dispatch/responses?limit=100", headers=headers,
                              timeout=30)
        assert listed.status_code == 200
        responses = [future.result() for future in futures]
    assert [r.status_code for r in responses] == [200] * count
    assert sorted(r.json()["response"]["text"] for r in responses) == sorted(
        f"number {n}" for n in range(count))
