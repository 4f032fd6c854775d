"""A kept session's browser lives on the worker, not in the web process: a web and a worker with different VAR_DIRs
(as two machines have), the worker named as the Procfile names it (tasks@<host>) and consuming only `tasks`. The
session the web creates is started and held by the worker; a task in it, a direct action and a stop, all through
the web, reach it there."""
import json
import secrets
import socket
from types import SimpleNamespace

import pytest
import requests

from app.sandbox import processes as sandbox_processes
from app.sessions import pool as session_pool
from app.sessions.browsers import session_dir, sessions_root
from tests.browser_pages import RecordingServer
from tests.conftest import make_key, wait_until
from tests.processes import two_machines

pytestmark = pytest.mark.slow
PAGE = "<html><head><title>Held</title></head><body><h1>held by the worker</h1></body></html>"


@pytest.fixture(scope="module")
def pages():
    server = RecordingServer({"/held": PAGE})
    yield server
    server.close()


@pytest.fixture(scope="module")
def machines(app):
    """The web machine and the worker machine: each its own VAR_DIR; the worker fills a session pool of one."""
    with two_machines({"SESSION_POOL_SIZE": "1"}, node=f"tasks@{socket.gethostname()}") as (web, worker, web_var,
                                                                                            worker_var):
        yield SimpleNamespace(web=web, worker=worker, api_base=web.base + "/fast/v2",
                              web_config={"VAR_DIR": web_var}, worker_config={"VAR_DIR": worker_var})


def api(machines, key, method, path, **kwargs):
    return requests.request(method, machines.api_base + path, headers={"x-api-key": key}, timeout=120, **kwargs)


def processes_of(config, session_id):
    directory = str(session_dir(config, session_id))
    return [pid for pid, found in sandbox_processes.processes_under(str(sessions_root(config))).items()
            if found == directory]


def ancestors(pid):
    """The pids above `pid`, up to init."""
    found = []
    while pid > 1:
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        found.append(pid)
    return found


def test_a_session_made_through_the_web_is_held_by_the_worker_and_served_there(machines, pages):
    key = make_key("held-by-worker")
    [pooled] = wait_until(lambda: list(session_pool.ready(machines.worker_config)) or None,
                          what="the worker's session pool to fill", timeout=90)
    reply = api(machines, key, "POST", "/cloud-browser/create-and-initialize-cloud-browser-session",
                json={"require_extension": False})
    assert reply.status_code == 200, reply.text
    session_id, window = reply.json()["session_id"], reply.json()["browser_window_id"]
    try:
        assert session_id == pooled  # the worker's pooled browser
        held = processes_of(machines.worker_config, session_id)
        assert held and not session_dir(machines.web_config, session_id).exists()
        for pid in held:  # started by the worker, none by the web process
            assert machines.worker.proc.pid in ancestors(pid) and machines.web.proc.pid not in ancestors(pid)

        submitted = api(machines, key, "POST", "/remote-dispatch", json={
            "prompt": f"/Operator\ngo to {pages.url('/held')}\nextract h1", "cloudBrowserSessionId": session_id,
            "allowedDomains": [pages.url("/").split("/")[2]]})
        assert submitted.status_code == 202, submitted.text
        request_id = submitted.json()["requestId"]
        done = wait_until(lambda: (lambda b: b if b["completedAt"] else None)(
            api(machines, key, "GET", f"/remote-dispatch/responses/{request_id}").json()), "the task", timeout=120)
        assert done["status"] == "success" and done["response"]["text"] == "held by the worker", done

        # No worker consumes `webhooks` here: the action reaches the worker by its own queue (tasks@<host>).
        action = api(machines, key, "POST", "/extension-actions", json={
            "action": {"name": "get_url"}, "actionExecutionId": secrets.token_hex(4), "browserWindowId": window})
        assert action.status_code == 200 and action.json()["status"] == "success", action.text
        assert json.loads(action.json()["data"])["url"] == pages.url("/held")

        stopped = api(machines, key, "POST", "/cloud-browser/stop-cloud-browser-session",
                      json={"session_id": session_id})
        assert stopped.status_code == 200, stopped.text
        wait_until(lambda: not processes_of(machines.worker_config, session_id), "the worker to end the browser",
                   timeout=30)
    finally:
        api(machines, key, "POST", "/cloud-browser/stop-cloud-browser-session", json={"session_id": session_id})
