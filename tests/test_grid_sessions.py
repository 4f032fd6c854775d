"""A kept session on a Selenium Grid, deployed on several machines: the browser is the Grid's, its egress proxy runs
on the worker machine that started the session (tests/test_session_worker.py has the same split without a Grid)."""
import socket
import tempfile

import pytest
import requests

from app.egress.proxy import proxies_under
from app.extensions import db
from app.models import CloudSession
from app.sessions.browsers import egress_dir, session_dir
from tests.browser_pages import RecordingServer
from tests.conftest import WorkerProcess, make_key, wait_until
from tests.grid import selenium_grid  # noqa: F401 (fixture)
from tests.processes import two_machines

pytestmark = pytest.mark.slow
PAGE = "<html><head><title>Held</title></head><body><h1>behind the worker's proxy</h1></body></html>"


@pytest.fixture(scope="module")
def pages():
    server = RecordingServer({"/held": PAGE})
    yield server
    server.close()


def grid_sessions(grid):
    """The ids of the WebDriver sessions the Grid runs now."""
    nodes = requests.get(f"{grid}/status", timeout=5).json()["value"]["nodes"]
    return {slot["session"]["sessionId"] for node in nodes for slot in node["slots"] if slot.get("session")}


def test_a_grid_session_is_fenced_and_stopped_by_the_worker_running_its_egress_proxy(app, selenium_grid, pages):
    """With a Selenium Grid the browser is the Grid's, but its egress proxy runs on the worker that started the
    session: its tasks go to that worker (a task's allowedDomains fence is written where that proxy reads it),
    also while another machine's worker takes the `tasks` queue; and a stop made through the web machine ends
    the Grid session and, on that worker, the proxy."""
    from celery import Celery
    from tests.conftest import TEST_BROKER_URL

    grid = {"SELENIUM_REMOTE_URL": str(selenium_grid)}
    key, node = make_key("grid-held-proxy"), f"tasks@{socket.gethostname()}"
    with tempfile.TemporaryDirectory(prefix="rd-other-var-") as other_var, \
            two_machines(grid, node=node, name="grid-split", web_env=grid) as (web, _worker, _web_var, worker_var):
        base = web.base + "/fast/v2"
        reply = requests.post(base + "/cloud-browser/create-and-initialize-cloud-browser-session",
                              headers={"x-api-key": key}, json={"require_extension": False}, timeout=120)
        assert reply.status_code == 200, reply.text
        session_id = reply.json()["session_id"]
        proxies = egress_dir({"VAR_DIR": worker_var}, session_id)
        assert proxies_under(proxies), "the session's egress proxy runs on the worker"
        webdriver_session = db.session.get(CloudSession, session_id).webdriver_session
        db.session.commit()
        assert webdriver_session in grid_sessions(selenium_grid)  # its browser is the Grid's

        # From now on another worker (another VAR_DIR, as on another machine) takes everything sent to `tasks`.
        control = Celery(broker=TEST_BROKER_URL).control
        assert control.cancel_consumer("tasks", destination=[node], reply=True, timeout=10)
        other = WorkerProcess(queues="tasks", concurrency=1, name="grid-other",
                              env={"VAR_DIR": other_var, "PUBLIC_URL": web.base, **grid})
        try:
            host = pages.url("/").split("/")[2]
            for fence, expected in (([host], "success"), (["elsewhere.test"], "error")):
                submitted = requests.post(base + "/remote-dispatch", headers={"x-api-key": key}, timeout=30, json={
                    "prompt": f"/Operator\ngo to {pages.url('/held')}\nextract h1", "allowedDomains": fence,
                    "cloudBrowserSessionId": session_id})
                assert submitted.status_code == 202, submitted.text
                request_id = submitted.json()["requestId"]
                done = wait_until(lambda: (lambda b: b if b["completedAt"] else None)(requests.get(
                    f"{base}/remote-dispatch/responses/{request_id}", headers={"x-api-key": key}, timeout=30).json()),
                    "the task", timeout=120)
                assert done["status"] == expected, done
                if expected == "error":
                    assert "not in the task's allowedDomains" in done["response"]["text"], done
                else:
                    assert done["response"]["text"] == "behind the worker's proxy", done
        finally:
            other.stop()

        stopped = requests.post(base + "/cloud-browser/stop-cloud-browser-session", headers={"x-api-key": key},
                                json={"session_id": session_id}, timeout=30)
        assert stopped.status_code == 200, stopped.text
        # The proxy ended, then its session's folder removed, on the worker.
        wait_until(lambda: not proxies_under(proxies) and not session_dir({"VAR_DIR": worker_var}, session_id).exists(),
                   "the worker to end the session's egress proxy", timeout=30)
        assert webdriver_session not in grid_sessions(selenium_grid)  # and the Grid's browser is gone
