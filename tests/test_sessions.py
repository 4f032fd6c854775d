"""Kept cloud browser sessions: a real Chromium that outlives tasks, driven through the API and the official SDK."""
import base64
import json
import os
import secrets
import signal
import socket
import threading
import time
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import pytest
import requests
import websocket

from app.extensions import db
from app.models import CloudSession
from app.egress.proxy import proxies_under
from app.sessions.browsers import egress_dir, profile_processes
from workers.browser.kept_session import KeptSessionBrowser
from tests.conftest import make_key, wait_until
from tests.identity_pages import STILL_SEEN, IdentityServer, detect_steps, detections
from tests.sdk_support import LiveService, run_sdk

pytestmark = pytest.mark.slow
PASSWORD = "Kept-Session pass#42"


class LoginSite:
    """A site with a real login: /login (form) → /session sets a cookie → /account says who is signed in."""

    def __init__(self):
        self.sessions = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urlsplit(self.path)
                query = dict(parse_qsl(parts.query))
                cookie = SimpleCookie(self.headers.get("Cookie", ""))
                user = site.sessions.get(cookie["sid"].value) if "sid" in cookie else None
                headers = {}
                if parts.path == "/login":
                    body = ("<h1>Sign in</h1><form action='/session' method='get'><label for='u'>User</label>"
                            "<input id='u' name='user'><label for='p'>Password</label>"
                            "<input id='p' name='password' type='password'><button type='submit'>Sign in</button></form>")
                elif parts.path == "/session" and query.get("password") == PASSWORD:
                    sid = secrets.token_hex(8)
                    site.sessions[sid] = query.get("user", "")
                    headers["Set-Cookie"] = f"sid={sid}; Path=/; HttpOnly"
                    body = f"<h1>Welcome {query.get('user')}</h1>"
                elif parts.path == "/session":
                    body = "<h1>Wrong password</h1>"
                elif parts.path == "/account":
                    body = f"<h1>Signed in as {user}</h1>" if user else "<h1>Not signed in</h1>"
                elif parts.path.startswith("/page/"):
                    body = f"<h1>{parts.path.rsplit('/', 1)[1]}</h1>"
                elif parts.path == "/report.csv":
                    data = b"region,total\nnorth,7\n"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/csv")
                    self.send_header("Content-Disposition", "attachment; filename=report.csv")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                elif parts.path == "/downloads":
                    body = "<h1>Reports</h1><a href='/report.csv' id='csv'>Download the report</a>"
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = f"<html><head><title>Site</title></head><body>{body}</body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def service(app):
    live = LiveService(beat=True, concurrency=2)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def site():
    server = LoginSite()
    yield server
    server.close()


@pytest.fixture(scope="module")
def detectors():
    """BotD and fpscanner on a loopback site (tests/identity_pages.py)."""
    server = IdentityServer()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _no_session_left(app):
    """Every session a test started is ended with it (tables are emptied between tests)."""
    yield
    from app.sessions import service as sessions

    db.session.rollback()
    for session_id in db.session.query(CloudSession.id).filter(CloudSession.status != "ended").all():
        sessions.end(session_id[0], "terminated")


def api(service, key, method, path, **kwargs):
    return requests.request(method, service.api_base + path, headers={"x-api-key": key}, timeout=120, **kwargs)


def create(service, key, **body):
    reply = api(service, key, "POST", "/cloud-browser/create-and-initialize-cloud-browser-session",
                json={"require_extension": False, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def run_and_wait(service, key, body):
    submitted = api(service, key, "POST", "/remote-dispatch", json=body)
    assert submitted.status_code == 202, submitted.text
    request_id = submitted.json()["requestId"]
    return wait_until(lambda: (lambda b: b if b["completedAt"] else None)(
        api(service, key, "GET", f"/remote-dispatch/responses/{request_id}").json()), "the task", timeout=120)


def session_row(session_id):
    db.session.rollback()
    return db.session.get(CloudSession, session_id, populate_existing=True)


def test_two_sdk_runs_in_one_session_share_the_login_cookie(service, api_key, site):
    result = run_sdk(service, api_key, f'''
        from narada import Agent, LambdaEnvironment
        env = LambdaEnvironment(session_name="shop admin")
        try:
            agent = Agent(environment=env)  # the web agent (/Operator), in the session's browser
            login = await agent.run("""go to {site.url("/login")}
        type ada into "#u"
        type ${{PASSWORD}} into "#p"
        click "Sign in"
        extract h1""", secret_variables={{"PASSWORD": {PASSWORD!r}}})
            account = await agent.run("""go to {site.url("/account")}
        extract h1""")
            emit(login=login.text, account=account.text, statuses=[login.status, account.status],
                 session=env.session_id, window=env._browser_window_id)
        finally:
            await env.close()
    ''')
    value = result.value
    assert value["statuses"] == ["success", "success"], value
    assert value["login"] == "Welcome ada"
    assert value["account"] == "Signed in as ada"  # the second task found the first one's cookie
    assert PASSWORD not in result.stdout + result.stderr
    # A fresh cloud_browser task is a different browser: not signed in.
    fresh = run_and_wait(service, api_key, {"prompt": f"/Operator\ngo to {site.url('/account')}\nextract h1",
                                            "executionMode": "cloud_browser"})
    assert fresh["response"]["text"] == "Not signed in"
    row = session_row(value["session"])
    assert row.status == "ended" and row.browser_window_id == value["window"] and row.busy_task_id is None


def test_stop_ends_the_session_and_its_browser_processes(service, api_key, site):
    created = create(service, api_key, session_name="to stop")
    row = session_row(created["session_id"])
    assert row.status == "active" and profile_processes(row.profile_dir)
    body = {"prompt": f"/Operator\ngo to {site.url('/page/hello')}\nextract h1",
            "cloudBrowserSessionId": created["session_id"], "browserWindowId": created["browser_window_id"]}
    assert run_and_wait(service, api_key, body)["response"]["text"] == "hello"

    stopped = api(service, api_key, "POST", "/cloud-browser/stop-cloud-browser-session",
                  json={"session_id": created["session_id"], "status": "complete"})
    assert stopped.status_code == 200 and stopped.json()["success"] is True
    assert profile_processes(row.profile_dir) == []  # chromedriver and every Chromium process are gone
    assert session_row(created["session_id"]).end_reason == "complete"
    again = api(service, api_key, "POST", "/remote-dispatch", json=body)
    assert again.status_code == 409 and again.json()["error"] == "Session Ended"
    assert api(service, api_key, "POST", "/cloud-browser/stop-cloud-browser-session",
               json={"session_id": created["session_id"]}).json()["success"] is True  # idempotent


def test_an_idle_session_is_ended_by_the_sweep(app, service, api_key):
    created = create(service, api_key, session_timeout=2)
    row = session_row(created["session_id"])
    egress = egress_dir(app.config, row.id)
    assert profile_processes(row.profile_dir) and proxies_under(egress)
    ended = wait_until(lambda: (lambda r: r if r.status == "ended" else None)(session_row(created["session_id"])),
                       "the idle sweep", timeout=60)
    assert ended.end_reason == "timed_out"
    # The row says ended first (no new task may start), then the sweep stops the processes.
    wait_until(lambda: profile_processes(row.profile_dir) == [], "the browser processes to end", timeout=30)
    wait_until(lambda: proxies_under(egress) == [], "the session's egress proxy to end", timeout=30)
    submitted = api(service, api_key, "POST", "/remote-dispatch", json={
        "prompt": "answer hi", "cloudBrowserSessionId": created["session_id"]})
    assert submitted.status_code == 409 and "has ended (timed_out)" in submitted.json()["message"]


def test_a_stop_written_by_another_machine_revokes_the_cdp_credential_at_once(app, service):
    """The relay asks the database, not its own machine: a stop that only reached the row (made on another
    machine, the holding one unreachable) refuses new connections and closes the open one within seconds; then
    the holding machine's web process, reading the row, ends the browser."""
    from app.sessions import browsers, service as sessions

    api_key = make_key("cdp-revoked", plan="pro")
    created = api(service, api_key, "POST", "/cloud-browser/create-cloud-browser-session", json={}).json()
    headers = [f"{name}: {value}" for name, value in created["cdp_auth_headers"].items()]
    cdp = websocket.create_connection(created["cdp_websocket_url"], header=headers, timeout=30)
    row = session_row(created["session_id"])
    try:
        cdp.send(json.dumps({"id": 1, "method": "Browser.getVersion"}))
        assert "product" in json.loads(cdp.recv())["result"]
        with app.app_context():
            sessions._mark_ended(row.id, "complete")  # the row only: no process of this machine is told
        cdp.settimeout(15)
        deadline = time.monotonic() + 15
        with pytest.raises((websocket.WebSocketConnectionClosedException, ConnectionError)):
            while time.monotonic() < deadline:  # answered until the relay reads the row (about a second), then cut
                cdp.send(json.dumps({"id": 2, "method": "Browser.getVersion"}))
                cdp.recv()
                time.sleep(0.2)
        with pytest.raises((websocket.WebSocketBadStatusException, ConnectionError)) as refused:
            websocket.create_connection(created["cdp_websocket_url"], header=headers, timeout=10)
        assert getattr(refused.value, "status_code", 401) == 401
        wait_until(lambda: profile_processes(row.profile_dir) == [], "the holder to end the browser", timeout=30)
        wait_until(lambda: proxies_under(egress_dir(app.config, row.id)) == [], "its egress proxy to end", timeout=30)
        wait_until(lambda: session_row(row.id).pid is None, "the row to say nothing is left to end", timeout=30)
    finally:
        cdp.close()
        browsers.terminate(row.webdriver_url, row.webdriver_session, row.host, row.pid, row.profile_dir,
                           extra_pids=(row.cdp_proxy_pid,), egress=browsers.egress_dir(app.config, row.id))


def cdp_session(service, name):
    """A session with CDP access (a pro key's): the key, the session (its id, CDP URL, ...) and the credential's
    headers."""
    api_key = make_key(name, plan="pro")
    created = api(service, api_key, "POST", "/cloud-browser/create-cloud-browser-session", json={}).json()
    return api_key, created, [f"{name}: {value}" for name, value in created["cdp_auth_headers"].items()]


def cdp_call(ws, number, method, params=None, session=None, events=None):
    """Send one command and return its reply; the events that come first are added to `events`."""
    ws.send(json.dumps({"id": number, "method": method, "params": params or {},
                        **({"sessionId": session} if session else {})}))
    while True:
        message = json.loads(ws.recv())
        if message.get("id") == number:
            assert "error" not in message, message
            return message["result"]
        if events is not None:
            events.append(message)


def refusal(url, headers):
    """The status and {error, message} body a new CDP connection to `url` is refused with."""
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(url, header=headers, timeout=60)
    return refused.value.status_code, json.loads(refused.value.resp_body)


def test_a_download_made_over_cdp_is_listed_under_its_suggested_name(service, site):
    """Playwright asks Chromium to name downloads by their GUID (allowAndName, into a folder of its own): the
    session still lists the file as the site named it, as it lists a task's download."""
    api_key, created, headers = cdp_session(service, "cdp-download")
    ws = websocket.create_connection(created["cdp_websocket_url"], header=headers, timeout=30)
    events = []
    try:
        cdp_call(ws, 1, "Browser.setDownloadBehavior", {"behavior": "allowAndName", "eventsEnabled": True,
                                                        "downloadPath": "/tmp/playwright-artifacts-x"})
        pages = cdp_call(ws, 2, "Target.getTargets")["targetInfos"]
        page = next(target["targetId"] for target in pages if target["type"] == "page")
        attached = cdp_call(ws, 3, "Target.attachToTarget", {"targetId": page, "flatten": True})["sessionId"]
        cdp_call(ws, 4, "Page.navigate", {"url": site.url("/report.csv")}, session=attached, events=events)
        while not any(event.get("method") == "Browser.downloadProgress" and event["params"]["state"] == "completed"
                      for event in events):
            events.append(json.loads(ws.recv()))
    finally:
        ws.close()
    assert [event["params"]["suggestedFilename"] for event in events
            if event.get("method") == "Browser.downloadWillBegin"] == ["report.csv"]
    listed = wait_until(lambda: api(service, api_key, "GET", "/cloud-browser/replay/downloads", params={
        "session_id": created["session_id"]}).json()["downloaded_files"], "the session's downloads listing", timeout=30)
    assert [(item["file_name"], item["size"]) for item in listed] == [("report.csv", 21)]


def test_a_new_cdp_connection_to_a_machine_that_does_not_answer_says_so_and_the_session_comes_back(app, service):
    """A machine cut off the network drops what is sent to it: the relay says that machine does not answer and
    the session may come back (it does, once the machine answers again); a browser that is gone is said so."""
    from app.models import SessionHost, now

    _, created, headers = cdp_session(service, "cdp-cut-off")
    url, session_id = created["cdp_websocket_url"], created["session_id"]
    discovery = url.replace("ws://", "http://").split("/devtools/", 1)[0] + "/json/version"
    row = session_row(session_id)
    holder = row.host
    # A loopback port whose listen queue is full: the kernel drops every new connection's SYN, as a network that
    # lost the machine does.
    silent = socket.create_server(("127.0.0.1", 0), backlog=0)
    filler = socket.create_connection(silent.getsockname(), timeout=5)
    cut_off = f"cut-off-{secrets.token_hex(4)}"
    try:
        db.session.add(SessionHost(host=cut_off, url="http://127.0.0.1:%d" % silent.getsockname()[1], seen_at=now()))
        db.session.execute(db.update(CloudSession).where(CloudSession.id == session_id).values(host=cut_off))
        db.session.commit()
        status, body = refusal(url, headers)
        assert status == 503 and body["error"] == "Service Unavailable", body
        assert "the machine holding this session's browser does not answer" in body["message"]
        assert "the session may come back" in body["message"]
        listed = requests.get(discovery, headers=created["cdp_auth_headers"], timeout=60)
        assert listed.status_code == 503 and listed.json() == body and listed.headers["Retry-After"]
    finally:
        db.session.execute(db.update(CloudSession).where(CloudSession.id == session_id).values(host=holder))
        db.session.commit()
        filler.close()
        silent.close()
    # The machine answers again: so does the session.
    ws = websocket.create_connection(url, header=headers, timeout=30)
    try:
        assert "product" in cdp_call(ws, 1, "Browser.getVersion")
    finally:
        ws.close()
    os.killpg(row.pid, signal.SIGKILL)  # now the browser is gone, and its machine says so
    status, body = refusal(url, headers)
    assert (status, body) == (502, {"error": "Bad Gateway", "message": "the browser is gone"})


def test_a_task_in_a_session_whose_browser_is_gone_ends_at_once_with_a_clear_error(service, api_key):
    created = create(service, api_key, session_name="gone")
    row = session_row(created["session_id"])
    os.killpg(row.pid, signal.SIGKILL)  # its chromedriver and sandbox: the WebDriver endpoint answers no more
    body = run_and_wait(service, api_key, {"prompt": "/Operator\nextract h1",
                                           "cloudBrowserSessionId": created["session_id"]})
    assert body["status"] == "error" and "cannot be reached" in body["response"]["text"], body
    assert body["usage"] == {"actions": 0, "credits": 0.0}  # the SDK refuses a null usage
    assert session_row(created["session_id"]).end_reason == "error"  # it cannot serve another task
    again = api(service, api_key, "POST", "/remote-dispatch", json={
        "prompt": "/Operator\nextract h1", "cloudBrowserSessionId": created["session_id"]})
    assert again.status_code == 409 and "has ended (error)" in again.json()["message"]


def test_a_task_whose_session_browser_goes_away_mid_run_ends_with_a_clear_error(service, api_key, site):
    created = create(service, api_key, session_name="goes away")
    row = session_row(created["session_id"])
    submitted = api(service, api_key, "POST", "/remote-dispatch", json={
        "prompt": f"/Operator\ngo to {site.url('/page/first')}\nwait 4\nextract h1",
        "cloudBrowserSessionId": created["session_id"]})
    request_id = submitted.json()["requestId"]
    poll = lambda: api(service, api_key, "GET", f"/remote-dispatch/responses/{request_id}").json()  # noqa: E731
    wait_until(lambda: len((poll().get("progress") or {}).get("actionTrace") or []) >= 1, "the first step",
               timeout=120)
    os.killpg(row.pid, signal.SIGKILL)  # its WebDriver endpoint goes, as with its machine, during the wait
    body = wait_until(lambda: (lambda b: b if b["completedAt"] else None)(poll()), "the task", timeout=120)
    assert body["status"] == "error" and "cannot be reached" in body["response"]["text"], body
    assert body["usage"]["actions"] >= 1


def test_a_session_whose_machine_went_quiet_ends_as_error_and_its_tasks_are_told_why(app, service, api_key):
    from app.models import SessionHost, now_plus
    from app.sessions import browsers

    from app.models import ApiKey, Task, now

    created = create(service, api_key, session_name="lost machine")
    session_id = created["session_id"]
    try:
        # A task of the session queued for its machine, which no worker there will take.
        key_id = db.session.execute(db.select(ApiKey.id).where(ApiKey.prefix == api_key[:10])).scalar_one()
        queued = Task(api_key_id=key_id, agent="web", execution_mode="cloud_browser", prompt="/Operator\nextract h1",
                      cloud_session_id=session_id, dispatched_at=now())
        db.session.add(queued)
        # Its browser's machine stops saying it is alive, as when it is switched off with its worker.
        db.session.execute(db.update(CloudSession).where(CloudSession.id == session_id)
                           .values(host="gone-machine", egress_host="gone-machine"))
        db.session.add(SessionHost(host="gone-machine", seen_at=now_plus(-3600)))
        db.session.commit()
        ended = wait_until(lambda: (lambda r: r if r.status == "ended" else None)(session_row(session_id)),
                           "beat's sweep", timeout=60)
        assert ended.end_reason == "error" and "stopped answering" in ended.end_message
        assert ended.cdp_token_sealed is None
        task = wait_until(lambda: (lambda b: b if b["completedAt"] else None)(
            api(service, api_key, "GET", f"/remote-dispatch/responses/{queued.id}").json()), "the sweep", timeout=10)
        assert task["status"] == "error" and "stopped answering" in task["response"]["text"], task
        assert task["usage"] == {"actions": 0, "credits": 0.0}  # told at once, never run, never retried
        refused = api(service, api_key, "POST", "/remote-dispatch", json={
            "prompt": "/Operator\nextract h1", "cloudBrowserSessionId": session_id})
        assert refused.status_code == 409, refused.text
        assert "has ended (error: the machine holding its browser stopped answering" in refused.json()["message"]
    finally:
        browsers.end_here(app.config, session_id)  # the test's own machine holds it in truth


def test_a_session_outlives_a_clean_restart_of_its_worker_slower_than_the_lost_time(app, service, api_key, site):
    """A deploy stops the tasks worker cleanly and starts it again later than SESSION_HOST_LOST_SECONDS, while beat
    and the sweeps go on (another worker runs them, as on a deployment's ops machine): the session is not lost,
    and the worker started again runs its next task in the same browser."""
    from app.browser_hosts import lost_sweep_seconds
    from tests.processes import WorkerProcess

    created = create(service, api_key)
    session_id = created["session_id"]
    browser_pid = session_row(session_id).pid
    sweeper = WorkerProcess(queues="control", name="sweeps")
    try:
        service.worker.stop()
        service.processes.remove(service.worker)
        # Longer than a silent machine takes to be lost: the threshold and two of beat's looks.
        time.sleep(app.config["SESSION_HOST_LOST_SECONDS"] + 2 * lost_sweep_seconds(app.config))
        assert session_row(session_id).status == "active", session_row(session_id).end_message
    finally:
        service.worker = service._started(WorkerProcess(concurrency=2, name="sdk"))
        sweeper.stop()
    body = run_and_wait(service, api_key, {"prompt": f"/Operator\ngo to {site.url('/page/again')}\nextract h1",
                                           "cloudBrowserSessionId": session_id})
    assert (body["status"], body["response"]["text"]) == ("success", "again"), body
    assert session_row(session_id).pid == browser_pid  # the same browser, held again


def test_another_keys_session_is_not_found(service, api_key, other_key):
    created = create(service, api_key)
    session_id = created["session_id"]
    for method, path, kwargs in [
        ("POST", "/cloud-browser/stop-cloud-browser-session", {"json": {"session_id": session_id}}),
        ("GET", "/cloud-browser/replay/downloads", {"params": {"session_id": session_id}}),
        ("GET", "/cloud-browser/replay/download-url", {"params": {"session_id": session_id, "key": "x.csv"}}),
        ("POST", "/remote-dispatch", {"json": {"prompt": "answer hi", "cloudBrowserSessionId": session_id}}),
        ("POST", "/remote-dispatch", {"json": {"prompt": "answer hi", "browserWindowId": created["browser_window_id"]}}),
    ]:
        reply = api(service, other_key, method, path, **kwargs)
        assert reply.status_code == 404, (path, reply.text)
        assert set(reply.json()) == {"error", "message"}
    assert session_row(session_id).status == "active"  # the other key's stop did nothing


def test_tasks_in_one_session_run_one_at_a_time(service, api_key, site):
    created = create(service, api_key)
    target = {"cloudBrowserSessionId": created["session_id"], "browserWindowId": created["browser_window_id"]}
    # Submitted together, two workers free: were they to share the tab at once, the first would read "second".
    first = api(service, api_key, "POST", "/remote-dispatch", json={
        "prompt": f"/Operator\ngo to {site.url('/page/first')}\nwait 2\nextract h1", **target}).json()["requestId"]
    second = api(service, api_key, "POST", "/remote-dispatch", json={
        "prompt": f"/Operator\ngo to {site.url('/page/second')}\nextract h1", **target}).json()["requestId"]
    results = {}
    for request_id in (first, second):
        results[request_id] = wait_until(lambda: (lambda b: b if b["completedAt"] else None)(
            api(service, api_key, "GET", f"/remote-dispatch/responses/{request_id}").json()), "tasks", timeout=120)
    assert results[first]["response"]["text"] == "first"
    assert results[second]["response"]["text"] == "second"


def test_a_kept_session_s_browser_shows_the_detectors_no_automation(service, api_key, detectors):
    """BotD and fpscanner in a kept session's browser, in its first task and in the next one (another attach)."""
    created = create(service, api_key)
    target = {"cloudBrowserSessionId": created["session_id"], "browserWindowId": created["browser_window_id"]}
    for _ in range(2):
        detectors.forget()
        body = run_and_wait(service, api_key, {"prompt": detect_steps(detectors), **target})
        assert body["response"]["text"] == "Detectors done", body
        found = detectors.wait("detect")
        assert set(detections(found)) == STILL_SEEN and found["botd"] == {"bot": False}


def test_files_the_session_downloaded_reach_the_sdk(service, api_key, site):
    result = run_sdk(service, api_key, f'''
        import aiohttp
        from narada import Agent, AgentKind, LambdaEnvironment
        env = LambdaEnvironment()
        try:
            done = await Agent(environment=env, kind=AgentKind.OPERATOR_MINI).run("""go to {site.url("/downloads")}
        click "Download the report"
        wait 1""")
            files = await env.get_downloaded_files()
            async with aiohttp.ClientSession() as http:  # the link needs no API key
                async with http.get(files[0].download_url) as reply:
                    content = await reply.text()
            emit(status=done.status, names=[f.file_name for f in files], size=files[0].size, content=content)
        finally:
            await env.close()
    ''')
    assert result.value == {"status": "success", "names": ["report.csv"], "size": 21,
                            "content": "region,total\nnorth,7\n"}


def test_a_task_s_download_in_a_session_is_a_file_of_the_key_and_stays_in_the_session_listing(
        service, api_key, other_key, site):
    created = create(service, api_key)
    body = run_and_wait(service, api_key, {
        "prompt": f"/Operator\ngo to {site.url('/downloads')}\nclick \"Download the report\"\nanswer done",
        "cloudBrowserSessionId": created["session_id"], "allowedDomains": [site.url("/").split("/")[2]]})
    assert body["status"] == "success", body
    (stored,) = body["response"]["files"]
    assert stored == {"key": stored["key"], "filename": "report.csv", "size": 21, "contentType": "text/csv"}
    reply = api(service, api_key, "GET", f"/files/{stored['key']}")
    assert reply.status_code == 200 and reply.content == b"region,total\nnorth,7\n"
    assert api(service, other_key, "GET", f"/files/{stored['key']}").status_code == 404
    listed = api(service, api_key, "GET", "/files").json()["files"]
    assert [(item["key"], item["requestId"], item["sessionId"]) for item in listed] == [
        (stored["key"], body["requestId"], created["session_id"])]
    # The session's own listing (the SDK's get_downloaded_files) still has it; listing it stores no second copy.
    downloads = api(service, api_key, "GET", "/cloud-browser/replay/downloads",
                    params={"session_id": created["session_id"]}).json()["downloaded_files"]
    assert [item["file_name"] for item in downloads] == ["report.csv"]
    assert len(api(service, api_key, "GET", "/files").json()["files"]) == 1


def test_cloud_browser_environment_connects_over_cdp_and_runs_the_agent_there(service, site, detectors):
    api_key, other_key = make_key("cdp-user", plan="pro"), make_key("cdp-other", plan="pro")  # free: no CDP
    detectors.forget()
    result = run_sdk(service, api_key, f'''
        import aiohttp
        from playwright.async_api import async_playwright
        from narada import Agent, BrowserConfig, CloudBrowserEnvironment
        env = CloudBrowserEnvironment(config=BrowserConfig(interactive=False), session_name="cdp")
        await env.start()
        try:
            response = await Agent(environment=env).run("""go to {site.url("/login")}
        type grace into "#u"
        type ${{PASSWORD}} into "#p"
        click "Sign in"
        extract h1""", secret_variables={{"PASSWORD": {PASSWORD!r}}})
            direct_url = (await Agent(environment=env).get_url()).url  # a direct action in the same browser
            # Over CDP ourselves, with the session's credential: the agent's login is in this browser.
            headers = await env._generate_cdp_auth_headers()
            async with async_playwright() as playwright:
                browser = await playwright.chromium.connect_over_cdp(env._cdp_websocket_url, headers=headers)
                page = await browser.contexts[0].new_page()
                await page.goto({site.url("/account")!r})
                account = await page.locator("h1").inner_text()
                await page.goto({detectors.url("/detect")!r})  # what Playwright itself shows a page
                await page.locator("h1", has_text="Detectors done").wait_for()
                await page.close()
                await browser.close()
                refused = []
                for bad in ({{}}, {{"Authorization": "Bearer not-the-token"}}):
                    try:
                        await playwright.chromium.connect_over_cdp(env._cdp_websocket_url, headers=bad, timeout=5000)
                        refused.append(False)
                    except Exception as exc:
                        refused.append("401" in str(exc) or "Unauthorized" in str(exc))
            emit(text=response.text, status=response.status, account=account, refused=refused, direct_url=direct_url,
                 session=env.cloud_browser_session_id, window=env.browser_window_id, url=env._cdp_websocket_url,
                 headers=headers)
        finally:
            await env.close()
    ''')
    value = result.value
    assert value["status"] == "success" and value["text"] == "Welcome grace"
    assert value["account"] == "Signed in as grace"
    # Through our relay, only what Playwright adds itself: it enables the Runtime domain on the pages it attaches to
    # (docs/browser-identity.md, "Your own client over our CDP URL").
    assert set(detections(detectors.wait("detect"))) == STILL_SEEN | {"fpscanner.hasCDP"}
    assert value["direct_url"].startswith(site.url("/session?"))
    assert value["refused"] == [True, True]
    row = session_row(value["session"])
    assert row.browser_window_id == value["window"] and row.status == "ended"
    assert profile_processes(row.profile_dir) == []
    # The credential ended with the session: the web tier's relay refuses it, and the API will not hand it out again.
    assert requests.get(value["url"].replace("ws://", "http://"), headers=value["headers"],
                        timeout=5).status_code == 401
    again = api(service, api_key, "POST", "/cloud-browser/generate-cdp-auth-headers",
                json={"cdp_websocket_url": value["url"]})
    assert again.status_code == 409
    other = api(service, other_key, "POST", "/cloud-browser/generate-cdp-auth-headers",
                json={"cdp_websocket_url": value["url"]})
    assert other.status_code == 404


def test_remote_browser_environment_round_trip_in_a_session(service, api_key, site):
    result = run_sdk(service, api_key, f'''
        import base64
        from narada import Agent, LambdaEnvironment, RemoteBrowserEnvironment
        from narada_core.errors import NaradaError
        created = LambdaEnvironment()
        await created.start()
        env = RemoteBrowserEnvironment(browser_window_id=created._browser_window_id,
                                       cloud_browser_session_id=created.session_id)
        agent = Agent(environment=env)
        await agent.go_to_url(url={site.url("/page/direct")!r})
        url = (await agent.get_url()).url
        heading = await agent.execute_javascript_on_page(code="document.querySelector('h1').textContent")
        doubled = await agent.execute_javascript_on_page(code="const n = 21; return n * 2;")
        simplified = (await agent.get_simplified_html()).html
        shot = await agent.get_screenshot()
        png = base64.b64decode(shot.base64_content)[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
        run = await agent.run("extract h1")  # the agent goes on where the direct actions left the page
        # The selector actions and keys, as CloudBrowserEnvironment offers them, in the kept session.
        await agent.go_to_url(url={site.url("/login")!r})
        appeared = await agent.wait_for_element(selectors={{"id": "p"}}, state="visible", timeout=5000)
        await agent.agentic_selector(action={{"type": "fill", "value": "grace"}}, selectors={{"id": "u"}},
                                     fallback_operator_query="the user field")
        await agent.agentic_selector(action={{"type": "fill", "value": {PASSWORD!r}}},
                                     selectors={{"name": "password", "type": "password"}},
                                     fallback_operator_query="the password field")
        await agent.press_key(events=[{{"type": "keyDown", "code": "Enter", "key": "Enter"}},
                                      {{"type": "keyUp", "code": "Enter", "key": "Enter"}}])
        welcomed = await agent.wait_for_element(selectors={{"tag_name": "h1", "text_content": "Welcome grace"}},
                                                state="visible", timeout=10000)
        heading_text = (await agent.agentic_selector(action={{"type": "get_text"}}, selectors={{"tag_name": "h1"}},
                                                     fallback_operator_query="the heading")).value
        gone = await agent.wait_for_element(selectors={{"id": "u"}}, state="hidden", timeout=2000)
        missing = await agent.wait_for_element(selectors={{"id": "nowhere"}}, state="visible", timeout=500)
        try:
            await agent.agentic_selector(action={{"type": "click"}}, selectors={{"id": "nowhere"}},
                                         fallback_operator_query="a button that is not there")
            unmatched = None
        except NaradaError as exc:
            unmatched = str(exc)
        await env.close()  # stops the session
        try:
            await agent.get_url()
            after_stop = None
        except Exception as exc:
            after_stop = str(exc)
        emit(url=url, heading=heading, doubled=doubled, simplified="direct" in simplified, png=png,
             run=[run.status, run.text], waits=[appeared, welcomed, gone, missing], heading_text=heading_text,
             unmatched=unmatched, after_stop=after_stop, session=created.session_id)
    ''')
    value = result.value
    assert value["url"] == site.url("/page/direct") and value["heading"] == "direct" and value["doubled"] == 42
    assert value["simplified"] and value["png"]
    assert value["run"] == ["success", "direct"]
    assert value["waits"] == [True, True, True, False] and value["heading_text"] == "Welcome grace"
    assert "No element matches the selectors" in value["unmatched"]
    assert "409" in value["after_stop"] and "has ended" in value["after_stop"]
    row = session_row(value["session"])
    assert row.status == "ended" and profile_processes(row.profile_dir) == []


def test_direct_actions_run_exactly_once_and_returned_urls_name_the_public_address(service, site):
    """Back-to-back /extension-actions each start a server on the worker: only one serves, each command once.
    The session's URLs come from PUBLIC_URL (here the live service's own address), not from the Host header."""
    api_key = make_key("cdp-once", plan="pro")  # a CDP session: free keys have none
    reply = requests.post(service.api_base + "/cloud-browser/create-cloud-browser-session", json={}, timeout=120,
                          headers={"x-api-key": api_key, "Host": "evil.example"})
    assert reply.status_code == 200, reply.text
    created = reply.json()
    assert created["login_url"].startswith(service.base + "/fast/v2/cloud-browser/login/")
    assert urlsplit(created["cdp_websocket_url"]).hostname == "127.0.0.1" and "evil" not in reply.text

    def action(name, **args):
        answer = api(service, api_key, "POST", "/extension-actions", json={
            "action": {"name": name, **args}, "actionExecutionId": secrets.token_hex(4),
            "browserWindowId": created["browser_window_id"]})
        assert answer.status_code == 200 and answer.json()["status"] == "success", answer.text
        return json.loads(answer.json()["data"]) if answer.json()["data"] else None

    first, second = site.url("/page/first"), site.url("/page/second")
    action("go_to_url", url=first, new_tab=False)
    counts = [action("execute_javascript_on_page", code="window.__n = (window.__n || 0) + 1; return window.__n;")
              for _ in range(6)]
    assert [count["result"] for count in counts] == [1, 2, 3, 4, 5, 6]
    row = session_row(created["session_id"])
    browser = KeptSessionBrowser(webdriver_url=row.webdriver_url, webdriver_session=row.webdriver_session)
    before = [tab["url"] for tab in browser.tabs()]
    action("go_to_url", url=second, new_tab=True)
    assert [tab["url"] for tab in browser.tabs()] == before + [second]  # one new tab, not two
    assert action("close_tab") == {"closes_window": False}
    assert [tab["url"] for tab in browser.tabs()] == before  # the new one closed, the original kept
    assert action("get_url") == {"url": first}
    assert action("execute_javascript_on_page", code="window.__n") == {"result": 6}


def test_a_direct_action_while_the_queue_is_down_is_refused_with_503_and_never_runs_later(service, site):
    """The worker that runs a session's direct actions is reached through RabbitMQ: with it down, and no worker
    still serving the window, the caller gets a 503 saying the action was not run, and the command is
    withdrawn, so a worker serving the window later does not run it behind the caller's back."""
    from sqlalchemy import text

    from app import create_app
    from workers.session_actions import LOCK_CLASS

    api_key = make_key("queue-down", plan="pro")
    created = create(service, api_key)
    window = created["browser_window_id"]
    count = {"name": "execute_javascript_on_page",
             "code": "window.__n = (window.__n || 0) + 1; return window.__n;"}

    def body(action):
        return {"browserWindowId": window, "actionExecutionId": secrets.token_hex(4), "action": action}

    opened = api(service, api_key, "POST", "/extension-actions", json=body(
        {"name": "go_to_url", "url": site.url("/page/first"), "new_tab": False}))
    assert opened.status_code == 200, opened.text

    queue_down = create_app({"BROKER_URL": "amqp://guest:guest@127.0.0.1:1//"})
    serving = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = :kind "
                   "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
    wait_until(lambda: db.session.execute(serving, {"kind": LOCK_CLASS}).scalar() == 0 or db.session.rollback(),
               "the worker serving the session's actions to stop", timeout=30)
    with queue_down.app_context():
        refused = queue_down.test_client().post("/fast/v2/extension-actions", json=body(count),
                                                headers={"x-api-key": api_key})
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "5", (refused.headers, refused.get_json())
    assert refused.get_json() == {"error": "Service Unavailable", "message": (
        "The task queue is unavailable, so the action was not run; retry in a few seconds.")}

    counted = api(service, api_key, "POST", "/extension-actions", json=body(count))
    assert counted.status_code == 200, counted.text
    assert json.loads(counted.json()["data"]) == {"result": 1}  # the refused increment never ran


def test_downloads_of_sessions_ended_long_ago_are_purged_by_the_files_sweep(app, api_key):
    from datetime import datetime, timedelta, timezone

    from app.models import ApiKey, BrowserWindow
    from app.sessions.browsers import downloads_dir
    from workers.sweeps import purge_expired_files

    key_id = db.session.query(ApiKey.id).filter(ApiKey.name == "alice").scalar()
    ttl = app.config["FILE_TTL_SECONDS"]
    folders = {}
    for name, ended_ago in (("old", ttl + 60), ("recent", 60)):
        window = BrowserWindow(api_key_id=key_id, label=name)
        db.session.add(window)
        db.session.flush()
        folder = downloads_dir(app.config, f"cbs_{name}")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.csv").write_text("a,b\n")
        db.session.add(CloudSession(id=f"cbs_{name}", api_key_id=key_id, browser_window_id=window.id,
                                    timeout_seconds=60, status="ended", end_reason="complete",
                                    profile_dir=str(folder.parent / "profile"),
                                    ended_at=datetime.now(timezone.utc) - timedelta(seconds=ended_ago)))
        folders[name] = folder
    db.session.commit()
    purge_expired_files()
    assert not folders["old"].parent.exists() and session_row("cbs_old").profile_dir is None
    assert (folders["recent"] / "report.csv").exists()


@pytest.fixture(scope="module")
def remote_webdriver():
    """A W3C WebDriver endpoint of our own standing in for a Selenium Grid (SELENIUM_REMOTE_URL)."""
    from tests.grid import unprivileged_chromedriver
    from tests.processes import ManagedProcess, free_port

    port = free_port()
    # Like a Grid node: Chromium as rd-browser with its sandbox (our flags never carry --no-sandbox).
    proc = ManagedProcess([unprivileged_chromedriver(), f"--port={port}"], "remote-webdriver")
    url = f"http://127.0.0.1:{port}"

    def ready():
        try:
            return requests.get(url + "/status", timeout=1).json()["value"]["ready"]
        except (requests.RequestException, ValueError, KeyError):
            return False
    proc.wait_until(ready, timeout=30)
    yield url, proc
    proc.stop()


def test_with_selenium_remote_url_the_session_lives_there_and_tasks_reattach(app, service, api_key, site,
                                                                            remote_webdriver):
    from tests.processes import WorkerProcess

    url, driver_proc = remote_webdriver
    service.worker.stop()  # a worker without the Grid's setting would start the session's browser itself
    live = LiveService(env={"SELENIUM_REMOTE_URL": url})
    try:
        created = create(live, api_key)
        row = session_row(created["session_id"])
        assert row.host == "grid" and row.webdriver_url == url and row.pid is None  # nothing started here
        target = {"cloudBrowserSessionId": created["session_id"]}
        login = run_and_wait(live, api_key, {
            "prompt": f'/Operator\ngo to {site.url("/login")}\ntype lin into "#u"\ntype ${{PASSWORD}} into "#p"\n'
                      'click "Sign in"\nextract h1', "secretVariables": {"PASSWORD": PASSWORD}, **target})
        account = run_and_wait(live, api_key, {"prompt": f"/Operator\ngo to {site.url('/account')}\nextract h1",
                                               **target})
        assert [login["response"]["text"], account["response"]["text"]] == ["Welcome lin", "Signed in as lin"]
        assert requests.get(f"{url}/session/{row.webdriver_session}/url", timeout=5).ok
        api(live, api_key, "POST", "/cloud-browser/stop-cloud-browser-session",
            json={"session_id": created["session_id"]})
        # Stopping ended the remote session (the endpoint closed its browser).
        assert requests.get(f"{url}/session/{row.webdriver_session}/url", timeout=5).status_code == 404
    finally:
        live.stop()
        service.worker = service._started(WorkerProcess(concurrency=2, name="sdk"))


def test_a_grid_url_with_credentials_is_called_with_basic_auth():
    """SELENIUM_REMOTE_URL=http://user:password@grid/... (a Grid behind basic auth): every WebDriver call the
    sessions make sends the credentials; a URL without them sends none, and a Grid that is down is not alive."""
    from app.sessions import browsers

    seen = []

    class Grid(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(200 if self.headers.get("Authorization") else 401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"value": "about:blank"}')

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Grid)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        assert browsers.is_alive(f"http://grid%20user:s%3Acret@127.0.0.1:{port}/wd/hub", "abc")
        assert not browsers.is_alive(f"http://127.0.0.1:{port}/wd/hub", "abc")  # 401: no credentials sent
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [("/wd/hub/session/abc/url", "Basic " + base64.b64encode(b"grid user:s:cret").decode()),
                    ("/wd/hub/session/abc/url", None)]
    assert not browsers.is_alive(f"http://127.0.0.1:{port}/wd/hub", "abc")  # nothing listens any more
