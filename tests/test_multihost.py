"""The Procfile deployed as Procfiles are deployed: two web machines, a worker machine and one for webhooks,
control and beat, each a network + mount + UTS + pid namespace of this machine (tests/multihost.py) with its own
VAR_DIR and /tmp, joined on a private bridge, sharing only Postgres, RabbitMQ and Redis. The caller talks to the
web machines only, and, for everything that touches a browser, to web2: the web machine that did not create the
session.

One deployment serves the whole module. The site the browsers visit is served from this (host) side on the
bridge's address, which every machine reaches as its gateway. The test that switches the worker machine off
runs last.
"""
import json
import os
import secrets
import signal
import statistics
import threading
import time
from types import SimpleNamespace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests
import websocket
from sqlalchemy import create_engine, text

from config import settings
from tests.conftest import FIGURES, wait_until
from tests.multihost import Deployment, cmdline
from tests.sdk_support import require_sdk, run_sdk
from tests.test_live import BUTTON, FIELD, FORM, Viewer

pytestmark = [pytest.mark.slow, pytest.mark.alone]
LAYOUT = {"web1": ["web"], "web2": ["web"], "worker1": ["worker"], "ops": ["webhooks", "control", "beat"]}
SETTINGS = {
    "SWEEP_INTERVAL_SECONDS": "1",  # SESSION_HOST_LOST_SECONDS is the default's: its figure is measured here
    "EXTENSION_ACTION_MAX_SECONDS": "20",  # a direct action that cannot be carried out fails in seconds, not minutes
    "BROWSER_POOL_SIZE": "0", "SESSION_POOL_SIZE": "0",  # browsers start cold: fewer Chromiums on a small machine
}
BROWSER_NAMES = ("chromium", "chromedriver")
REPORT = b"region,total\nnorth,7\n"
LOST_BOUND_SECONDS = 20  # issue 56: a killed machine's tasks end `error` at most this long after the kill
POLL_MARGIN_SECONDS = 2  # a caller's poll sees that end up to one round trip (through web2) later
BURNERS = 10  # busy processes on the worker machine: a load of 10 is no loss


class Site:
    """The outside world the browsers visit: pages, a form for the live view, a download, and a page that reaches
    for another server (the canary, on another port: outside an allowedDomains fence naming the site's)."""

    def __init__(self, address):
        self.canary_hits = []
        site = self

        class Canary(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                site.canary_hits.append(self.path)
                self.send_response(204)
                self.end_headers()

        self.canary = ThreadingHTTPServer((address, 0), Canary)
        canary = f"http://{address}:{self.canary.server_address[1]}"
        pages = {
            "/form": FORM,
            "/downloads": "<h1>Reports</h1><a href='/report.csv' id='csv'>Download the report</a>",
            "/reach-out": (f"<h1>fenced</h1><img src='{canary}/img.png'><script>fetch('{canary}/fetch')"
                           ".catch(() => 0)</script>"),
        }

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = urlsplit(self.path).path
                if path == "/report.csv":
                    self._send(REPORT, "text/csv", {"Content-Disposition": "attachment; filename=report.csv"})
                elif path in pages or path.startswith("/page/"):
                    body = pages.get(path) or f"<h1>{path.rsplit('/', 1)[1]}</h1>"
                    if not body.startswith("<html"):
                        body = f"<html><head><title>Site</title></head><body>{body}</body></html>"
                    self._send(body.encode(), "text/html; charset=utf-8")
                else:
                    self.send_response(404)
                    self.end_headers()

            def _send(self, data, content_type, headers=None):
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.host = f"{address}:{self.server.server_address[1]}"
        for server in (self.server, self.canary):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://{self.host}{path}"

    def close(self):
        for server in (self.server, self.canary):
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def deployment():
    require_sdk()
    with Deployment(LAYOUT, env=SETTINGS) as built:
        try:
            yield built
        finally:
            print(built.logs())  # shown by pytest when a test of the module failed


@pytest.fixture(scope="module")
def site(deployment):
    served = Site(deployment.gateway)
    yield served
    served.close()


@pytest.fixture(scope="module")
def keys(deployment):
    """A pro key (CDP needs one) and another caller's key, made with `remote-dispatch keys create` on web1."""
    return deployment.create_key("alice", "pro"), deployment.create_key("bob", "pro")


@pytest.fixture(scope="module")
def database(deployment):
    engine = create_engine(deployment.database_url)
    yield engine
    engine.dispose()


# --- helpers ---------------------------------------------------------------------------------------------------

def api(deployment, machine, key, method, path, **kwargs):
    return requests.request(method, deployment.api(machine) + path, headers={"x-api-key": key}, timeout=120,
                            **kwargs)


def create_session(deployment, key, machine="web1", cdp=False, **body):
    path = "/cloud-browser/create-cloud-browser-session" if cdp else \
        "/cloud-browser/create-and-initialize-cloud-browser-session"
    reply = api(deployment, machine, key, "POST", path, json={"require_extension": False, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def stop_session(deployment, key, session_id, machine="web2"):
    return api(deployment, machine, key, "POST", "/cloud-browser/stop-cloud-browser-session",
               json={"session_id": session_id})


def submit(deployment, key, body, machine="web2"):
    reply = api(deployment, machine, key, "POST", "/remote-dispatch", json=body)
    assert reply.status_code == 202, reply.text
    return reply.json()["requestId"]


def result(deployment, key, request_id, machine="web2", timeout=90):
    """The finished task as its caller polls it; fails with its last state after `timeout` seconds."""
    last = {}

    def finished():
        last.update(api(deployment, machine, key, "GET", f"/remote-dispatch/responses/{request_id}").json())
        return last if last.get("completedAt") else None
    try:
        return wait_until(finished, "the task to finish", timeout=timeout)
    except AssertionError:
        raise AssertionError(f"task {request_id} unfinished after {timeout}s: {json.dumps(last)[:2000]}") from None


def run_task(deployment, key, body, machine="web2", timeout=90):
    return result(deployment, key, submit(deployment, key, body, machine), machine, timeout)


def session_row(database, session_id):
    with database.connect() as conn:
        return conn.execute(text("SELECT * FROM cloud_sessions WHERE id = :id"), {"id": session_id}).mappings().one()


def browser_processes(machine, session_id=None):
    """Chromium and chromedriver processes running on `machine` (those of one session, given its id)."""
    return [pid for pid in machine.processes()
            if any(name in cmdline(pid).split(" ", 1)[0] for name in BROWSER_NAMES)
            and (session_id is None or session_id in cmdline(pid))]


def through(url, deployment, machine):
    """`url` as a load balancer would send it to `machine`: its host swapped for that machine's address."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{deployment.machine(machine).address}{port}"))


def cdp_command(ws, method, ident):
    """One CDP command's round trip; returns its result (events on the way are skipped)."""
    ws.send(json.dumps({"id": ident, "method": method}))
    while True:
        message = json.loads(ws.recv())
        if message.get("id") == ident:
            assert "result" in message, message
            return message["result"]


def cdp_connect(url, headers, timeout=20):
    return websocket.create_connection(url, header=[f"{k}: {v}" for k, v in headers.items()], timeout=timeout)


def cdp_headers(deployment, key, url, machine):
    reply = api(deployment, machine, key, "POST", "/cloud-browser/generate-cdp-auth-headers",
                json={"cdp_websocket_url": url})
    assert reply.status_code == 200, reply.text
    return reply.json()["auth_headers"]


def refused(url, headers):
    """True when the URL's CDP endpoint does not take these credentials (401, or nothing listens any more)."""
    try:
        cdp_connect(url, headers, timeout=5).close()
    except websocket.WebSocketBadStatusException as exc:
        return exc.status_code in (401, 403, 404, 409)
    except (ConnectionError, OSError, websocket.WebSocketException):
        return True
    return False


def waits(n):
    return [f"wait 0.{300 + i}" for i in range(n)]


# --- what works across machines today ---------------------------------------------------------------------------

def test_every_machine_is_ready_and_sees_only_its_own_files(deployment):
    for machine in ("web1", "web2"):
        assert requests.get(deployment.url(machine) + "/readyz", timeout=10).json() == {"status": "ready"}
    env = deployment.env_for("web1")
    deployment.machine("web1").run("echo web1 > /tmp/var/mark", env)
    assert deployment.machine("web1").run("cat /tmp/var/mark; hostname", env).split() == [
        "web1", deployment.machine("web1").hostname]
    assert deployment.machine("worker1").run("ls /tmp/var", deployment.env_for("worker1")).split().count("mark") == 0


def test_cloud_and_cloud_browser_tasks_through_web2_with_their_recording_and_gif(deployment, keys, site):
    key = keys[0]
    general = run_task(deployment, key, {"prompt": "answer hi", "executionMode": "cloud"})
    assert (general["status"], general["response"]["text"]) == ("success", "hi"), general
    browsed = run_task(deployment, key, {"prompt": f"/Operator\ngo to {site.url('/page/hello')}\nextract h1",
                                         "executionMode": "cloud_browser", "generateGif": True})
    assert (browsed["status"], browsed["response"]["text"]) == ("success", "hello"), browsed
    assert browsed["usage"]["actions"] >= 2
    request_id = browsed["requestId"]
    # Recorded by the worker machine, stored in the database: any web machine hands them out.
    for machine in ("web1", "web2"):
        gif = api(deployment, machine, key, "GET", f"/remote-dispatch/responses/{request_id}/gif")
        assert gif.status_code == 200 and gif.content[:4] == b"GIF8", (machine, gif.status_code, gif.text[:300])
        recording = api(deployment, machine, key, "GET", f"/remote-dispatch/responses/{request_id}/recording")
        assert recording.status_code == 200, (machine, recording.text[:300])
        assert site.url("/page/hello") in recording.text
    assert browser_processes(deployment.machine("web1")) == browser_processes(deployment.machine("web2")) == []


def test_a_stop_through_web2_refuses_the_old_cdp_credential_at_once(deployment, keys):
    key = keys[0]
    created = create_session(deployment, key, cdp=True)
    url, headers = created["cdp_websocket_url"], created["cdp_auth_headers"]
    assert headers == cdp_headers(deployment, key, url, "web2")  # the credential, fetched from the other machine
    ws = cdp_connect(url, headers)
    try:
        assert "product" in cdp_command(ws, "Browser.getVersion", 1)
        stopped_at = time.monotonic()
        stopped = stop_session(deployment, key, created["session_id"])
        assert stopped.status_code == 200 and stopped.json()["success"] is True, stopped.text
        wait_until(lambda: refused(url, headers), "the old credential to be refused", timeout=10)
        refused_after = time.monotonic() - stopped_at

        def cut():
            try:
                cdp_command(ws, "Browser.getVersion", 2)
                return False
            except (websocket.WebSocketException, ConnectionError, OSError, ValueError):  # ValueError: b"" read
                return True
        wait_until(cut, "the open CDP connection to be closed", timeout=10)
    finally:
        ws.close()
    again = api(deployment, "web2", key, "POST", "/cloud-browser/generate-cdp-auth-headers",
                json={"cdp_websocket_url": url})
    assert again.status_code == 409, again.text
    print(f"MEASURE stop through web2 -> old CDP credential refused: {refused_after * 1000:.0f} ms")


# --- the target (issue 40): browsers on the worker machines, everything through any web process ----------------

def test_a_stop_through_web2_ends_the_browser_on_the_worker_machine_within_seconds(deployment, keys, database):
    key = keys[0]
    created = create_session(deployment, key, machine="web1", cdp=True)
    session_id = created["session_id"]
    worker = deployment.machine("worker1")
    try:
        # The session's browser lives on the worker machine; no web machine runs a browser.
        assert session_row(database, session_id)["host"] == worker.hostname
        assert browser_processes(worker, session_id)
        assert browser_processes(deployment.machine("web1")) == browser_processes(deployment.machine("web2")) == []
    finally:
        stopped_at = time.monotonic()
        stopped = stop_session(deployment, key, session_id)
    assert stopped.status_code == 200, stopped.text
    assert refused(created["cdp_websocket_url"], created["cdp_auth_headers"])
    wait_until(lambda: browser_processes(worker, session_id) == [], "the browser's processes to end", timeout=15)
    print(f"MEASURE stop through web2 -> last browser process gone on the worker machine: "
          f"{(time.monotonic() - stopped_at) * 1000:.0f} ms")


def test_a_task_and_a_direct_action_in_a_session_made_through_web1_run_through_web2(deployment, keys, site):
    key = keys[0]
    created = create_session(deployment, key, machine="web1")
    try:
        body = run_task(deployment, key, {"prompt": f"/Operator\ngo to {site.url('/page/kept')}\nextract h1",
                                          "cloudBrowserSessionId": created["session_id"]}, timeout=60)
        assert (body["status"], body["response"]["text"]) == ("success", "kept"), body
        assert body["usage"]["actions"] >= 2
        action = api(deployment, "web2", key, "POST", "/extension-actions", json={
            "action": {"name": "execute_javascript_on_page", "code": "return document.querySelector('h1').textContent"},
            "actionExecutionId": secrets.token_hex(4), "browserWindowId": created["browser_window_id"]})
        assert action.status_code == 200 and action.json()["status"] == "success", action.text
        assert json.loads(action.json()["data"])["result"] == "kept"
    finally:
        stop_session(deployment, key, created["session_id"])


def test_the_sdk_cloud_browser_environment_made_through_web1_runs_the_agent_and_cdp_through_web2(
        deployment, keys, site, database):
    key = keys[0]
    web2 = deployment.api("web2")
    sdk = run_sdk(SimpleNamespace(api_base=deployment.api("web1")), key, f'''
        from playwright.async_api import async_playwright
        from narada import Agent, BrowserConfig, CloudBrowserEnvironment
        env = CloudBrowserEnvironment(config=BrowserConfig(interactive=False), session_name="multihost")
        await env.start()                  # created through web1
        env._base_url = {web2!r}           # and used through web2 from here on
        try:
            response = await Agent(environment=env).run("""go to {site.url("/page/sdk")}
        extract h1""")
            direct_url = (await Agent(environment=env).get_url()).url
            headers = await env._generate_cdp_auth_headers()
            async with async_playwright() as playwright:
                browser = await playwright.chromium.connect_over_cdp(env._cdp_websocket_url, headers=headers)
                page = await browser.contexts[0].new_page()
                await page.goto({site.url("/page/over-cdp")!r})
                heading = await page.locator("h1").inner_text()
                await page.close()
                await browser.close()
            emit(status=response.status, text=response.text, direct_url=direct_url, heading=heading,
                 session=env.cloud_browser_session_id)
        finally:
            await env.close()
    ''')
    value = sdk.value
    assert value == {"status": "success", "text": "sdk", "direct_url": site.url("/page/sdk"),
                     "heading": "over-cdp", "session": value["session"]}, sdk.stderr[-3000:]
    row = session_row(database, value["session"])
    assert row["status"] == "ended" and row["host"] == deployment.machine("worker1").hostname


def test_cdp_through_web2_keeps_the_session_from_the_idle_sweep(deployment, keys, database):
    key = keys[0]
    created = create_session(deployment, key, machine="web1", cdp=True, session_timeout=6)
    url = created["cdp_websocket_url"]
    rtts = {}
    try:
        for machine in ("web1", "web2"):  # a load balancer may send the connection to either web machine
            ws = cdp_connect(through(url, deployment, machine), cdp_headers(deployment, key, url, machine))
            try:
                samples = []
                for i in range(20):
                    started = time.perf_counter()
                    cdp_command(ws, "Browser.getVersion", i + 1)
                    samples.append(time.perf_counter() - started)
                rtts[machine] = statistics.median(samples) * 1000
                if machine == "web2":
                    for i in range(15):  # CDP use only, over twice the idle limit: the session stays
                        cdp_command(ws, "Browser.getVersion", 100 + i)
                        time.sleep(1)
                    assert session_row(database, created["session_id"])["status"] == "active"
            finally:
                ws.close()
        ended = wait_until(lambda: (lambda r: r if r["status"] == "ended" else None)(
            session_row(database, created["session_id"])), "the idle sweep once CDP stopped", timeout=30)
        assert ended["end_reason"] == "timed_out"
    finally:
        stop_session(deployment, key, created["session_id"])
    print(f"MEASURE CDP round trip p50: web1 {rtts['web1']:.1f} ms, web2 {rtts['web2']:.1f} ms")


def test_the_live_view_and_takeover_of_a_task_through_web2(deployment, keys, site):
    key = keys[0]
    prompt = "\n".join(["/Operator", f"go to {site.url('/form')}", *waits(40), "extract #greeting"])
    request_id = submit(deployment, key, {"prompt": prompt, "executionMode": "cloud_browser"})
    wait_until(lambda: api(deployment, "web2", key, "GET", f"/remote-dispatch/responses/{request_id}").json()
               .get("progress", {}).get("actionTrace"), "the task's first step", timeout=60)
    reply = api(deployment, "web2", key, "GET", f"/remote-dispatch/responses/{request_id}/live",
                params={"mode": "control"})
    assert reply.status_code == 200, reply.text
    viewer = Viewer(reply.json()["liveUrl"])
    try:
        wait_until(lambda: viewer.of("frame"), "a frame of the task's browser", timeout=30)
        viewer.send({"type": "take"})
        wait_until(lambda: viewer.control() == "person", "the viewer to learn the agent paused", timeout=30)
        frames = len(viewer.of("frame"))
        viewer.click(FIELD)
        viewer.send({"type": "text", "text": "ada"})
        viewer.click(BUTTON)
        wait_until(lambda: len(viewer.of("frame")) > frames, "a frame of the changed page", timeout=30)
        viewer.send({"type": "handback"})
        done = result(deployment, key, request_id, timeout=90)
    finally:
        viewer.close()
    assert (done["status"], done["response"]["text"]) == ("success", "Thanks ada"), done


def test_the_live_view_of_a_session_made_through_web1_through_web2(deployment, keys, site):
    key = keys[0]
    created = create_session(deployment, key, machine="web1")
    session_id = created["session_id"]
    try:
        body = run_task(deployment, key, {"prompt": f"/Operator go to {site.url('/form')}",
                                          "cloudBrowserSessionId": session_id}, timeout=60)
        assert body["status"] == "success", body
        reply = api(deployment, "web2", key, "GET", f"/cloud-browser/sessions/{session_id}/live",
                    params={"mode": "control"})
        assert reply.status_code == 200, reply.text
        viewer = Viewer(reply.json()["liveUrl"])
        try:
            wait_until(lambda: viewer.of("frame"), "a frame of the session's page", timeout=30)
            assert viewer.control() == "idle"
            frames = len(viewer.of("frame"))
            viewer.click(FIELD)
            viewer.send({"type": "text", "text": "kim"})
            viewer.click(BUTTON)
            wait_until(lambda: len(viewer.of("frame")) > frames, "a frame after the person's input", timeout=30)
            after = run_task(deployment, key, {"prompt": "/Operator extract #greeting",
                                               "cloudBrowserSessionId": session_id}, timeout=60)
            assert after["response"]["text"] == "Thanks kim", after
            stop_session(deployment, key, session_id)
            wait_until(lambda: viewer.of("ended"), "the viewer to learn the session ended", timeout=15)
        finally:
            viewer.close()
    finally:
        stop_session(deployment, key, session_id)


def test_a_sessions_downloads_are_listed_and_served_through_web2(deployment, keys, site):
    key = keys[0]
    created = create_session(deployment, key, machine="web1")
    session_id = created["session_id"]
    try:
        body = run_task(deployment, key, {
            "prompt": f"/Operator\ngo to {site.url('/downloads')}\nclick \"Download the report\"\nwait 1",
            "cloudBrowserSessionId": session_id}, timeout=60)
        assert body["status"] == "success", body
        listing = api(deployment, "web2", key, "GET", "/cloud-browser/replay/downloads",
                      params={"session_id": session_id})
        assert listing.status_code == 200, listing.text
        files = listing.json()["downloaded_files"]
        assert [item["file_name"] for item in files] == ["report.csv"], files
        presigned = api(deployment, "web2", key, "GET", "/cloud-browser/replay/download-url",
                        params={"session_id": session_id, "key": files[0]["key"]})
        assert presigned.status_code == 200, presigned.text
        link = requests.get(through(presigned.json()["presigned_url"], deployment, "web2"), timeout=30)  # no key
        assert link.status_code == 200 and link.content == REPORT
    finally:
        stop_session(deployment, key, session_id)


def test_a_tasks_allowed_domains_fence_holds_in_a_session_made_through_web1(deployment, keys, site):
    key = keys[0]
    created = create_session(deployment, key, machine="web1")
    site.canary_hits.clear()
    try:
        body = run_task(deployment, key, {
            "prompt": f"/Operator\ngo to {site.url('/reach-out')}\nwait 1\nextract h1",
            "cloudBrowserSessionId": created["session_id"], "allowedDomains": [site.host]}, timeout=60)
        assert (body["status"], body["response"]["text"]) == ("success", "fenced"), body
        time.sleep(1)  # a request the page makes late counts too
        assert site.canary_hits == []  # the page's image and fetch to the other server never left the browser
    finally:
        stop_session(deployment, key, created["session_id"])


def test_a_machine_at_load_10_keeps_its_sessions(deployment, keys, site, database):
    """Ten busy processes on the worker machine, for twice SESSION_HOST_LOST_SECONDS: its heartbeat (a thread of
    its own) still gets through, so beat loses no session, and the session still runs a task."""
    key = keys[0]
    created = create_session(deployment, key, machine="web1")
    session_id = created["session_id"]
    worker = deployment.machine("worker1")
    lost_after = settings.load()["SESSION_HOST_LOST_SECONDS"]  # the default: SETTINGS leaves it
    burn = worker.popen(f"sh -c 'for i in $(seq {BURNERS}); do (while :; do :; done) & done; wait'",
                        deployment.env_for("worker1"), "burners")
    try:
        wait_until(lambda: len(worker.processes_matching("while :")) > BURNERS, "the busy processes", timeout=10)
        started, loads = time.monotonic(), []
        while time.monotonic() - started < 2 * lost_after:
            assert session_row(database, session_id)["status"] == "active", dict(session_row(database, session_id))
            loads.append(float(open("/proc/loadavg").read().split()[0]))
            time.sleep(1)
    finally:
        os.killpg(burn.pid, signal.SIGKILL)
        burn.wait(10)
    try:
        body = run_task(deployment, key, {"prompt": f"/Operator\ngo to {site.url('/page/busy')}\nextract h1",
                                          "cloudBrowserSessionId": session_id}, timeout=60)
        assert (body["status"], body["response"]["text"]) == ("success", "busy"), body
    finally:
        stop_session(deployment, key, session_id)
    FIGURES["worker machine at 10 busy processes: session kept over"] = (
        f"{2 * lost_after:.0f} s (1-min load average up to {max(loads):.1f})")


def test_a_killed_worker_machine_ends_its_sessions_as_error_and_fails_their_tasks(deployment, keys, site, database):
    """Last: the worker machine is switched off (every process on it killed). With the default
    SESSION_HOST_LOST_SECONDS its session and its running and queued tasks end `error` within 20 s of the kill."""
    key = keys[0]
    created = create_session(deployment, key, machine="web1")
    session_id = created["session_id"]
    try:
        target = {"cloudBrowserSessionId": session_id}
        running = submit(deployment, key, {
            "prompt": "\n".join(["/Operator", f"go to {site.url('/page/before')}", *waits(60), "extract h1"]), **target})
        wait_until(lambda: api(deployment, "web2", key, "GET", f"/remote-dispatch/responses/{running}").json()
                   .get("progress", {}).get("actionTrace"), "the task's first step", timeout=30)
        queued = submit(deployment, key, {"prompt": "/Operator\nextract h1", **target})  # waits for the first
        deployment.machine("worker1").kill()
        killed_at, killed_clock = time.monotonic(), time.time()  # the machines share this one's clock
        bodies = [result(deployment, key, request_id, timeout=max(
            killed_at + LOST_BOUND_SECONDS + POLL_MARGIN_SECONDS - time.monotonic(), 0.5))
            for request_id in (running, queued)]
        seen_after = time.monotonic() - killed_at
        for body in bodies:
            assert body["status"] == "error" and "stopped answering" in body["response"]["text"], body
            assert body["usage"] is not None, body  # the SDK's AgentUsage refuses null
        assert bodies[1]["usage"] == {"actions": 0, "credits": 0.0}, bodies[1]  # the queued one: nothing ran
        ended = session_row(database, session_id)
        assert ended["status"] == "ended" and ended["end_reason"] == "error", dict(ended)
        assert "stopped answering" in (ended["end_message"] or ""), dict(ended)
        refused_task = api(deployment, "web2", key, "POST", "/remote-dispatch", json={
            "prompt": "/Operator\nextract h1", **target})
        assert refused_task.status_code == 409 and "stopped answering" in refused_task.json()["message"]
        with database.connect() as conn:
            ended_clock = conn.execute(text("SELECT extract(epoch FROM max(completed_at)) FROM tasks WHERE id IN "
                                            "(:a, :b)"), {"a": running, "b": queued}).scalar_one()
        figure = f"{float(ended_clock) - killed_clock:.1f} s (seen by the caller polling web2: {seen_after:.1f} s)"
        FIGURES["worker machine killed -> its session's tasks ended error"] = figure
        print(f"MEASURE worker machine killed -> session ended error and tasks failed: {figure}")
    finally:
        stop_session(deployment, key, session_id)
