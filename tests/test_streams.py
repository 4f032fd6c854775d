"""Streams from any web process (issue 40): a web process and a tasks worker that share no files (each its own
VAR_DIR). A task's live view through the web process shows frames and takes a person's input; the worker's stream
endpoint opens a browser only for a token of its own machine naming that browser; a kept session's CDP through the
web tier works, and is cut and refused once the session is stopped."""
import http.client
import json
import time
from urllib.parse import urlsplit

import pytest
import requests
import websocket

from app import browser_hosts
from app.extensions import db
from app.models import SessionHost
from tests.conftest import make_key, submit, wait_for_status, wait_until
from tests.processes import two_machines
from tests.test_live import BUTTON, FIELD, FORM, Viewer, live_url, running, waits

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pages():
    from tests.page_server import PageServer

    server = PageServer({"/form": FORM})
    yield server
    server.close()


@pytest.fixture(scope="module")
def stack(app):
    """gunicorn and a tasks worker, each with a VAR_DIR of its own: nothing one writes on disk is seen by the other."""
    with two_machines(name="streams") as (web, *_):
        yield web


def endpoint_url(app):
    """The worker machine's stream endpoint, as it registered it."""
    host = browser_hosts.this_host()
    with app.app_context():
        return wait_until(lambda: db.session.execute(db.select(SessionHost.url).where(SessionHost.host == host))
                          .scalar_one_or_none(), what="the worker to register its stream endpoint", timeout=30)


def test_a_tasks_live_view_through_the_web_process_shows_frames_and_takes_input(client, api_key, pages, stack):
    prompt = "\n".join(["/Operator", f"go to {pages.url('/form')}", *waits(40), "extract #greeting"])
    request_id = running(client, api_key, submit(client, api_key, {"executionMode": "cloud_browser",
                                                                   "prompt": prompt}).get_json()["requestId"])
    reply = live_url(stack, api_key, f"remote-dispatch/responses/{request_id}", "control")
    assert reply.status_code == 200, reply.text
    viewer = Viewer(reply.json()["liveUrl"])
    try:
        wait_until(lambda: viewer.of("frame"), what="a frame through the web process")
        assert all(state["problem"] is None for state in viewer.of("state")[1:]), [s["problem"] for s in viewer.of("state")]
        viewer.send({"type": "take"})
        wait_until(lambda: viewer.control() == "person", what="the viewer to learn the agent paused", timeout=30)
        frames = len(viewer.of("frame"))
        viewer.click(FIELD)
        viewer.send({"type": "text", "text": "ada"})
        viewer.click(BUTTON)
        wait_until(lambda: len(viewer.of("frame")) > frames, what="a frame of the changed page")
        viewer.send({"type": "handback"})
        done = wait_for_status(client, api_key, request_id, timeout=90)
    finally:
        viewer.close()
    assert done["status"] == "success", done
    assert done["response"]["text"] == "Thanks ada"


def test_the_stream_endpoint_opens_only_the_browser_its_own_token_names(app, client, api_key, pages, stack):
    base = endpoint_url(app)
    prompt = "\n".join(["/Operator", f"go to {pages.url('/form')}", *waits(30)])
    request_id = running(client, api_key, submit(client, api_key, {"executionMode": "cloud_browser",
                                                                   "prompt": prompt}).get_json()["requestId"])
    host, target = browser_hosts.this_host(), browser_hosts.task_target(request_id)
    config = app.config

    def version(token, path="/json/version"):
        """(status, body) of the endpoint's answer, the path sent as it is (no client tidies it)."""
        connection = http.client.HTTPConnection(urlsplit(base).hostname, urlsplit(base).port, timeout=10)
        try:
            connection.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token is not None else {})
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    good = browser_hosts.mint(config, host, target)
    status, body = version(good)
    assert status == 200 and "/devtools/browser/" in json.loads(body)["webSocketDebuggerUrl"]
    forged = browser_hosts.mint({**config, "ENCRYPTION_KEY": "another deployment's key"}, host, target)
    claims, _, signature = good.partition(".")
    for token in (None, "", forged, good[:-2] + ("AA" if not good.endswith("AA") else "BB"),
                  browser_hosts.mint(config, host, target, seconds=-1),  # expired
                  browser_hosts.mint(config, "another-machine", target),  # another machine's
                  f"{claims}x.{signature}"):
        assert version(token)[0] == 401, token
    # A token for another browser opens that one only: one not running here opens nothing.
    assert version(browser_hosts.mint(config, host, browser_hosts.task_target("no-such-task")))[0] == 404
    assert version(browser_hosts.mint(config, host, "x:/etc"))[0] == 404
    # The caller names no socket and no address: nothing but DevTools paths of that browser.
    for path in ("/json/new?http://127.0.0.1:1/", "/devtools/../json/version", "/", "/metrics"):
        assert version(good, path)[0] == 404, path
    client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel", headers={"x-api-key": api_key})
    wait_for_status(client, api_key, request_id, statuses=("success", "error", "cancelled"), timeout=60)
    assert version(good)[0] == 404  # its task ended: its browser is no longer served


def test_cdp_through_the_web_tier_works_and_is_cut_and_refused_after_a_stop(stack):
    key = make_key("streams-cdp", plan="pro")
    api = stack.base + "/fast/v2/cloud-browser"
    created = requests.post(api + "/create-cloud-browser-session", json={}, headers={"x-api-key": key},
                            timeout=120).json()
    url = created["cdp_websocket_url"]
    assert url.startswith(stack.base.replace("http://", "ws://") + "/cdp/")  # the web tier, on its own port
    headers = [f"{name}: {value}" for name, value in created["cdp_auth_headers"].items()]
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(url, header=["Authorization: Bearer not-the-credential"], timeout=10)
    assert refused.value.status_code == 401
    cdp = websocket.create_connection(url, header=headers, timeout=30)
    try:
        cdp.send(json.dumps({"id": 1, "method": "Target.getTargets"}))
        assert any(t["type"] == "page" for t in json.loads(cdp.recv())["result"]["targetInfos"])
        cdp.send(json.dumps({"id": 2, "method": "Browser.getBrowserCommandLine"}))  # the policy applies here too
        assert "error" in json.loads(cdp.recv())
        stopped = requests.post(api + "/stop-cloud-browser-session", json={"session_id": created["session_id"]},
                                headers={"x-api-key": key}, timeout=60)
        assert stopped.status_code == 200, stopped.text
        deadline = time.monotonic() + 15
        with pytest.raises((websocket.WebSocketConnectionClosedException, ConnectionError)):
            while time.monotonic() < deadline:
                cdp.send(json.dumps({"id": 3, "method": "Browser.getVersion"}))
                cdp.recv()
                time.sleep(0.2)
    finally:
        cdp.close()
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(url, header=headers, timeout=10)
    assert refused.value.status_code == 401
