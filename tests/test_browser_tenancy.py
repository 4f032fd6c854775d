"""Tenancy of browsers on an instance with private addresses allowed: one key's browser, task or CDP reaches nothing of
another key's browser nor of the service's own endpoints; CDP reaches pages, not Chromium's insides (issue 31)."""
import base64
import json
import os
import time
from urllib.parse import urlsplit

import pytest
import requests

from app import browser_hosts
from app.egress import endpoints
from app.egress.proxy import proxies_under
from app.sandbox import processes as sandbox_processes
from app.sessions import browsers
from tests.browser_pages import RecordingServer
from tests.conftest import TEST_BROKER_URL, TEST_DATABASE_URL, make_key, wait_until
from tests.devtools import devtools_websocket
from tests.processes import BeatProcess, WebProcess, WorkerProcess
from tests.test_hostile_cdp import RawCdp, refused
from workers.browser.selenium_driver import SeleniumBrowser

pytestmark = pytest.mark.slow
OWN_ENDPOINT = "this service's own endpoint"
REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="module")
def service(app):
    """The web process, a worker and beat (its sweep ends idle sessions), ALLOW_PRIVATE_URLS=true (conftest)."""
    started = []
    try:
        for make in (WebProcess, lambda: WorkerProcess(name="tenancy"), BeatProcess):
            started.append(make())
        yield started[0]
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture(scope="module")
def intranet():
    """An operator's intranet page on loopback: it must stay reachable. /probe#<port>,<port> tries each port on
    127.0.0.1 and localhost."""
    probe = ("<html><head><title>probe</title></head><body><script>"
             "const targets = location.hash.slice(1).split(',').filter(Boolean)"
             ".flatMap(port => ['http://127.0.0.1:' + port + '/', 'http://localhost:' + port + '/']);"
             "Promise.allSettled(targets.map(u => fetch(u, {mode: 'no-cors'}))).then(() =>"
             " fetch('/intranet').then(r => r.text())).then(t => { document.title = 'probed ' + t;"
             " document.body.insertAdjacentHTML('beforeend', '<p>probed ' + t + '</p>'); });</script></body></html>")
    server = RecordingServer({"/probe": probe, "/intranet": "intranet-ok",
                              "/hello": "<html><head><title>Hello</title></head><body>hello</body></html>"})
    yield server
    server.close()


def api(service, key, method, path, **kwargs):
    reply = requests.request(method, f"{service.base}/fast/v2{path}", headers={"x-api-key": key}, timeout=120,
                             **kwargs)
    assert reply.status_code < 300, reply.text
    return reply.json()


def run(service, key, body):
    request_id = api(service, key, "POST", "/remote-dispatch", json=body)["requestId"]
    return wait_until(lambda: (lambda b: b if b["completedAt"] else None)(
        api(service, key, "GET", f"/remote-dispatch/responses/{request_id}")), "the task", timeout=120)


def cdp_session(service, key, **body):
    return api(service, key, "POST", "/cloud-browser/create-cloud-browser-session", json=body)


def stop(service, key, session_id):
    api(service, key, "POST", "/cloud-browser/stop-cloud-browser-session", json={"session_id": session_id})


def service_ports(app, service, session):
    """{what: port} of the service's own endpoints a browser could try: its dependencies, the worker's stream endpoint
    (which reaches every browser's DevTools) and A's egress proxy (the web port is the public API, and serves the
    login page a kept browser opens; the CDP relay is one of its routes)."""
    proxy_port = int((browsers.egress_dir(app.config, session["session_id"]) / "port").read_text())
    with app.app_context():
        stream = browser_hosts.url_of(browser_hosts.this_host())
    return {"postgres": urlsplit(TEST_DATABASE_URL).port, "rabbitmq": urlsplit(TEST_BROKER_URL).port,
            "redis": urlsplit(os.environ.get("RATELIMIT_STORAGE_URI", REDIS)).port,
            "stream endpoint": urlsplit(stream).port, "egress proxy": proxy_port}


def host_listeners_of(pids):
    """The host's listening TCP sockets held by these processes."""
    listening = {inode for inodes in endpoints._listeners().values() for inode in inodes}
    held = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in listening:
                held.add((pid, link))
    return held


def probe_url(intranet, ports):
    return intranet.url("/probe") + "#" + ",".join(str(port) for port in ports.values())


def refused_ports(lines):
    return {int(port) for line in lines if OWN_ENDPOINT in line
            for port in [line.split(":", 2)[1].split()[0] if line.count(":") >= 2 else ""] if port.isdigit()}


def test_no_browser_listens_on_the_host_and_no_other_key_reaches_the_service(app, service, intranet):
    owner, other, free = make_key("tenant-a", plan="pro"), make_key("tenant-b", plan="pro"), make_key("free-c")
    a = cdp_session(service, owner)
    b = cdp_session(service, other)
    try:
        # Nothing of A's browser listens on the host: chromedriver and DevTools are Unix sockets in its box (its
        # egress proxy does, outside the box: the browser reaches it through a Unix socket too).
        root = browsers.session_dir(app.config, a["session_id"])
        proxy = set(proxies_under(browsers.egress_dir(app.config, a["session_id"])))
        box = [pid for pid, directory in sandbox_processes.processes_under(root.parent).items()
               if directory == str(root) and pid not in proxy]
        assert box and host_listeners_of(box) == set()
        ports = service_ports(app, service, a)
        expected = set(ports.values())

        # B's kept session over CDP: its page tries every endpoint; its egress proxy refuses each one.
        cdp = RawCdp(b["cdp_websocket_url"], b["cdp_auth_headers"])
        try:
            target = cdp.send("Target.createTarget", {"url": "about:blank"})["result"]["targetId"]
            page = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["result"]["sessionId"]
            cdp.send("Page.navigate", {"url": probe_url(intranet, ports)}, session=page)
            wait_until(lambda: "probed intranet-ok" in str(cdp.send("Runtime.evaluate", {
                "expression": "document.title", "returnByValue": True}, session=page)), "B's probe", timeout=60)
        finally:
            cdp.close()
        refusals = [json.loads(line) for line in
                    (browsers.egress_dir(app.config, b["session_id"]) / "refusals.jsonl").read_text().splitlines()]
        assert {r["port"] for r in refusals if OWN_ENDPOINT in r["reason"]} >= expected, (ports, refusals)

        # A free key's cloud_browser task: the same, in its trace.
        body = run(service, free, {"prompt": f"/Operator\ngo to {probe_url(intranet, ports)}\nwait for \"probed\"",
                                   "executionMode": "cloud_browser"})
        assert body["status"] == "success", (body["response"]["text"], body["response"]["actionTrace"])
        lines = [r for entry in body["response"]["actionTrace"] for r in entry.get("refused", [])]
        assert refused_ports(lines) >= expected, (ports, lines)

        # A free key's cloud task (pages read over HTTP): each endpoint is refused, the intranet page is read.
        for port in (ports["stream endpoint"], ports["postgres"], ports["egress proxy"]):
            body = run(service, free, {"prompt": f"/Operator\ngo to http://127.0.0.1:{port}/json/list",
                                       "executionMode": "cloud"})
            assert body["status"] == "error" and OWN_ENDPOINT in body["response"]["text"], body
        body = run(service, free, {"prompt": f"/Operator\ngo to {intranet.url('/hello')}", "executionMode": "cloud"})
        assert body["status"] == "success", body
        assert sum(path == "/intranet" for path, _ in intranet.requests) >= 2  # both browsers' probes got there
    finally:
        stop(service, owner, a["session_id"])
        stop(service, other, b["session_id"])


def test_cdp_reaches_pages_not_chromiums_own_targets_nor_its_trace(app, service):
    key = make_key("webui-prober", plan="pro")
    created = cdp_session(service, key)
    raw = devtools_websocket(_row(app, created["session_id"])["debugger_address"])  # below the relay: what an attacker would be after
    try:
        raw.send(json.dumps({"id": 1, "method": "Target.createTarget",
                             "params": {"url": "chrome://omnibox-popup.top-chrome/"}}))
        webui = _reply(raw, 1)["result"]["targetId"]
        raw.send(json.dumps({"id": 2, "method": "Target.getTargets", "params": {"filter": [{}]}}))
        internal = [t["targetId"] for t in _reply(raw, 2)["result"]["targetInfos"]
                    if t["type"] not in ("page", "tab", "iframe", "worker", "service_worker", "shared_worker")
                    or t["url"].startswith(("chrome", "devtools"))]
        assert webui in internal
    finally:
        raw.close()
    relay = created["cdp_websocket_url"].split("/devtools/")[0].replace("ws://", "http://")
    listed = requests.get(relay + "/json/list", headers=created["cdp_auth_headers"], timeout=10).json()
    assert listed and not [t for t in listed if t["id"] in internal or t["url"].startswith("chrome")]
    cdp = RawCdp(created["cdp_websocket_url"], created["cdp_auth_headers"])
    try:
        shown = cdp.send("Target.getTargets")["result"]["targetInfos"]
        assert shown and not [t for t in shown if t["targetId"] in internal or t["url"].startswith("chrome")]
        for target in internal:
            refused(cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True}), "browser's own")
            refused(cdp.send("Target.activateTarget", {"targetId": target}), "browser's own")
        inner = json.dumps({"id": 1, "method": "Runtime.evaluate", "params": {"expression": "1"}})
        refused(cdp.send("Target.sendMessageToTarget", {"targetId": webui, "message": inner}), "browser's own")
        # Auto-attach (as Playwright and Puppeteer do) attaches pages only.
        cdp.send("Target.setDiscoverTargets", {"discover": True})
        cdp.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True})
        time.sleep(1)
        seen = [m["params"].get("targetInfo", {}) for m in cdp.received
                if m.get("method") in ("Target.attachedToTarget", "Target.targetCreated", "Target.targetInfoChanged")]
        assert seen and not [t for t in seen if t.get("targetId") in internal or t.get("url", "").startswith("chrome")]
        page = next(m["params"]["sessionId"] for m in cdp.received if m.get("method") == "Target.attachedToTarget")
        # Tracing (the command line, the host's facts) and streams not given to the caller are refused.
        refused(cdp.send("Tracing.start", {"transferMode": "ReturnAsStream"}), "command line")
        refused(cdp.send("Tracing.getCategories"), "command line")
        refused(cdp.send("IO.read", {"handle": "1"}), "stream")
        refused(cdp.send("SystemInfo.getProcessInfo"), "server machine")
        # A stream the caller was given stays readable.
        pdf = cdp.send("Page.printToPDF", {"transferMode": "ReturnAsStream"}, session=page)["result"]["stream"]
        chunk = cdp.send("IO.read", {"handle": pdf, "size": 100}, session=page)
        data = chunk["result"]["data"]
        assert "%PDF" in (base64.b64decode(data).decode("latin-1") if chunk["result"].get("base64Encoded") else data)
    finally:
        cdp.close()
        stop(service, key, created["session_id"])
    assert "--proxy-server" not in cdp.text() and str(app.config["VAR_DIR"]) not in cdp.text()


def test_cdp_traffic_keeps_a_kept_session_alive_until_it_goes_quiet(app, service):
    key = make_key("cdp-only", plan="pro")
    created = cdp_session(service, key, session_timeout=3)
    cdp = RawCdp(created["cdp_websocket_url"], created["cdp_auth_headers"])
    try:
        for _ in range(8):  # 8 s of CDP use, well past the 3 s timeout and several of beat's sweeps
            assert "error" not in cdp.send("Browser.getVersion")
            time.sleep(1)
        assert _row(app, created["session_id"])["status"] == "active"
    finally:
        cdp.close()
    wait_until(lambda: _row(app, created["session_id"])["status"] == "ended", "the quiet session to end", timeout=60)
    assert _row(app, created["session_id"])["end_reason"] == "timed_out"


def test_a_fenced_https_navigation_says_which_fence_refused_which_host(service, intranet):
    key = make_key("fenced")
    body = run(service, key, {"prompt": "/Operator\ngo to https://outside.example.test/start",
                              "executionMode": "cloud_browser", "allowedDomains": [f"127.0.0.1:{intranet.port}"]})
    assert body["status"] == "error", body
    text = body["response"]["text"]
    assert "allowedDomains" in text and "outside.example.test" in text and "ERR_TUNNEL" not in text, text


def test_a_fresh_browser_starts_on_about_blank_and_lists_no_chrome_tab(app):
    browser = SeleniumBrowser(profile_root=os.path.join(app.config["VAR_DIR"], "browsers"))
    try:
        assert browser.current_url() == "about:blank"
        browser.driver.switch_to.new_window("tab")
        assert [tab["url"] for tab in browser.tabs()] == ["about:blank", "about:blank"]
    finally:
        browser.close()


def _row(app, session_id):
    """The session's row as the database has it now."""
    from app.extensions import db
    from app.models import CloudSession

    with app.app_context():
        db.session.rollback()
        row = db.session.get(CloudSession, session_id, populate_existing=True)
        return {"status": row.status, "end_reason": row.end_reason, "debugger_address": row.debugger_address}


def _reply(ws, number):
    while True:
        message = json.loads(ws.recv())
        if message.get("id") == number:
            return message
