"""Kept sessions served from the worker's warm pool (docs/browser-pool.md): a pooled session answers over CDP and runs
tasks as a cold one does, two in a row share nothing, a dead pooled browser is never handed out, a SIGKILLed worker
leaves none behind, and SESSION_POOL_SIZE=0 starts sessions cold as before."""
import json
import os
import signal
from types import SimpleNamespace

import pytest
import requests
import websocket

from app.sandbox import processes as sandbox_processes
from app.sessions import pool as session_pool
from app.sessions.browsers import session_dir, sessions_root
from tests.browser_pages import RecordingServer
from tests.conftest import make_key, wait_until
from tests.processes import WebProcess, WorkerProcess

pytestmark = pytest.mark.slow
CONFIG = {"VAR_DIR": os.environ["VAR_DIR"], "SESSION_POOL_SIZE": 1, "CHROMIUM_PATH": "/usr/bin/chromium",
          "CHROMEDRIVER_PATH": "/usr/bin/chromedriver"}
STATE = """<html><head><title>State</title><script src="/cached.js"></script></head><body><h1>checked</h1><script>
window.state = "cookies=[" + document.cookie + "] storage=" + localStorage.length + " history=" + history.length;
</script></body></html>"""
SET = """<html><head><title>Set</title><script src="/cached.js"></script></head><body><script>
localStorage.setItem("rd-left", "session one"); document.cookie = "rd_js=one; max-age=3600";
history.pushState({}, "", "/set#pushed");</script></body></html>"""


@pytest.fixture(scope="module")
def pages():
    server = RecordingServer({
        "/state": STATE, "/set": (200, {"Set-Cookie": "rd_server=one; Max-Age=3600; Path=/"}, SET),
        "/cached.js": (200, {"Content-Type": "application/javascript", "Cache-Control": "max-age=3600"}, "1;")})
    yield server
    server.close()


def pooled_worker(size="1"):
    """The worker that starts the sessions' browsers, and fills the session pool of its machine."""
    return WorkerProcess(concurrency=2, env={"SESSION_POOL_SIZE": size}, name="session-pool")


@pytest.fixture(scope="module")
def service(app):
    web = WebProcess()
    try:
        running = SimpleNamespace(api_base=web.base + "/fast/v2", web=web, worker=pooled_worker())
    except BaseException:
        web.stop()
        raise
    yield running  # a test may replace its worker
    running.worker.stop()
    web.stop()


@pytest.fixture
def key(app):
    return make_key("session-pool", plan="pro")  # CDP needs a plan that allows it


def ready_ids():
    return set(session_pool.ready(CONFIG))


def pool_full():
    return wait_until(lambda: ready_ids() or None, what="the session pool to fill", timeout=90)


def post(service, key, path, body):
    reply = requests.post(service.api_base + path, headers={"x-api-key": key}, json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


def create(service, key):
    return post(service, key, "/cloud-browser/create-cloud-browser-session", {"session_name": "pooled"})


def stop(service, key, session):
    post(service, key, "/cloud-browser/stop-cloud-browser-session", {"session_id": session["session_id"]})


def box_processes(session_id):
    directory = str(session_dir(CONFIG, session_id))
    return [pid for pid, found in sandbox_processes.processes_under(str(sessions_root(CONFIG))).items()
            if found == directory]


class Cdp:
    """A caller of the session's CDP relay, on its one page."""

    def __init__(self, session):
        headers = [f"{name}: {value}" for name, value in session["cdp_auth_headers"].items()]
        self.ws = websocket.create_connection(session["cdp_websocket_url"], header=headers, timeout=60,
                                              suppress_origin=True)
        self.next_id = 0
        target = next(t for t in self("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.page = self("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]

    def __call__(self, method, params=None, page=None):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {},
                                 **({"sessionId": page} if page else {})}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]

    def evaluate(self, expression):
        return self("Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.page)["result"].get("value")

    def visit(self, url):
        self("Page.navigate", {"url": url}, self.page)
        wait_until(lambda: self.evaluate("document.readyState === 'complete' && location.href") or None,
                   what=f"{url} to load", timeout=30)

    def close(self):
        self.ws.close()


def assert_answers_over_cdp(session, pages):
    cdp = Cdp(session)
    try:
        cdp.visit(pages.url("/state"))
        assert cdp.evaluate("document.querySelector('h1').textContent") == "checked"
    finally:
        cdp.close()


def test_a_pooled_session_answers_over_cdp_and_runs_a_task_as_a_cold_one(service, key, pages):
    [waiting] = pool_full()
    session = create(service, key)
    assert session["session_id"] == waiting  # the pooled browser, adopted with its id
    assert_answers_over_cdp(session, pages)
    # The web tier's relay serves this session's token, no other.
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(session["cdp_websocket_url"], header=["Authorization: Bearer not-the-token"],
                                    timeout=10, suppress_origin=True)
    assert refused.value.status_code == 401
    submitted = requests.post(service.api_base + "/remote-dispatch", headers={"x-api-key": key}, timeout=60, json={
        "prompt": f"/Operator\ngo to {pages.url('/state')}\nextract h1", "cloudBrowserSessionId": waiting})
    assert submitted.status_code == 202, submitted.text
    request_id = submitted.json()["requestId"]
    done = wait_until(lambda: (lambda b: b if b["completedAt"] else None)(requests.get(
        service.api_base + f"/remote-dispatch/responses/{request_id}", headers={"x-api-key": key}, timeout=30).json()),
        what="the task", timeout=120)
    assert done["status"] == "success" and done["response"]["text"] == "checked", done
    assert box_processes(waiting)
    # Adopted: it is the session's, whatever happens to the web process that filled the pool.
    assert sandbox_processes.owner_of(str(session_dir(CONFIG, waiting))) is None
    stop(service, key, session)
    wait_until(lambda: not box_processes(waiting), what="the session's browser to end", timeout=30)


def test_two_pooled_sessions_in_a_row_see_nothing_of_each_other(service, key, pages):
    def state(cdp):
        cdp.visit(pages.url("/state"))
        return cdp.evaluate("window.state")

    def script_loads():
        return sum(path == "/cached.js" for path, _ in pages.requests)

    [first_id] = pool_full()
    first = create(service, key)
    assert first["session_id"] == first_id
    cdp = Cdp(first)
    try:
        fresh = state(cdp)
        cdp.visit(pages.url("/set"))
        assert state(cdp) != fresh  # the first session did leave cookies, storage and history behind
    finally:
        cdp.close()
    stop(service, key, first)
    [second_id] = pool_full()
    assert second_id != first_id
    second = create(service, key)
    assert second["session_id"] == second_id
    loads = script_loads()
    cdp = Cdp(second)
    try:
        assert state(cdp) == fresh  # no cookie, no storage, the history of a new tab
        assert script_loads() == loads + 1  # and nothing in its cache: the script was fetched again
    finally:
        cdp.close()
    stop(service, key, second)


def test_a_killed_pooled_browser_is_not_handed_out(service, key, pages):
    [doomed] = pool_full()
    os.kill(session_pool.ready(CONFIG)[doomed].chromium_pid, signal.SIGKILL)
    session = create(service, key)
    assert session["session_id"] != doomed
    assert_answers_over_cdp(session, pages)
    stop(service, key, session)
    wait_until(lambda: not box_processes(doomed) and not session_dir(CONFIG, doomed).exists(),
               what="the dead pooled browser to be destroyed", timeout=30)


def test_a_sigkilled_worker_leaves_no_pooled_browser(service, key):
    [orphan] = pool_full()
    filler = sandbox_processes.owner_of(str(session_dir(CONFIG, orphan)))
    assert filler == service.worker.proc.pid and box_processes(orphan)  # the worker's main process fills it
    service.worker.kill()  # as a crash would: the worker and its pool processes
    service.worker = pooled_worker()  # the next worker of the machine reaps what the dead one left
    wait_until(lambda: not box_processes(orphan) and orphan not in ready_ids(),
               what="the orphaned pooled browser to be reaped", timeout=60)
    [refilled] = pool_full()
    assert refilled != orphan and not session_dir(CONFIG, orphan).exists()
    session = create(service, key)
    assert session["session_id"] == refilled
    stop(service, key, session)


def test_pool_size_0_starts_sessions_cold(service, key):
    service.worker.stop()  # its unclaimed pooled browser ends with it
    service.worker = pooled_worker("0")
    try:
        session = create(service, key)
        assert not ready_ids()  # started cold: no pool on this machine
        assert box_processes(session["session_id"])
        stop(service, key, session)
    finally:
        service.worker.stop()
        service.worker = pooled_worker()
